//! The command line's words as the OS gives them: bytes, UTF-8 or not. Options and the
//! values kauri reads are text (an error names one that is not UTF-8); the program, its
//! arguments, `-wdir` and the values of `-env`/`-genv` stay the bytes they are, so that a
//! Latin-1 file name reaches the ranks as it was typed.

use super::UsageError;
use crate::console::quoted;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The words of a segment still to read, and the inline value (`--name=VALUE`) of the option
/// being read. Words are the bytes the OS gave kauri: UTF-8 or not.
pub(super) struct Words<'a> {
    /// The words still to read.
    pub(super) it: std::slice::Iter<'a, OsString>,
    /// The inline value of the option being read.
    pub(super) inline: Option<OsString>,
}

impl Words<'_> {
    /// The option's value as given: its inline one, else the next word (`what` names it if
    /// neither). For what reaches the ranks or names a file: a directory, a variable.
    pub(super) fn value_os(&mut self, what: &str) -> Result<OsString, UsageError> {
        match self.inline.take() {
            Some(v) => Ok(v),
            None => self
                .it
                .next()
                .cloned()
                .ok_or_else(|| UsageError(format!("{what} needs a value"))),
        }
    }

    /// The option's value as text ([`Words::value_os`]), for kauri to read: a number, a
    /// host list, a name.
    pub(super) fn value(&mut self, what: &str) -> Result<String, UsageError> {
        text(what, self.value_os(what)?)
    }

    /// The next word, never the inline value.
    pub(super) fn next_word(&mut self) -> Option<OsString> {
        self.it.next().cloned()
    }
}

/// The value `v` of option `what` as text: an error naming it when it is not UTF-8.
pub(super) fn text(what: &str, v: OsString) -> Result<String, UsageError> {
    v.into_string().map_err(|v| {
        UsageError(format!(
            "{what} {}: not UTF-8 text",
            quoted(&v.to_string_lossy())
        ))
    })
}

/// Splits `--name=value` and `-name=value`; turns `--name` (any number of dashes) into
/// `-name`, and the name to lower case (Hydra matches names with `strcasecmp`: `-NP 4` is
/// `-np 4`) except the single letters whose case carries a meaning
/// ([`crate::cli::doc::CASED`]: `-V`, `-H`, `-N`). The value stays as given; a name that is
/// not UTF-8 is no option's (its bytes read as `�`).
pub(super) fn normalize(arg: &OsStr) -> (String, Option<OsString>) {
    let b = arg.as_bytes();
    let b = &b[b.iter().take_while(|&&c| c == b'-').count()..];
    let (n, v) = match b.iter().position(|&c| c == b'=') {
        Some(i) => (&b[..i], Some(OsStr::from_bytes(&b[i + 1..]).to_os_string())),
        None => (b, None),
    };
    let n = format!("-{}", String::from_utf8_lossy(n));
    let n = if crate::cli::doc::CASED.contains(&n.as_str()) {
        n
    } else {
        n.to_ascii_lowercase()
    };
    (n, v)
}

/// Variable `name` of kauri's environment, as text; `None` when unset, or set to bytes that
/// are not UTF-8: the first such is kept in `bad`, as the line that says so.
pub(super) fn text_var(name: &str, bad: &std::cell::RefCell<Option<String>>) -> Option<String> {
    match std::env::var(name) {
        Ok(v) => Some(v),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(v)) => {
            bad.borrow_mut().get_or_insert_with(|| {
                format!("{name}={}: not UTF-8 text", quoted(&v.to_string_lossy()))
            });
            None
        }
    }
}

/// The words of one line of a configfile: its bytes up to a `#`, split at ASCII white space.
pub(super) fn config_words(line: &[u8]) -> Vec<OsString> {
    let line = line.split(|&b| b == b'#').next().unwrap_or_default();
    line.split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
        .map(|w| OsStr::from_bytes(w).to_os_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};
    use crate::plan::job::JobSpec;
    use std::os::unix::ffi::OsStringExt;

    fn os(b: &[u8]) -> OsString {
        OsString::from_vec(b.to_vec())
    }

    fn run(words: &[&[u8]]) -> Result<JobSpec, String> {
        let args: Vec<OsString> = words.iter().map(|w| os(w)).collect();
        match parse(&args) {
            Ok(Command::Run(s)) => Ok(*s),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.0),
        }
    }

    /// The program, its arguments, `-wdir` (inline too), `-env`, `-genv`, `-x` and `--mca`
    /// values keep their bytes; `:` still splits segments.
    #[test]
    fn what_reaches_the_ranks_keeps_its_bytes() {
        let s = run(&[
            b"-genv",
            b"G\xe9",
            b"\xe9t\xe9",
            b"-x",
            b"X=\xff",
            b"--mca",
            b"btl",
            b"tcp\xe9",
            b"--wdir=/tmp/d\xe9",
            b"-env",
            b"E",
            b"v\xe9",
            b"./caf\xe9",
            b"caf\xe9",
            b"-n",
            b":",
            b"b",
        ])
        .unwrap();
        assert_eq!(
            s.genv,
            [
                (os(b"G\xe9"), os(b"\xe9t\xe9")),
                (os(b"X"), os(b"\xff")),
                (os(b"OMPI_MCA_btl"), os(b"tcp\xe9")),
            ]
        );
        assert_eq!(s.wdir, Some(std::path::PathBuf::from(os(b"/tmp/d\xe9"))));
        let a = &s.apps[0];
        assert_eq!(a.program, os(b"./caf\xe9"));
        assert_eq!(a.args, [os(b"caf\xe9"), os(b"-n")]);
        assert_eq!(a.env, [(os(b"E"), os(b"v\xe9"))]);
        assert_eq!(s.apps[1].program, "b");
    }

    /// What kauri reads as text and is not UTF-8 is one line naming it; an option whose name
    /// is not UTF-8 is unknown.
    #[test]
    fn what_kauri_reads_must_be_text() {
        let e = run(&[b"-hosts", b"a\xe9", b"x"]).unwrap_err();
        assert_eq!(e, "-hosts \"a\u{fffd}\": not UTF-8 text");
        let e = run(&[b"--np=\xe9", b"x"]).unwrap_err();
        assert!(e.starts_with("-np \"\u{fffd}\": not UTF-8"), "{e}");
        let e = run(&[b"-\xe9", b"x"]).unwrap_err();
        assert!(e.starts_with("unknown option -\u{fffd}"), "{e}");
    }

    #[test]
    fn a_configfile_line_is_bytes() {
        assert_eq!(
            config_words(b" -n 2\t./caf\xe9  x\r # a comment \xff"),
            [os(b"-n"), os(b"2"), os(b"./caf\xe9"), os(b"x")]
        );
        assert!(config_words(b"# all comment").is_empty());
        assert_eq!(
            normalize(OsStr::new("--NP=3")),
            ("-np".into(), Some("3".into()))
        );
        assert_eq!(
            normalize(OsStr::from_bytes(b"--wdir=/d\xe9")),
            ("-wdir".into(), Some(os(b"/d\xe9")))
        );
    }
}
