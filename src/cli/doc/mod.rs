//! The documentation model: one description of each command, from which `kauri -h`, the
//! manual pages (`kauri --help-man PAGE`) and the shell completions (`kauri --completions
//! SHELL`) are all rendered, and through which `kauri`'s own parser recognises option names.
//!
//! A [`Page`] is one manual page: its name, synopsis, description, sections of options
//! ([`Opt`]), environment, exit statuses, examples. [`pages`] is the registry: a new page is
//! one more `Page` value there, and every renderer picks it up. This module owns only text;
//! it may not touch processes, sockets or the job.
//!
//! The renderers: [`help`] (the plain text of `-h`, wrapped by hand in the `help` strings:
//! a `\n` in them is a line break of `-h`, a space in the manual page), [`roff`] (`man(7)`
//! macros) and [`complete`] (bash, zsh and fish).

pub mod complete;
mod pages;
pub mod roff;

pub use pages::{KAURI, KAURI_AGENT, KAURI_KVS, KAURI_NAMESERVER, KAURI_PMI, MAP_BY, OBJECTS};

/// How an option takes its argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// A flag: no argument.
    None,
    /// The next words, named by these metavariables (`"NAME VALUE"`: two words).
    Words(&'static str),
    /// One value, written `--name=VALUE` (the next word is taken too).
    Equals(&'static str),
    /// An optional value, only as `--name=VALUE`: a separate word is not the option's.
    OptionalEquals(&'static str),
    /// An optional value, as the next word when there is one.
    OptionalWord(&'static str),
}

impl Arg {
    /// How many words after the option belong to it when it is not written `--name=VALUE`.
    pub fn words(self) -> usize {
        match self {
            Arg::None | Arg::OptionalEquals(_) => 0,
            Arg::Words(m) => m.split_whitespace().count(),
            Arg::Equals(_) | Arg::OptionalWord(_) => 1,
        }
    }
}

/// What an option's (first) argument completes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Anything: no completion.
    Any,
    /// One of these words.
    Words(&'static [&'static str]),
    /// A file name.
    File,
    /// A directory name.
    Dir,
    /// The name of a manual page of the registry ([`pages`]).
    Pages,
}

/// One option of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opt {
    /// Its names as shown (`-n`, `-np`), first the short one.
    pub names: &'static [&'static str],
    /// Other spellings the parser accepts (Hydra's older names), shown in the manual page only.
    pub aliases: &'static [&'static str],
    /// Its argument.
    pub arg: Arg,
    /// What its argument completes to.
    pub values: Values,
    /// What it does; `\n` breaks the line in `-h`.
    pub help: &'static str,
}

impl Opt {
    /// The option as `-h` shows it: `-n, -np N`, `--pmi=auto|pmi1|pmi2|pmix`, `--profile[=json]`.
    pub fn label(&self) -> String {
        self.label_of(&self.names.join(", "))
    }

    /// The option as `-h` shows it, with the other spellings the parser takes: `-hosts,
    /// -host, -H H1[:N],H2[:N]`.
    pub fn label_with_aliases(&self) -> String {
        Opt {
            names: &[],
            ..*self
        }
        .label_of(&self.all_names().collect::<Vec<_>>().join(", "))
    }

    /// The label with `names` written as given.
    fn label_of(&self, names: &str) -> String {
        match self.arg {
            Arg::None => names.to_string(),
            Arg::Words(m) => format!("{names} {m}"),
            Arg::Equals(m) => format!("{names}={m}"),
            Arg::OptionalEquals(m) => format!("{names}[={m}]"),
            Arg::OptionalWord(m) => format!("{names} [{m}]"),
        }
    }

    /// Every name the parser accepts for it.
    pub fn all_names(&self) -> impl Iterator<Item = &'static str> {
        self.names.iter().chain(self.aliases).copied()
    }
}

/// A labelled paragraph: a variable, an exit status, a usage line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    /// The label (`MPIEXEC_TIMEOUT=SECS`); `\n` breaks it over lines.
    pub label: &'static str,
    /// What it means; `\n` breaks the line in plain text.
    pub help: &'static str,
}

