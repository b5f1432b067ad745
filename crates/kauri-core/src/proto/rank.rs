//! The record of a rank's end ([`RankEnd`]): made once by the host that ran the rank
//! (`host::node`), carried up the tree unchanged in a report (`tree::msg::Report::Exited`)
//! and kept by the front end in its record of the rank.
//!
//! Plain data with serde derives, in the lowest folder so that every layer that sees a
//! rank's end names the same type. How the process ended travels as its exit code or its
//! signal (a wait status does not cross hosts).

use serde::{Deserialize, Serialize};

/// How one rank ended, as its host saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankEnd {
    /// The rank.
    pub rank: usize,
    /// Its pid on its host.
    pub pid: u32,
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
    /// It had finished the PMI (or PMIx) handshake.
    pub initialized: bool,
    /// It had called PMI (or PMIx) finalize.
    pub finalized: bool,
    /// It never spoke PMI or PMIx and ran as an Open MPI singleton (`host::ompi`).
    pub ran_alone: bool,
}

impl RankEnd {
    /// It exited with `code` (and was not killed by a signal).
    pub fn exited_with(&self, code: i32) -> bool {
        self.code == Some(code) && self.signal.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_code_is_told_from_a_signal() {
        let exited = RankEnd {
            code: Some(0),
            ..RankEnd::default()
        };
        assert!(exited.exited_with(0));
        assert!(!exited.exited_with(1));
        let killed = RankEnd {
            signal: Some(9),
            ..RankEnd::default()
        };
        assert!(!killed.exited_with(0));
    }
}
