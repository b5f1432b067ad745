//! The log of a listener's refused connections, as lines for a person: the first few named,
//! the rest counted by reason into summaries. Sans-IO: it makes lines; `hub` prints or sends
//! them, so the root and an agent log the same way.

use std::collections::BTreeMap;
use std::time::Duration;

/// How many refused connections are named one by one; later ones are counted.
pub const REFUSALS_SHOWN: usize = 3;

/// The least time between two summary lines of refused connections.
pub const REFUSALS_INTERVAL: Duration = Duration::from_secs(5);

/// How many different reasons a summary names; the rest are counted as "other".
const REASONS_SHOWN: usize = 4;

/// The log of one listener's refused connections: the first [`REFUSALS_SHOWN`] are named one
/// by one; later ones are counted, by reason, into a summary the caller asks for at most once
/// per [`REFUSALS_INTERVAL`]. Sans-IO: it makes lines, the caller prints or sends them, so
/// the root and an agent log the same way.
#[derive(Debug, Default)]
pub struct Refusals {
    shown: usize,
    held: BTreeMap<String, usize>,
}

/// What [`Refusals::refused`] says to do with one refusal.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Print this line now.
    Show(String),
    /// Counted for the next summary; `first` when it is the first since the last summary
    /// (the caller then arranges for [`Refusals::summary`] an interval later).
    Held {
        /// The first held since the last summary.
        first: bool,
    },
}

impl Refusals {
    /// A connection from `addr` (its peer's address) was refused for `reason`.
    pub fn refused(&mut self, addr: impl std::fmt::Display, reason: &str) -> Refusal {
        if self.shown < REFUSALS_SHOWN {
            self.shown += 1;
            return Refusal::Show(format!("refused a connection from {addr}: {reason}"));
        }
        let first = self.held.is_empty();
        *self.held.entry(reason.to_string()).or_default() += 1;
        Refusal::Held { first }
    }

    /// The line that sums up the refusals held since the last one, if any:
    /// `refused 297 more connections (unreadable handshake (…): 250; wrong job key: 47)`.
    pub fn summary(&mut self) -> Option<String> {
        if self.held.is_empty() {
            return None;
        }
        let held = std::mem::take(&mut self.held);
        let total: usize = held.values().sum();
        let mut by_count: Vec<(String, usize)> = held.into_iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut reasons: Vec<String> = by_count
            .iter()
            .take(REASONS_SHOWN)
            .map(|(r, n)| format!("{r}: {n}"))
            .collect();
        let other: usize = by_count.iter().skip(REASONS_SHOWN).map(|(_, n)| n).sum();
        if other > 0 {
            reasons.push(format!("other reasons: {other}"));
        }
        let s = if total == 1 { "" } else { "s" };
        Some(format!(
            "refused {total} more connection{s} ({})",
            reasons.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first refusals are named, the rest counted by reason into one summary line, and
    /// a summary comes only when something was held since the last.
    #[test]
    fn refusals_are_named_then_summarised() {
        let mut r = Refusals::default();
        let a = "10.0.0.1:4000";
        for _ in 0..REFUSALS_SHOWN {
            assert!(matches!(r.refused(a, "wrong job key"), Refusal::Show(l)
                if l == "refused a connection from 10.0.0.1:4000: wrong job key"));
        }
        assert_eq!(r.refused(a, "wrong job key"), Refusal::Held { first: true });
        for _ in 0..295 {
            assert_eq!(
                r.refused(a, "wrong job key"),
                Refusal::Held { first: false }
            );
        }
        assert_eq!(r.refused(a, "no handshake"), Refusal::Held { first: false });
        assert_eq!(
            r.summary().as_deref(),
            Some("refused 297 more connections (wrong job key: 296; no handshake: 1)")
        );
        assert_eq!(r.summary(), None);
        for (i, why) in ["a", "b", "c", "d", "e", "f"].iter().enumerate() {
            assert_eq!(r.refused(a, why), Refusal::Held { first: i == 0 });
        }
        assert_eq!(
            r.summary().as_deref(),
            Some("refused 6 more connections (a: 1; b: 1; c: 1; d: 1; other reasons: 2)")
        );
    }
}
