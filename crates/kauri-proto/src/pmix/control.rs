//! PMIx job control (`PMIx_Job_control`, the server module's `job_control` upcall): which
//! requests kauri serves ([`answer`]). Plain data: [`super::ffi`] reads the directives and
//! calls the library back with the status decided here.
//!
//! A client may *tell* its launcher things about itself: that it can be preempted
//! (`PMIX_JOB_CTRL_PREEMPTIBLE`), how it would be checkpointed
//! (`PMIX_JOB_CTRL_CHECKPOINT_METHOD` and the keys inside it), under which id
//! (`PMIX_JOB_CTRL_ID`). Kauri never preempts nor checkpoints a job, so it has nothing to do
//! with them and takes them with success, as Open MPI 4.1's `mpirun` does (OpenPMIx's `jctrl`
//! example makes such a request). A request to *act* (kill, terminate, signal, pause, resume,
//! checkpoint, define a process set, …) is refused with `PMIX_ERR_NOT_SUPPORTED`, the status
//! PRRTE gives to what it does not serve.

use super::ffi::{InfoVal, Status, PMIX_ERR_NOT_SUPPORTED, PMIX_SUCCESS};

/// The directives that inform the launcher and ask nothing of it.
/// (`PMIX_JOB_CTRL_CHECKPOINT_TIMEOUT` shares `PMIX_JOB_CTRL_CHECKPOINT_SIGNAL`'s key.)
pub const INFORMATIONAL: [&str; 5] = [
    "pmix.jctrl.id",
    "pmix.jctrl.preempt",
    "pmix.jctrl.ckmethod",
    "pmix.jctrl.ckptev",
    "pmix.jctrl.ckptsig",
];

/// The status of a job-control request with `directives`: success when there is at least one
/// and each only informs ([`INFORMATIONAL`]), else `PMIX_ERR_NOT_SUPPORTED`.
pub fn answer(directives: &[(String, InfoVal)]) -> Status {
    let informs = |k: &str| INFORMATIONAL.contains(&k);
    if !directives.is_empty() && directives.iter().all(|(k, _)| informs(k)) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_SUPPORTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What OpenPMIx's `jctrl` example tells its launcher.
    #[test]
    fn being_told_is_served() {
        let d = vec![
            ("pmix.jctrl.preempt".to_string(), InfoVal::Bool(true)),
            ("pmix.jctrl.ckmethod".to_string(), InfoVal::Other(21)),
        ];
        assert_eq!(answer(&d), PMIX_SUCCESS);
    }

    #[test]
    fn being_asked_to_act_is_refused() {
        let kill = vec![("pmix.jctrl.kill".to_string(), InfoVal::Bool(true))];
        assert_eq!(answer(&kill), PMIX_ERR_NOT_SUPPORTED);
        let mixed = vec![
            ("pmix.jctrl.preempt".to_string(), InfoVal::Bool(true)),
            ("pmix.jctrl.signal".to_string(), InfoVal::Int(10)),
        ];
        assert_eq!(answer(&mixed), PMIX_ERR_NOT_SUPPORTED);
        assert_eq!(answer(&[]), PMIX_ERR_NOT_SUPPORTED);
    }
}
