//! The jobs the unit tests plan, built as the command line builds them: the parser is the
//! `kauri` crate's, above this one, so each test says which options its job has.

use kauri_core::plan::job::{AppSpec, HostSpec, JobSpec, PmiChoice};

/// The job of a command line that gives only its programs: each segment is `(ranks, "program
/// args")`, every option at the default the command line gives it.
pub fn job(segments: &[(usize, &str)]) -> JobSpec {
    let apps = segments
        .iter()
        .map(|&(nprocs, line)| {
            let mut words = line.split_whitespace().map(Into::into);
            AppSpec {
                nprocs,
                program: words.next().expect("a program"),
                args: words.collect(),
                ..AppSpec::default()
            }
        })
        .collect();
    JobSpec {
        apps,
        ..JobSpec::default()
    }
}

/// `ranks` ranks of `program args` (`-n ranks program args`).
pub fn run(ranks: usize, line: &str) -> JobSpec {
    job(&[(ranks, line)])
}

/// `ranks` ranks of `true` on the hosts of `-hosts list`.
pub fn on_hosts(list: &str, ranks: usize) -> JobSpec {
    JobSpec {
        hosts: hosts_of(list),
        ..run(ranks, "true")
    }
}

/// The hosts of `-hosts list`.
pub fn hosts_of(list: &str) -> Vec<HostSpec> {
    crate::hosts::parse_hosts(list).unwrap()
}

/// `spec` under `-launcher kind`.
pub fn launcher(kind: &str, spec: JobSpec) -> JobSpec {
    JobSpec {
        launcher: Some(kind.into()),
        ..spec
    }
}

/// `spec` under `--pmi=choice`.
pub fn pmi(choice: PmiChoice, spec: JobSpec) -> JobSpec {
    JobSpec {
        pmi: choice,
        ..spec
    }
}

/// `spec` under `-ppn n`. The ranks of a segment without `-n` (`n` for each name a host was
/// given) are the command line's to count: `spec`'s segments say how many.
pub fn ppn(n: usize, spec: JobSpec) -> JobSpec {
    JobSpec {
        ppn: Some(n),
        mapping_asked: true,
        ..spec
    }
}
