//! A [`Page`] as a manual page in roff, with the `man(7)` macros: `.TH`, then `.SH` NAME,
//! SYNOPSIS, DESCRIPTION, OPTIONS, ENVIRONMENT, EXIT STATUS, EXAMPLES and SEE ALSO, one `.TP`
//! per option, variable and status.

use super::{Arg, Block, Item, Page};

/// Escapes text for roff: a backslash as `\e`, a minus as `\-` (so options copy as ASCII), and
/// `\&` before a `.` or `'` that would start a line (a request otherwise).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split('\n') {
        if !out.is_empty() {
            out.push('\n');
        }
        let line = line.trim_start();
        if line.starts_with('.') || line.starts_with('\'') {
            out.push_str("\\&");
        }
        for c in line.chars() {
            match c {
                '\\' => out.push_str("\\e"),
                '-' => out.push_str("\\-"),
                c => out.push(c),
            }
        }
    }
    out
}

/// Text written in `-h` with hard line breaks, as one roff paragraph (roff fills it).
fn para(text: &str) -> String {
    escape(&text.replace('\n', " "))
}

/// An option's label: names in bold, the argument in italics.
fn label(names: &[&str], arg: Arg) -> String {
    let names: Vec<String> = names
        .iter()
        .map(|n| format!("\\fB{}\\fR", escape(n)))
        .collect();
    let names = names.join(", ");
    match arg {
        Arg::None => names,
        Arg::Words(m) => format!("{names} \\fI{}\\fR", escape(m)),
        Arg::Equals(m) => format!("{names}=\\fI{}\\fR", escape(m)),
        Arg::OptionalEquals(m) => format!("{names}[=\\fI{}\\fR]", escape(m)),
        Arg::OptionalWord(m) => format!("{names} [\\fI{}\\fR]", escape(m)),
    }
}

/// One `.TP` per item: the label in bold, then its help as a paragraph.
fn items(out: &mut String, items: &[Item]) {
    for i in items {
        out.push_str(".TP\n");
        out.push_str(&format!("\\fB{}\\fR\n", para(i.label)));
        out.push_str(&para(i.help));
        out.push('\n');
    }
}

/// The roff source of `page`.
pub fn render(page: &Page) -> String {
    let mut out = String::new();
    heading(&mut out, page);
    synopsis_and_description(&mut out, page);
    options(&mut out, page);
    environment(&mut out, page);
    if !page.exit_status.is_empty() {
        out.push_str(".SH \"EXIT STATUS\"\n");
        items(&mut out, page.exit_status);
    }
    examples(&mut out, page);
    see_also(&mut out, page);
    out
}

/// The `.TH` line, the fill settings and the NAME section.
fn heading(out: &mut String, page: &Page) {
    let title = page.name.to_ascii_uppercase();
    // The date is the build's (SOURCE_DATE_EPOCH when set): a package's pages are reproducible.
    out.push_str(&format!(
        ".TH \"{}\" \"{}\" \"{}\" \"kauri {}\" \"User Commands\"\n",
        escape(&title),
        page.section,
        crate::cli::info::BUILD_DATE,
        crate::cli::info::VERSION
    ));
    // No hyphenation and a ragged right margin: variable names stay whole and copyable.
    out.push_str(".nh\n.ad l\n");
    out.push_str(".SH NAME\n");
    out.push_str(&format!(
        "{} \\- {}\n",
        escape(page.name),
        escape(page.summary)
    ));
}

/// The SYNOPSIS (one line per form) and DESCRIPTION (one paragraph per text) sections.
fn synopsis_and_description(out: &mut String, page: &Page) {
    out.push_str(".SH SYNOPSIS\n");
    for (i, s) in page.synopsis.iter().enumerate() {
        if i > 0 {
            out.push_str(".br\n");
        }
        out.push_str(&para(s.label));
        out.push('\n');
    }
    out.push_str(".SH DESCRIPTION\n");
    for (i, d) in page.description.iter().chain(page.details).enumerate() {
        if i > 0 {
            out.push_str(".PP\n");
        }
        out.push_str(&para(d));
        out.push('\n');
    }
}

/// The OPTIONS section, if the page has options: a subsection per group when there are
/// several, one `.TP` per option with its other spellings.
fn options(out: &mut String, page: &Page) {
    if page.options.is_empty() {
        return;
    }
    out.push_str(".SH OPTIONS\n");
    for s in page.options {
        if page.options.len() > 1 {
            out.push_str(&format!(".SS \"{}\"\n", escape(s.title)));
        }
        for o in s.opts {
            out.push_str(".TP\n");
            out.push_str(&label(o.names, o.arg));
            out.push('\n');
            out.push_str(&para(o.help));
            out.push('\n');
            if !o.aliases.is_empty() {
                let also: Vec<String> = o
                    .aliases
                    .iter()
                    .map(|a| format!("\\fB{}\\fR", escape(a)))
                    .collect();
                out.push_str(&format!("Also spelled {}.\n", also.join(", ")));
            }
        }
    }
}

/// The ENVIRONMENT section, if the page has one: its variables, then its further blocks.
fn environment(out: &mut String, page: &Page) {
    if page.environment.is_empty() && page.environment_more.is_empty() {
        return;
    }
    out.push_str(".SH ENVIRONMENT\n");
    items(out, page.environment);
    for b in page.environment_more {
        match b {
            Block::Para(t) | Block::Note(t) | Block::Tail(t) => {
                out.push_str(".PP\n");
                out.push_str(&para(t));
                out.push('\n');
            }
            Block::List(_, list) => items(out, list),
        }
    }
}

/// The EXAMPLES section, if the page has examples: the command in bold, then what it does.
fn examples(out: &mut String, page: &Page) {
    if page.examples.is_empty() {
        return;
    }
    out.push_str(".SH EXAMPLES\n");
    for e in page.examples {
        out.push_str(".TP\n");
        out.push_str(&format!("\\fB{}\\fR\n", escape(e.command)));
        out.push_str(&para(e.what));
        out.push('\n');
    }
}

/// The SEE ALSO section, if the page names other pages: each name in bold, its section not.
fn see_also(out: &mut String, page: &Page) {
    if page.see_also.is_empty() {
        return;
    }
    out.push_str(".SH \"SEE ALSO\"\n");
    let refs: Vec<String> = page
        .see_also
        .iter()
        .map(|r| match r.split_once('(') {
            Some((name, sec)) => format!("\\fB{}\\fR({}", escape(name), sec),
            None => format!("\\fB{}\\fR", escape(r)),
        })
        .collect();
    out.push_str(&refs.join(",\n"));
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_requests_backslashes_and_minus() {
        assert_eq!(escape(".x"), "\\&.x");
        assert_eq!(escape("'q"), "\\&'q");
        assert_eq!(escape("a\\b"), "a\\eb");
        assert_eq!(escape("-n"), "\\-n");
        assert_eq!(escape("a\n  .b"), "a\n\\&.b");
    }

    #[test]
    fn every_page_has_its_sections_and_no_stray_request() {
        for p in crate::cli::doc::pages() {
            let r = render(p);
            for s in [".TH", ".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION"] {
                assert!(r.contains(s), "{}: {s}", p.name);
            }
            for line in r.lines() {
                assert!(!line.trim().is_empty(), "{}: a blank line", p.name);
                if let Some(req) = line.strip_prefix('.') {
                    let m = req.split(' ').next().unwrap_or("");
                    assert!(
                        ["TH", "nh", "ad", "SH", "SS", "TP", "PP", "br"].contains(&m),
                        "{}: {line}",
                        p.name
                    );
                }
            }
        }
    }
}
