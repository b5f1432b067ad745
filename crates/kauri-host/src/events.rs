//! Event channels tagged with their job: every job of a run (the one the user started and the
//! ones its ranks spawn) sends its host's and its children's events into one channel per
//! kind, each event carrying the job's index, so the root's loop reads one channel and no
//! relay task per job is needed. An agent serves one job and uses index 0.
//!
//! It owns nothing but the sender; it may not know what the events mean.

use tokio::sync::mpsc;

/// A sender that tags what it sends with its job's index.
#[derive(Debug)]
pub struct JobTx<T> {
    job: usize,
    tx: Sender<T>,
}

impl<T> Clone for JobTx<T> {
    fn clone(&self) -> Self {
        JobTx {
            job: self.job,
            tx: self.tx.clone(),
        }
    }
}

impl<T> JobTx<T> {
    /// A sender for job `job` into `tx`.
    pub fn new(job: usize, tx: Sender<T>) -> JobTx<T> {
        JobTx { job, tx }
    }

    /// Sends `event`, tagged; fails (giving it back) when the receiver is gone.
    pub fn send(&self, event: T) -> Result<(), T> {
        self.tx.send((self.job, event)).map_err(|e| e.0 .1)
    }

    /// The job's index.
    pub fn job(&self) -> usize {
        self.job
    }
}

/// The sending end of a job-tagged channel, from which each job's [`JobTx`] is made.
pub type Sender<T> = mpsc::UnboundedSender<(usize, T)>;

/// The receiving end of a job-tagged channel: each event with its job's index.
pub type Receiver<T> = mpsc::UnboundedReceiver<(usize, T)>;

/// A channel of job-tagged events.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    mpsc::unbounded_channel()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_their_job() {
        let (tx, mut rx) = channel::<&str>();
        let (a, b) = (JobTx::new(0, tx.clone()), JobTx::new(3, tx));
        b.send("spawned").unwrap();
        a.clone().send("first").unwrap();
        assert_eq!(rx.try_recv().unwrap(), (3, "spawned"));
        assert_eq!(rx.try_recv().unwrap(), (0, "first"));
        drop(rx);
        assert_eq!(a.send("late"), Err("late"));
    }
}