/// A piece of free text (`kauri --help-env`, a manual page's ENVIRONMENT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// A paragraph.
    Para(&'static str),
    /// Labelled items; in plain text, the help starts at this column.
    List(usize, &'static [Item]),
    /// A remark on the list before it (plain text: indented by two, no blank line around).
    Note(&'static str),
    /// A last line, with no blank line before it.
    Tail(&'static str),
}

/// A titled group of options (`Local options (per MPMD segment)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptSection {
    /// The title, as `-h` prints it (without the colon).
    pub title: &'static str,
    /// Its options, in order.
    pub opts: &'static [Opt],
    /// `-h` shows it (else only the manual page: options no person types).
    pub in_help: bool,
}

/// A command line and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Example {
    /// The command.
    pub command: &'static str,
    /// What it does.
    pub what: &'static str,
}

/// One manual page, and the usage text of its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// The page's name (`kauri-nameserver`), also its file name without `.1`.
    pub name: &'static str,
    /// The manual section.
    pub section: u8,
    /// One line for NAME.
    pub summary: &'static str,
    /// The usage lines: the command line, and an optional note beside it.
    pub synopsis: &'static [Item],
    /// What `-h` says under the usage lines; `\n` breaks lines.
    pub description: &'static [&'static str],
    /// What only the manual page says, after that.
    pub details: &'static [&'static str],
    /// The options, by section.
    pub options: &'static [OptSection],
    /// The variables `-h` lists.
    pub environment: &'static [Item],
    /// More about the environment, for the manual page (and `kauri --help-env`).
    pub environment_more: &'static [Block],
    /// The exit statuses.
    pub exit_status: &'static [Item],
    /// Examples.
    pub examples: &'static [Example],
    /// Related pages, as `mpiexec(1)`.
    pub see_also: &'static [&'static str],
    /// The words completed where an option could be (subcommands).
    pub words: &'static [&'static str],
}

impl Page {
    /// Every option, in order.
    pub fn opts(&self) -> impl Iterator<Item = &'static Opt> {
        self.options.iter().flat_map(|s| s.opts.iter())
    }

    /// The option called `name` (`-np`, `--np`, `-NP`: dashes and case as [`normalize`]).
    pub fn find(&self, name: &str) -> Option<&'static Opt> {
        let want = normalize(name);
        self.opts()
            .find(|o| o.all_names().any(|n| normalize(n) == want))
    }
}

/// The option names whose case carries a meaning: `-V` (kauri's `--version`, apart from
/// `-v`), `-H` (Open MPI's hosts, apart from `-h`), `-N` (Open MPI's processes per node,
/// apart from `-n`).
pub const CASED: &[&str] = &["-V", "-H", "-N"];

/// An option name as the parser compares it: one leading dash, lower case (Hydra matches with
/// `strcasecmp`), except the names of [`CASED`].
pub fn normalize(name: &str) -> String {
    let n = format!("-{}", name.trim_start_matches('-'));
    if CASED.contains(&n.as_str()) {
        n
    } else {
        n.to_ascii_lowercase()
    }
}

/// The registry: every manual page, `kauri` first. A new page is one more entry here.
static PAGES: [&Page; 5] = [
    &KAURI,
    &KAURI_AGENT,
    &KAURI_NAMESERVER,
    &KAURI_KVS,
    &KAURI_PMI,
];

/// Every manual page, `kauri` first.
pub fn pages() -> &'static [&'static Page] {
    &PAGES
}

/// The page called `name` (`kauri-kvs`; `kvs` too).
pub fn page(name: &str) -> Option<&'static Page> {
    pages()
        .iter()
        .find(|p| p.name == name || p.name.strip_prefix("kauri-") == Some(name))
        .copied()
}

/// Appends `label` and `help` as `-h` lays them out: the label at column 2, the help from
/// column `col` (on the next line when the label reaches it), its later lines at `col`.
fn item(out: &mut String, indent: usize, col: usize, label: &str, help: &str) {
    let labels: Vec<&str> = label.split('\n').collect();
    let (last, first) = labels.split_last().unwrap_or((&"", &[]));
    for l in first {
        out.push_str(&format!("{:indent$}{l}\n", ""));
    }
    out.push_str(&format!("{:indent$}{last}", ""));
    let mut lines = help.split('\n').filter(|_| !help.is_empty());
    let used = indent + last.len();
    match lines.next() {
        Some(h) if used < col => out.push_str(&format!("{:w$}{h}\n", "", w = col - used)),
        Some(h) => out.push_str(&format!("\n{:col$}{h}\n", "")),
        None => out.push('\n'),
    }
    for h in lines {
        out.push_str(&format!("{:col$}{h}\n", ""));
    }
}

