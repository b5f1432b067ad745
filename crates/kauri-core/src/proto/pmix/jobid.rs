//! The number Open MPI gives a namespace, and the names of a run's jobs that keep those
//! numbers apart ([`JobNames`]).
//!
//! Open MPI does not carry a PMIx namespace through its layers: each namespace it meets
//! becomes a 32-bit job id, and the id goes back to a namespace through a list in which the
//! first namespace with that id wins (`opal_pmix_convert_nspace`, `opal_pmix_convert_jobid`
//! in `opal/mca/pmix/base/pmix_base_fns.c`). Two namespaces with one id are one job to it: a
//! parent that spawned the second gets the first one's processes, their endpoints and their
//! modex data, and two such jobs on one host share their shared-memory segments. What follows
//! is a hang (children wait in a barrier for parents that went on), a refused connection or a
//! crash in the shared-memory transport, once in a while: the ids are hashes.
//!
//! * **Open MPI 5** ([`ompi5_job_id`]): the part of the name before its last `@` is hashed
//!   and folded to 16 bits, the job family; the number after the `@` is the local job, of
//!   which Open MPI keeps 15 bits (`ompi_proc_name_to_sentinel`). A name without `@` is local
//!   job 0. Only 65,536 families: among a hundred unrelated names, two share one in about 7 %
//!   of runs.
//! * **Open MPI 4.1** ([`ompi4_job_id`]), started by anything but its own `mpirun`: the hash
//!   of the whole name with bit 15 cleared.
//!
//! PRRTE names a run's jobs `prterun-HOST-PID@N`: one family for the run, a local number for
//! each job. kauri does the same: the first job's name (which has no `@`) is the base, and the
//! N-th spawned job is `BASE@N`, so that no two jobs of a run share an Open MPI 5 id; a
//! number whose Open MPI 4.1 id is an earlier job's is skipped, so no two share a 4.1 id
//! either. Two runs joined by a name server are two families, as two `mpirun`s are.
//!
//! Pure: names in, names out.

use std::collections::HashSet;

/// The most spawned jobs of one run Open MPI 5 can tell apart: the local job number has 15
/// bits.
pub const MAX_SPAWNED_JOBS: u32 = 0x7fff;

/// Open MPI's string hash (`OPAL_HASH_STR`, Bob Jenkins' one-at-a-time hash; a name's
/// bytes as C `char`s, all ASCII here).
pub fn ompi_hash(s: &str) -> u32 {
    let mut h: u32 = 0;
    for b in s.bytes() {
        h = h.wrapping_add(u32::from(b));
        h = h.wrapping_add(h << 10);
        h ^= h >> 6;
    }
    h = h.wrapping_add(h << 3);
    h ^= h >> 11;
    h.wrapping_add(h << 15)
}

/// The job id Open MPI 5 gives namespace `nspace`: the family from the part before the last
/// `@`, the local job from the number after it (0 without one).
pub fn ompi5_job_id(nspace: &str) -> u32 {
    let (family, local) = match nspace.rsplit_once('@') {
        Some((family, local)) => (family, leading_number(local)),
        None => (nspace, 0),
    };
    let h = ompi_hash(family);
    let family = (h >> 16) ^ (h & 0xffff);
    (family << 16) | (local & 0xffff)
}

/// The job id Open MPI 4.1 gives namespace `nspace` when its own `mpirun` did not start it
/// (`OPAL_HASH_JOBID`).
pub fn ompi4_job_id(nspace: &str) -> u32 {
    ompi_hash(nspace) & !0x8000
}

/// What `strtoul(s, NULL, 10)` reads: the leading decimal digits, wrapping as a C `unsigned
/// long` converted to 32 bits does (0 when there are none).
fn leading_number(s: &str) -> u32 {
    s.bytes().take_while(u8::is_ascii_digit).fold(0u32, |n, d| {
        n.wrapping_mul(10).wrapping_add(u32::from(d - b'0'))
    })
}

/// A run has started as many jobs as Open MPI 5 can tell apart ([`MAX_SPAWNED_JOBS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "spawn: this run has used all {MAX_SPAWNED_JOBS} job numbers Open MPI can tell \
     apart in one run (as under PRRTE); start the work in more than one run"
)]
pub struct JobNumbersUsed;

/// The names of one run's spawned jobs: `BASE@N`, N from 1, skipping a number whose Open MPI
/// 4.1 id is an earlier job's.
#[derive(Debug, Clone)]
pub struct JobNames {
    base: String,
    next: u32,
    /// The Open MPI 4.1 ids of the run's jobs so far, the first job's included.
    taken: HashSet<u32>,
}

