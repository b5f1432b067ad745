//! Rank 0's stdin at a branch: written into rank 0's pipe where it runs (and what was
//! written said up, so the front end reads no more than a window ahead), or passed to the
//! child whose subtree runs it.

use super::{Branch, Host, Links};
use crate::{Down, Up};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

impl<H: Host, L: Links> Branch<H, L> {
    /// Says on `up` how much of rank 0's stdin was written into its pipe here
    /// (`Up::StdinTaken`): an agent's link to its parent.
    pub fn tell_stdin_taken(&mut self, up: crate::Link) {
        self.stdin_taken = Some(up);
    }

    /// Input for the job's rank 0 (`None`: its end): written to its stdin here, or sent to
    /// the child whose subtree runs it (queued there until that child connects).
    pub fn stdin(&mut self, data: Option<Vec<u8>>) {
        if self.stdin.is_none() {
            if let Some(mut pipe) = self.take_stdin() {
                // Unbounded, but the front end sends no more than its window ahead of what
                // the writer says it took.
                let (tx, mut rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
                let taken = self.stdin_taken.clone();
                tokio::task::spawn_local(async move {
                    while let Some(Some(chunk)) = rx.recv().await {
                        if pipe.write_all(&chunk).await.is_err() {
                            break;
                        }
                        if let Some(up) = &taken {
                            up.send(&Up::StdinTaken(chunk.len() as u64));
                        }
                    }
                    let _ = pipe.shutdown().await;
                });
                self.stdin = Some(tx);
            }
        }
        if let Some(tx) = &self.stdin {
            let eof = data.is_none();
            let _ = tx.send(data);
            if eof {
                // Dropping the sender too, so the writer ends even if nothing more comes.
                self.stdin = None;
            }
            return;
        }
        if self.node.as_ref().is_some_and(|n| n.has_rank(0)) {
            // Rank 0 runs here and its stdin is already closed.
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
