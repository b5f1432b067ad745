//! What the user asked of the ranks' output, as the plan carries it to every host: Hydra's
//! output patterns ([`Pattern`]: `%r` rank, `%g` process group, `%p` proxy, `%h` host, `%t`
//! seconds since the start, `%%`), the run's options ([`OutputOptions`]) and one job's
//! ([`OutputPlan`]). Plain data and parsing; the forwarding and the files are `host`'s.

use serde::{Deserialize, Serialize};

/// One piece of a [`Pattern`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Piece {
    /// Text as it is (`%%` is one `%` here).
    Text(String),
    /// `%r`: the rank, in its job (`MPI_COMM_WORLD`).
    Rank,
    /// `%g`: the process group: 0 for the job the user started, n for the n-th spawned job.
    Group,
    /// `%p`: the proxy, Hydra's word for a host's agent: the index of the rank's host among the
    /// hosts of its job (`KAURI_NODE`).
    Proxy,
    /// `%h`: the rank's host, as given to kauri.
    Host,
    /// `%t`: whole seconds since kauri started.
    Time,
}

/// A Hydra output pattern, parsed: text with `%r`, `%g`, `%p`, `%h`, `%t` and `%%`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pattern {
    pieces: Vec<Piece>,
}

/// One rank's values for a [`Pattern`]'s specifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin<'a> {
    /// `%r`.
    pub rank: usize,
    /// `%g`.
    pub pgid: u32,
    /// `%p`.
    pub proxy: u32,
    /// `%h`.
    pub host: &'a str,
}

/// Why an output pattern cannot be parsed: each prints the line kauri gives after the option's
/// name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// A `%` followed by a letter that is no specifier.
    #[error("unknown specifier %{spec} in {text:?} (use %r, %g, %p, %h, %t or %%)")]
    UnknownSpecifier {
        /// The character after the `%`.
        spec: char,
        /// The whole pattern.
        text: String,
    },
    /// A `%` as the last character.
    #[error("{text:?} ends with a lone % (write %% for a %)")]
    LonePercent {
        /// The whole pattern.
        text: String,
    },
}

impl Pattern {
    /// Parses `text`. An unknown specifier or a `%` at the end is an error, as in Hydra (which
    /// finds out at the first line of output; kauri before it starts anything).
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                lit.push(c);
                continue;
            }
            let piece = match chars.next() {
                Some('%') => {
                    lit.push('%');
                    continue;
                }
                Some('r') => Piece::Rank,
                Some('g') => Piece::Group,
                Some('p') => Piece::Proxy,
                Some('h') => Piece::Host,
                Some('t') => Piece::Time,
                Some(spec) => {
                    return Err(PatternError::UnknownSpecifier {
                        spec,
                        text: text.to_string(),
                    })
                }
                None => {
                    return Err(PatternError::LonePercent {
                        text: text.to_string(),
                    })
                }
            };
            if !lit.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut lit)));
            }
            pieces.push(piece);
        }
        if !lit.is_empty() {
            pieces.push(Piece::Text(lit));
        }
        Ok(Pattern { pieces })
    }

    /// Whether it counts seconds (`%t`), so that it must be expanded again for every line.
    pub fn has_time(&self) -> bool {
        self.pieces.contains(&Piece::Time)
    }

    /// The text for `o`, `seconds` after the start.
    pub fn expand(&self, o: &Origin, seconds: u64) -> String {
        let mut s = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => s.push_str(t),
                Piece::Rank => s.push_str(&o.rank.to_string()),
                Piece::Group => s.push_str(&o.pgid.to_string()),
                Piece::Proxy => s.push_str(&o.proxy.to_string()),
                Piece::Host => s.push_str(o.host),
                Piece::Time => s.push_str(&seconds.to_string()),
            }
        }
        s
    }
}

/// What the user asked of the ranks' output (`-prepend-pattern` or `-l`, `-outfile-pattern`,
/// `-errfile-pattern`, `-output-from`), for every job of the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputOptions {
    /// Put before every line, of both streams and in files too (`-l` is `[%r] `).
    pub prepend: Option<Pattern>,
    /// The file each rank's stdout goes to instead of kauri's.
    pub outfile: Option<Pattern>,
    /// The file each rank's stderr goes to instead of kauri's.
    pub errfile: Option<Pattern>,
    /// Only this rank's output is kept (of every job); the others' is read and dropped, files
    /// or not.
    pub output_from: Option<usize>,
    /// Give each rank's stdout a pseudo-terminal rather than a pipe (kauri's own stdout is a
    /// terminal, it goes to no file, and `--no-pty` was not given): C stdio, Fortran's
    /// runtime and Python then write each line as it comes, as under `mpirun`.
    #[serde(default)]
    pub terminal: bool,
    /// `--no-pty`: never a pseudo-terminal.
    #[serde(default)]
    pub no_pty: bool,
    /// `--merge-stderr-to-stdout`: each rank's stderr is its stdout (the same pipe or
    /// terminal), as Open MPI's `mpirun` gives it.
    #[serde(default)]
    pub merge_stderr: bool,
}

/// One job's output as its hosts need it: the run's options and the job's values for `%g`
/// and `%t`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPlan {
    /// The run's options.
    pub options: OutputOptions,
    /// The job's process group (`%g`): 0 for the job the user started.
    pub pgid: u32,
    /// When kauri started, in milliseconds since the Unix epoch (`%t` counts from it on every
    /// host's clock).
    pub start_unix_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad pattern is refused by kind, with the line kauri printed when it was text.
    #[test]
    fn a_bad_pattern_is_refused_by_kind_with_its_line() {
        let e = Pattern::parse("out.%x").unwrap_err();
        assert_eq!(
            e,
            PatternError::UnknownSpecifier {
                spec: 'x',
                text: "out.%x".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "unknown specifier %x in \"out.%x\" (use %r, %g, %p, %h, %t or %%)"
        );
        let e = Pattern::parse("out.%").unwrap_err();
        assert_eq!(
            e,
            PatternError::LonePercent {
                text: "out.%".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "\"out.%\" ends with a lone % (write %% for a %)"
        );
    }
}
