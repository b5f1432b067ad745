//! A job of the run as the root tracks it: its ranks' states and its release.

use super::*;

impl Job {
    /// The running job's record; `None` once released.
    pub(super) fn live(&self) -> Option<&JobRun> {
        match self {
            Job::Live(j) => Some(j),
            Job::Released(_) => None,
        }
    }

    /// The same, to change it.
    pub(super) fn live_mut(&mut self) -> Option<&mut JobRun> {
        match self {
            Job::Live(j) => Some(j),
            Job::Released(_) => None,
        }
    }

    /// Its KVS name (PMIx namespace).
    pub(super) fn kvsname(&self) -> &str {
        match self {
            Job::Live(j) => &j.plan.kvsname,
            Job::Released(r) => &r.kvsname,
        }
    }

    /// Its number of ranks.
    pub(super) fn size(&self) -> usize {
        match self {
            Job::Live(j) => j.plan.size,
            Job::Released(r) => r.size,
        }
    }

    /// Its ranks' records, by rank, for the end's summary: every rank of a running job, the
    /// failed ones of a released job.
    pub(super) fn rank_states(&self) -> Vec<(usize, RankState)> {
        match self {
            Job::Live(j) => j.ranks.iter().cloned().enumerate().collect(),
            Job::Released(r) => r.failed.clone(),
        }
    }
}

impl JobRun {
    /// "rank 3" for the first job, "rank 3 of spawned job 2" for the others.
    pub(super) fn who(&self, idx: usize, rank: usize) -> String {
        who(idx, rank)
    }
}

/// "rank 3" for the first job, "rank 3 of spawned job 2" for the others.
pub(super) fn who(idx: usize, rank: usize) -> String {
    if idx == 0 {
        format!("rank {rank}")
    } else {
        format!("rank {rank} of spawned job {idx}")
    }
}
