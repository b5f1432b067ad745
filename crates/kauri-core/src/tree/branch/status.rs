//! A branch's answer to `kauri --status`: where this host's ranks are, which fence it
//! gathers, which children are still being launched; the children that are up are asked
//! for theirs.

use super::{Branch, Host, Links};
use crate::proto::pmi::RankPmi;
use crate::tree::msg::{Down, HostStatus};

impl<H: Host, L: Links> Branch<H, L> {
    /// Asks the children that are up where their ranks are (their answers come up as
    /// `Up::Status`) and says where this host's are, and which children are still being
    /// launched; `stacks`: the children add their stuck ranks' stacks (this host's are the
    /// caller's to add).
    pub fn ask_status(&mut self, stacks: bool) -> HostStatus {
        let launching = self.kids.launching();
        if launching.is_empty() {
            self.kids.broadcast(&Down::Status { stacks });
        } else {
            // A child not up yet is not asked: the question would wait in its queue and be
            // answered after its launch, to a later round.
            for id in self.kids.ids() {
                if !launching.iter().any(|(l, _)| *l == id) {
                    self.kids.send(id, Down::Status { stacks });
                }
            }
        }
        let (ranks, quiet_ms) = self.node.as_ref().map(H::status).unwrap_or_default();
        // Ranks in the fence being gathered here (not in one this host has sent up already,
        // whose rest is up to the other hosts).
        let epoch = self.gather.epoch();
        let in_fence = ranks.iter().any(|r| r.pmi == RankPmi::InFence(epoch));
        let fence = (in_fence || self.gather.under_way()).then(|| {
            let waits: Vec<String> = self
                .kids
                .ids()
                .into_iter()
                .filter(|&id| self.gather.needs_child(id))
                .map(|id| self.kids.host(id))
                .collect();
            (epoch, self.gather.needs_local(), waits)
        });
        HostStatus {
            host: self.host.clone(),
            ranks,
            fence,
            quiet_ms,
            launching: launching.into_iter().map(|(_, l)| l).collect(),
        }
    }
}
