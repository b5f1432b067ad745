//! The end of the run: the last output, the ranks that failed, the startup profile, and
//! kauri's exit status.

use super::*;

/// What the end's report needs of the root, taken before the root is dropped.
struct Summary {
    /// Every job's ranks' records (a released job's failed ones).
    ranks: Vec<Vec<(usize, RankState)>>,
    /// The first job's size.
    size: usize,
    /// The servers the first job was offered.
    offered: Wiring,
    /// How surely the first job uses an MPI.
    mpi: kauri_plan::job::MpiSign,
    /// A rank was seen running as a singleton, and said so.
    singleton_seen: bool,
    /// `-print-all-exitcodes`.
    print_exit_codes: bool,
    fault_tolerant: bool,
    /// Under -disable-auto-cleanup a rank's exit code is not reported.
    quiet_codes: bool,
    ending: Option<Ending>,
    /// The startup profile's format and fences, when it is recorded.
    fences: Option<(ProfileFormat, Vec<RootFence>)>,
    /// The hosts' profiles: this host's, those below.
    profile: Option<(HostProfile, Vec<HostProfile>)>,
    /// This attempt's restart count, when the job restarts.
    restart: Option<u32>,
    tree: String,
    clock: Clock,
}

/// The servers a job was offered, by its plan's `pmix` and `pmi_too`.
fn offered(pmix: bool, pmi_too: bool) -> Wiring {
    match (pmix, pmi_too) {
        (false, _) => Wiring::Pmi,
        (true, false) => Wiring::Pmix,
        (true, true) => Wiring::Both,
    }
}