/// The plain text of `-h` for `page`.
pub fn help(page: &Page) -> String {
    let mut out = String::new();
    for (i, s) in page.synopsis.iter().enumerate() {
        let lead = if i == 0 { "Usage: " } else { "       " };
        item(&mut out, 0, 49, &format!("{lead}{}", s.label), s.help);
    }
    for d in page.description {
        out.push('\n');
        out.push_str(d);
        out.push('\n');
    }
    for s in page.options.iter().filter(|s| s.in_help) {
        out.push_str(&format!("\n{}:\n", s.title));
        for o in s.opts {
            item(&mut out, 2, 26, &o.label_with_aliases(), o.help);
        }
    }
    if !page.environment.is_empty() {
        out.push_str("\nEnvironment:\n");
        for v in page.environment {
            item(&mut out, 2, 26, v.label, v.help);
        }
    }
    if !page.examples.is_empty() {
        out.push_str("\nExamples:\n");
        for e in page.examples {
            out.push_str(&format!("  {}\n      {}\n", e.command, e.what));
        }
    }
    out
}

/// The plain text of `blocks` (`kauri --help-env`).
pub fn blocks(blocks: &[Block]) -> String {
    let mut out = String::new();
    let mut prev: Option<&Block> = None;
    for b in blocks {
        let listy = |b: &Block| matches!(b, Block::List(..) | Block::Note(_));
        let tight = matches!(b, Block::Tail(_)) || prev.is_some_and(|p| listy(p) && listy(b));
        if prev.is_some() && !tight {
            out.push('\n');
        }
        match b {
            Block::Para(t) | Block::Tail(t) => {
                out.push_str(t);
                out.push('\n');
            }
            Block::Note(t) => {
                for l in t.split('\n') {
                    out.push_str(&format!("  {l}\n"));
                }
            }
            Block::List(col, items) => {
                for i in *items {
                    item(&mut out, 2, *col, i.label, i.help);
                }
            }
        }
        prev = Some(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_within_a_page() {
        for p in pages() {
            let mut seen = std::collections::HashMap::new();
            for o in p.opts() {
                for n in o.all_names() {
                    if let Some(other) = seen.insert(normalize(n), o.label()) {
                        // -map-by is listed twice (hosts, then topology objects).
                        assert_eq!(other.split(' ').next(), o.label().split(' ').next(), "{n}");
                    }
                }
            }
        }
    }

    #[test]
    fn binding_words_are_the_parsers() {
        for o in OBJECTS {
            assert!(
                crate::plan::binding::Binding::parse(o).is_ok(),
                "-bind-to {o}"
            );
        }
        for m in MAP_BY.iter().skip(2) {
            assert!(
                crate::plan::binding::Kind::parse(m).is_some(),
                "-map-by {m}"
            );
        }
        assert_eq!(&MAP_BY[..2], &["node", "slot"]);
    }

    #[test]
    fn pages_are_found_by_name() {
        assert_eq!(page("kauri").map(|p| p.name), Some("kauri"));
        assert_eq!(page("kvs").map(|p| p.name), Some("kauri-kvs"));
        assert_eq!(page("kauri-agent").map(|p| p.name), Some("kauri-agent"));
        assert!(page("nope").is_none());
    }

    #[test]
    fn help_lays_items_out_in_columns() {
        let mut s = String::new();
        item(&mut s, 2, 10, "-a X", "one\ntwo");
        item(&mut s, 2, 10, "-long-label", "three");
        assert_eq!(
            s,
            "  -a X    one\n          two\n  -long-label\n          three\n"
        );
    }

    #[test]
    fn option_lookup_ignores_dashes_and_case() {
        assert!(KAURI.find("--NP").is_some());
        assert!(KAURI.find("-machinefile").is_some());
        assert_eq!(KAURI.find("-V").map(|o| o.names[0]), Some("--version"));
        assert_eq!(KAURI.find("-v").map(|o| o.names[0]), Some("-v"));
        assert!(KAURI.find("-bogus").is_none());
    }
}