impl JobNames {
    /// The names that follow the run's first job, `first` (the base: without `@`).
    pub fn new(first: &str) -> JobNames {
        JobNames {
            base: first.to_string(),
            next: 1,
            taken: HashSet::from([ompi4_job_id(first)]),
        }
    }

    /// The next spawned job's name and its local number, or why there is none: the run has
    /// started as many jobs as Open MPI 5 can tell apart ([`MAX_SPAWNED_JOBS`]).
    pub fn next_job(&mut self) -> Result<(String, u32), JobNumbersUsed> {
        while self.next <= MAX_SPAWNED_JOBS {
            let n = self.next;
            self.next += 1;
            let name = format!("{}@{n}", self.base);
            if self.taken.insert(ompi4_job_id(&name)) {
                return Ok((name, n));
            }
        }
        Err(JobNumbersUsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed by the C macros themselves (`OPAL_HASH_STR` and the folding of
    /// `opal_pmix_convert_nspace`, compiled from Open MPI 5.0.x's headers).
    #[test]
    fn the_hash_is_open_mpis() {
        assert_eq!(ompi_hash(""), 0);
        assert_eq!(ompi_hash("a"), 0xca2e_9442);
        assert_eq!(ompi5_job_id("prterun-vm-1234@1"), 0x09cc_0001);
        assert_eq!(ompi5_job_id("kauri_27137_2f6cffc5_vm@3"), 0xcd87_0003);
        assert_eq!(ompi4_job_id("kauri_1_2_vm"), 0xd542_5123);
    }

    #[test]
    fn the_local_number_is_read_as_strtoul_does() {
        let f = ompi5_job_id("base") & 0xffff_0000;
        assert_eq!(ompi5_job_id("base@7"), f | 7);
        assert_eq!(ompi5_job_id("base@"), f);
        assert_eq!(ompi5_job_id("base@12x"), f | 12);
        assert_eq!(ompi5_job_id("base@70000"), f | (70000 & 0xffff));
        assert_eq!(ompi5_job_id("a@b@3"), ompi5_job_id("a@b@0") | 3);
    }

    /// Names as kauri made them before: a fresh name per job. Among a hundred jobs, two
    /// shared an Open MPI 5 id in some of the runs (the defect this module mends).
    #[test]
    fn unrelated_names_collide_in_open_mpi_5() {
        let collided = (0..200u32).filter(|run| {
            let ids: HashSet<u32> = (0..100u32)
                .map(|j| ompi5_job_id(&format!("kauri_{run}_{:x}_vm_s{j}", j * 7919 + run)))
                .collect();
            ids.len() < 100
        });
        assert!(collided.count() > 0);
    }

    #[test]
    fn every_job_of_a_run_has_its_own_id_in_both_open_mpis() {
        for first in [
            "kauri_27137_2f6cffc5_vm",
            "kauri_1_0_h",
            "kauri_99999_ffffffff_node-17",
        ] {
            let mut names = JobNames::new(first);
            let mut five = HashSet::from([ompi5_job_id(first)]);
            let mut four = HashSet::from([ompi4_job_id(first)]);
            for _ in 0..MAX_SPAWNED_JOBS - 64 {
                let (name, n) = names.next_job().unwrap();
                assert!(name.starts_with(first) && name.ends_with(&format!("@{n}")));
                assert!(
                    five.insert(ompi5_job_id(&name)),
                    "{name}: an Open MPI 5 id twice"
                );
                assert!(
                    four.insert(ompi4_job_id(&name)),
                    "{name}: an Open MPI 4.1 id twice"
                );
                assert_eq!(ompi5_job_id(&name) & 0xffff, n);
                assert!(n <= MAX_SPAWNED_JOBS);
            }
        }
    }

    #[test]
    fn numbers_run_out_with_a_reason() {
        let mut names = JobNames::new("k");
        let mut last = 0;
        while let Ok((_, n)) = names.next_job() {
            last = n;
        }
        assert!(last <= MAX_SPAWNED_JOBS && last > MAX_SPAWNED_JOBS - 64);
        assert_eq!(names.next_job(), Err(JobNumbersUsed));
        assert_eq!(
            JobNumbersUsed.to_string(),
            "spawn: this run has used all 32767 job numbers Open MPI can tell apart in one run \
             (as under PRRTE); start the work in more than one run"
        );
    }
}