/// The line for each rank that failed, and the worst status their failures add:
/// those ended by the teardown count for nothing, a failure tolerated (`fault_tolerant`) adds
/// nothing, and with `quiet_codes` an exit code has no line.
fn failures(
    jobs: &[Vec<(usize, RankState)>],
    fault_tolerant: bool,
    quiet_codes: bool,
) -> (i32, Vec<String>) {
    let mut worst = 0;
    let mut lines = Vec::new();
    for (idx, ranks) in jobs.iter().enumerate() {
        for (r, s) in ranks {
            let Some(end) = s.end else { continue };
            let (code, sig) = (end.code, end.signal);
            if s.during_teardown {
                continue;
            }
            if let Some((status, words)) = policy::rank_failure(code, sig) {
                let tolerated = policy::tolerated(fault_tolerant, sig);
                if !tolerated {
                    worst = worst.max(status);
                }
                if quiet_codes && code.is_some() {
                    continue;
                }
                lines.push(format!(
                    "kauri: {} (pid {}) on {} {words}{}",
                    who(idx, *r),
                    end.pid,
                    s.host,
                    if tolerated {
                        " (tolerated: -with-ft)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    (worst, lines)
}

/// `-print-all-exitcodes`: every rank's exit status of the first job, one line per host in
/// the order of the hosts' first ranks (`kauri: exit codes on n1 (ranks 0-3): 0,0,3,0`); a
/// rank killed by a signal shows `signal N`, one that has not ended `-`.
fn exit_code_lines(ranks: &[(usize, RankState)]) -> Vec<String> {
    let mut hosts: Vec<(&str, Vec<usize>, Vec<String>)> = Vec::new();
    for (r, s) in ranks {
        let code = match s.end.map(|e| (e.code, e.signal)) {
            Some((Some(c), _)) => c.to_string(),
            Some((None, Some(sig))) => format!("signal {sig}"),
            _ => "-".to_string(),
        };
        match hosts.iter_mut().find(|(h, _, _)| *h == s.host) {
            Some((_, rs, codes)) => {
                rs.push(*r);
                codes.push(code);
            }
            None => hosts.push((&s.host, vec![*r], vec![code])),
        }
    }
    hosts
        .into_iter()
        .map(|(h, rs, codes)| {
            format!(
                "kauri: exit codes on {h} (ranks {}): {}",
                kauri_plan::rank_ranges(&rs),
                codes.join(",")
            )
        })
        .collect()
}

impl Root {
    /// After the last event: forwards the last output, reports the ranks that failed, prints
    /// the startup profile, and returns kauri's exit status.
    pub(super) async fn finish(mut self) -> i32 {
        self.progress_flush();
        self.drain().await;
        // A resource manager's launcher tells the manager how its agent ended: let it (a
        // killed qrsh -inherit fails the whole Grid Engine job). A fork launcher's agents are
        // this process's children: they said `Done` and are leaving (each kills and reaps its
        // keeper first); kauri returns once they have, so nothing of the run outlives it.
        if self.cluster.launch.kind.waits_for_launchers_at_end() {
            crate::hub::launchers_ended(Duration::from_secs(10)).await;
        }
        // The ranks of a lost agent started by `-launcher fork` are adopted by this process
        // (the subreaper): killed and reaped here, or nobody would. With no agent ever
        // started, each job's node has swept what its ranks left (a second look through
        // `/proc` was a tenth of a one-rank run's end).
        let adopted = if crate::hub::agents_launched() {
            proc::kill_leftovers(&[])
        } else {
            0
        };
        if adopted > 0 {
            debug!(adopted, "killed the ranks of lost agents");
        }
        // The last sweep is done: the keeper of this host's ranks has nothing left to keep,
        // and its exit overlaps the rest of the end (reaped as kauri leaves).
        kauri_host::keeper::dismiss();
        let summary = self.summary();
        let printer = self.printer.take();
        let attempt = self.attempt.take();
        let singleton = self.singleton_seen;
        // Every sender of output goes with the jobs and the wires; the printer then empties
        // its queue and ends.
        drop(self);
        let mut ending = summary.ending;
        if let Some((printer, stop)) = printer {
            let _ = stop.send(());
            if printer.await.unwrap_or(false) {
                ending = ending.or(Some(Ending::Failed));
            }
        }
        let end_us = summary.clock.now();
        let worst = report(summary, end_us);
        debug!(worst, "job ended");
        let status = policy::exit_status(ending, worst);
        if let Some((a, report)) = attempt.and_then(|a| a.report.clone().map(|r| (a, r))) {
            // A job that failed may do better started again; one that was interrupted, timed
            // out, lost its output or ran as singletons will not.
            let failed = matches!(ending, Some(Ending::Failed | Ending::Abort(_))) && !singleton;
            let end = kauri_plan::job::AttemptEnd {
                failed: failed || (ending.is_none() && status != 0),
                why: a
                    .why
                    .unwrap_or_else(|| format!("the job ended with status {status}")),
                lost: a.lost,
            };
            if let Err(e) = std::fs::write(&report, end.to_text()) {
                say!("kauri: cannot write the attempt's report {report}: {e}");
            }
        }
        status
    }

    /// Forwards every job's last output and waits for the drains: the released jobs', then
    /// every job's still here (not long after giving up on the agents).
    async fn drain(&mut self) {
        for j in 0..self.jobs.len() {
            let out = self.live_mut(j).and_then(|job| job.branch.last_refusals());
            self.on_out(j, out);
        }
        for d in std::mem::take(&mut self.draining) {
            let _ = d.await;
        }
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            if self.gave_up {
                // Ranks that did not die when killed may hold their pipes: do not wait long.
                let _ = tokio::time::timeout(Duration::from_secs(2), j.branch.drain()).await;
            } else {
                j.branch.drain().await;
            }
        }
    }

    /// What the end's report needs, taken from the root.
    fn summary(&mut self) -> Summary {
        let profile = self.first().branch.take_profile();
        let size = self.first().plan.size;
        let offered = offered(self.first().plan.pmix, self.first().plan.pmi_too);
        let ranks = self.jobs.iter().map(Job::rank_states).collect();
        // A host lost under -disable-auto-cleanup: the job did not end well, whatever the
        // ranks that were left say (under -with-ft, a fault the survivors were told of).
        let lost_fails = self.lost && !self.fault_tolerant;
        Summary {
            ranks,
            size,
            offered,
            mpi: self.mpi,
            singleton_seen: self.singleton_seen,
            print_exit_codes: self.print_exit_codes,
            fault_tolerant: self.fault_tolerant,
            // Under -disable-auto-cleanup a rank's exit code is the program's business (the
            // survivors were told and went on): no line, as under Hydra, which prints none
            // for an exit code. MPICH's fault-tolerance tests fail on any line but
            // ` No Errors`.
            quiet_codes: !self.auto_cleanup,
            ending: self.ending.or(lost_fails.then_some(Ending::Failed)),
            fences: self.profile.take(),
            profile,
            restart: self.attempt.as_ref().map(|a| a.restart.0),
            tree: self.tree.clone(),
            clock: self.clock,
        }
    }
}

/// Prints the end's report: a line for each rank that failed, a word when no rank of an MPI
/// job spoke to a server, and the startup profile (`end_us`: the run's end); returns the
/// worst status the ranks' failures add.
fn report(s: Summary, end_us: u64) -> i32 {
    if s.print_exit_codes {
        for line in exit_code_lines(s.ranks.first().map_or(&[], Vec::as_slice)) {
            say!("{line}");
        }
    }
    let (mut worst, lines) = failures(&s.ranks, s.fault_tolerant, s.quiet_codes);
    for line in lines {
        say!("{line}");
    }
    // With no flag, a rank that failed has its own line (a program that ended before it
    // could start its MPI, such as `python3 -c 'import mpi4py'` without mpi4py): no word
    // of singletons. A flag's hint is kept: singletons that fail their checks need it.
    let quiet = worst != 0 && s.offered == kauri_plan::job::Wiring::Both;
    if let Some(first) = s.ranks.first().filter(|_| !s.singleton_seen && !quiet) {
        let spoke = first.iter().filter(|(_, s)| s.initialized()).count();
        let traces = first.iter().any(|(_, s)| s.ran_alone());
        let mpi = if traces {
            s.mpi.max(kauri_plan::job::MpiSign::Named)
        } else {
            s.mpi
        };
        if let Some((line, fails)) = policy::never_wired(s.size, spoke, mpi, s.offered) {
            say!("{line}");
            if fails {
                worst = worst.max(policy::STATUS_LAUNCHER);
            }
        }
    }
    if let (Some((format, fences)), Some((here, below))) = (s.fences, s.profile) {
        let mut hosts = vec![here];
        hosts.extend(below);
        let mut profile = JobProfile::build(s.size, s.tree, hosts, &fences, end_us);
        profile.restart = s.restart;
        match format {
            ProfileFormat::Text => kauri_os::console::err(&profile.text()),
            ProfileFormat::Json => say!("{}", profile.json()),
            ProfileFormat::Trace => {
                let file = format!("kauri-{}.trace.json", std::process::id());
                match write_new(std::path::Path::new(&file), profile.trace().as_bytes()) {
                    Ok(()) => say!(
                        "kauri: start-up trace in {file} (open it in ui.perfetto.dev or \
                         chrome://tracing)"
                    ),
                    Err(e) => say!("kauri: cannot write the start-up trace {file}: {e}"),
                }
            }
        }
    }
    worst
}

/// Writes `bytes` into a new file at `path`: whatever is there already (a file, a link
/// planted under the name, dangling or not) is an error, and is neither followed nor touched.
fn write_new(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    std::io::Write::write_all(&mut f, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start-up trace goes into a new file only: a file already at its name, or a
    /// symbolic link planted there (to a file of the user's, or to one yet to be made), is
    /// refused and left as it was.
    #[test]
    fn the_trace_is_written_into_a_new_file_only() {
        let dir = std::env::temp_dir().join(format!("kauri-trace-new-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fresh = dir.join("fresh.json");
        write_new(&fresh, b"{}").unwrap();
        assert_eq!(std::fs::read(&fresh).unwrap(), b"{}");
        let victim = dir.join("victim");
        std::fs::write(&victim, "the user's own\n").unwrap();
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let dangling = dir.join("dangling.json");
        std::os::unix::fs::symlink(dir.join("made"), &dangling).unwrap();
        for there in [&fresh, &link, &dangling] {
            let e = write_new(there, b"trace").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{there:?}");
        }
        assert_eq!(std::fs::read(&fresh).unwrap(), b"{}");
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "the user's own\n"
        );
        assert!(!dir.join("made").exists(), "a dangling link was followed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn ended(host: &str, code: Option<i32>, sig: Option<i32>, teardown: bool) -> RankState {
        RankState {
            host: host.into(),
            end: Some(RankEnd {
                pid: 42,
                code,
                signal: sig,
                ..RankEnd::default()
            }),
            during_teardown: teardown,
            ..RankState::default()
        }
    }

    #[test]
    fn the_servers_offered() {
        assert_eq!(offered(false, true), Wiring::Pmi);
        assert_eq!(offered(true, false), Wiring::Pmix);
        assert_eq!(offered(true, true), Wiring::Both);
    }

    #[test]
    fn every_exit_code_is_listed_by_host() {
        let ranks = vec![
            (0, ended("a", Some(0), None, false)),
            (1, ended("b", Some(3), None, false)),
            (2, ended("a", None, Some(9), true)),
            (
                3,
                RankState {
                    host: "b".into(),
                    ..RankState::default()
                },
            ),
        ];
        assert_eq!(
            exit_code_lines(&ranks),
            [
                "kauri: exit codes on a (ranks 0,2): 0,signal 9",
                "kauri: exit codes on b (ranks 1,3): 3,-"
            ]
        );
        assert!(exit_code_lines(&[]).is_empty());
    }

    #[test]
    fn failures_are_listed_and_the_worst_counts() {
        let jobs = vec![
            vec![
                (0, ended("a", Some(0), None, false)),
                (1, ended("a", Some(3), None, false)),
                (2, ended("b", None, Some(9), true)),
                (3, RankState::default()),
            ],
            vec![(1, ended("c", None, Some(11), false))],
        ];
        let (worst, lines) = failures(&jobs, false, false);
        assert_eq!(worst, 11);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0], "kauri: rank 1 (pid 42) on a exited with code 3");
        assert!(lines[1]
            .starts_with("kauri: rank 1 of spawned job 1 (pid 42) on c killed by signal 11"));
    }

    #[test]
    fn quiet_codes_keep_the_status_and_tolerated_signals_add_nothing() {
        let jobs = vec![vec![
            (0, ended("a", Some(5), None, false)),
            (1, ended("a", None, Some(9), false)),
        ]];
        let (worst, lines) = failures(&jobs, true, true);
        assert_eq!(worst, 5);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].ends_with(" (tolerated: -with-ft)"), "{}", lines[0]);
    }
}
