//! Rank 0's stdin at a branch: written into rank 0's stdin where it runs (by the host, which
//! says up what it wrote, so the front end reads no more than a window ahead), or passed to
//! the child whose subtree runs it.

use super::{Branch, Host, Links};
use crate::tree::msg::Down;

impl<H: Host, L: Links> Branch<H, L> {
    /// Input for the job's rank 0 (`None`: its end): written to its stdin here, or sent to
    /// the child whose subtree runs it (queued there until that child connects).
    pub fn stdin(&mut self, data: Option<Vec<u8>>) {
        if let Some(n) = self.node.as_mut().filter(|n| n.has_rank(0)) {
            // Written, or dropped when its stdin is closed already (or was taken by a
            // caller that pumps it itself).
            n.write_stdin(data);
            return;
        }
        if let Some(id) = self.kids.child_with_rank(0) {
            let msg = match data {
                Some(d) => Down::Stdin(d),
                None => Down::StdinEof,
            };
            self.kids.send(id, msg);
        }
    }
}
