//! What the root does with what a branch hands up: fences, publishes, requests, and reports of
//! ranks' and hosts' ends, through the policy to teardown; signals and timers.

use super::*;

impl Root {
    /// An event of job `j`'s ranks on this host.
    pub(super) fn on_node(&mut self, j: usize, ev: NodeEvent) {
        let Some(job) = self.live_mut(j) else {
            return debug!(j, "an event of a released job's ranks");
        };
        let out = job.branch.on_node(ev);
        self.on_out(j, out);
        self.on_deferred(j);
    }

    /// An event of job `j`'s child links.
    pub(super) fn on_child(&mut self, j: usize, ev: HubEvent) {
        let Some(job) = self.live_mut(j) else {
            return debug!(j, "an event of a released job's links");
        };
        let out = job.branch.on_child(ev);
        self.on_out(j, out);
        self.on_deferred(j);
    }

    /// What job `j`'s branch made besides the answer of the event at hand.
    pub(super) fn on_deferred(&mut self, j: usize) {
        while let Some(out) = self.live_mut(j).and_then(|job| job.branch.take_deferred()) {
            self.on_out(j, Some(out));
        }
    }

    /// What job `j`'s branch handed up: at the root, it is acted on here.
    pub(super) fn on_out(&mut self, j: usize, out: Option<Out>) {
        match out {
            None => {}
            Some(Out::Refused { line }) => say!("kauri: {line}"),
            Some(Out::Up(up)) => self.on_up(j, up),
        }
    }

    pub(super) fn on_up(&mut self, j: usize, up: Up) {
        let Some(job) = self.jobs.get_mut(j).and_then(Job::live_mut) else {
            return debug!(j, "a message up a released job's tree");
        };
        let branch = &mut job.branch;
        match up {
            Up::Fence { epoch, delta } => {
                // The whole tree has contributed: release everyone.
                if let Some((_, fences)) = self.profile.as_mut().filter(|_| j == 0) {
                    fences.push(RootFence::new(epoch, self.clock.now(), &delta));
                }
                branch.fence_done(epoch, delta, None);
            }
            Up::PmixFence { epoch, data } => branch.pmix_fence_done(epoch, data, None),
            Up::Publish(delta) => branch.publish(delta),
            Up::Dmodex {
                from,
                req,
                rank,
                nspace: None,
            } => {
                let out = branch.dmodex_serve(from, req, rank);
                self.on_out(j, out);
            }
            Up::Dmodex {
                from,
                req,
                rank,
                nspace: Some(ns),
            } => self.cross_dmodex(j, from, req, rank, &ns),
            Up::DmodexData {
                to: CROSS_JOB,
                req,
                status,
                data,
            } => {
                if let Some((k, from, asked)) = self.cross_dmodex.remove(&req) {
                    if let Some(job) = self.live_mut(k) {
                        job.branch.dmodex_data(from, asked, status, data);
                    }
                }
            }
            Up::DmodexData {
                to,
                req,
                status,
                data,
            } => branch.dmodex_data(to, req, status, data),
            Up::PmixCollective {
                sig,
                procs,
                covered,
                data,
                context_id,
            } => self.collective(sig, &procs, &covered, data, context_id),
            Up::Request { from, req, service } => self.requests.push((
                Asker {
                    job: j,
                    agent: from,
                    req,
                },
                service,
            )),
            Up::Reports(reports) => {
                for r in reports {
                    self.on_report(j, r);
                }
            }
            Up::Status(hosts) => self.status_answer(j, hosts),
            Up::Hello { .. } | Up::Output { .. } | Up::Profile(_) | Up::Heartbeat | Up::Done => {}
        }
    }

    pub(super) fn on_report(&mut self, j: usize, r: Report) {
        let Some(discarded) = self.live_mut(j).map(|job| job.discarded) else {
            return debug!(j, "a report of a released job");
        };
        match r {
            Report::Exited {
                rank,
                pid,
                host,
                code,
                signal,
                finalized,
                initialized,
                in_teardown,
                ran_alone,
            } => {
                if let Some(n) = self.cluster.hosts.iter().position(|h| h.name == host) {
                    self.cluster.in_use[n] = self.cluster.in_use[n].saturating_sub(1);
                }
                // A rank killed by the signal kauri forwarded to it (SIGINT, SIGHUP) ended
                // with the job, not as a failure. Here, the teardown began with the signal,
                // so its host says so; an agent can see its rank die of the forwarded signal
                // before the teardown that follows it reaches it, so the root decides.
                let forwarded = signal.is_some_and(|s| self.ending == Some(Ending::Signal(s)));
                let in_teardown = in_teardown || forwarded;
                let Some(job) = self.jobs[j].live_mut() else {
                    return;
                };
                let Some(st) = job.ranks.get_mut(rank) else {
                    return;
                };
                *st = RankState {
                    host,
                    pid,
                    ended: Some((code, signal)),
                    during_teardown: in_teardown || discarded,
                    initialized,
                    finalized,
                    ran_alone,
                };
                self.end_stuck_lookups();
                if discarded {
                    return;
                }
                let Some(job) = self.jobs[j].live() else {
                    return;
                };
                let others_in_pmi =
                    job.ranks.iter().enumerate().any(|(r, s)| {
                        r != rank && s.initialized && !s.finalized && s.ended.is_none()
                    });
                let verdict = policy::on_exit(
                    code,
                    initialized,
                    finalized,
                    self.ending.is_some(),
                    self.auto_cleanup,
                    others_in_pmi,
                );
                // The other ranks hear of an abnormal end first (with -disable-auto-cleanup,
                // instead of the teardown).
                let abnormal = code != Some(0) || matches!(verdict, ExitVerdict::LeftPmi(_));
                if abnormal && !in_teardown && self.ending.is_none() {
                    self.pmix_failure(j, Failure::Ended { code, signal }, vec![rank]);
                }
                // As Hydra: a rank that leaves PMI without finalize has died, and the job goes
                // on without it; the survivors are told.
                let died = initialized && !finalized && !in_teardown;
                if died && verdict == ExitVerdict::Nothing && !self.auto_cleanup {
                    self.dead_processes(j, [rank]);
                }
                let Some(job) = self.jobs[j].live() else {
                    return;
                };
                match verdict {
                    ExitVerdict::Nothing => {}
                    ExitVerdict::Failed => self.teardown(Ending::Failed),
                    ExitVerdict::LeftPmi(what) => {
                        say!(
                            "kauri: {} on {} {what} while other ranks use PMI; ending the job",
                            job.who(j, rank),
                            job.ranks[rank].host
                        );
                        self.teardown(Ending::Failed);
                    }
                }
            }
            Report::Initialized { rank } => {
                let Some(job) = self.jobs[j].live_mut() else {
                    return;
                };
                if let Some(s) = job.ranks.get_mut(rank) {
                    s.initialized = true;
                }
                // A rank that already left without finalize can never join this one's fences.
                let gone = job
                    .ranks
                    .iter()
                    .enumerate()
                    .find(|(_, s)| s.ended == Some((Some(0), None)) && !s.finalized);
                if let (Some((g, s)), None, false) = (gone, &self.ending, discarded) {
                    say!(
                        "kauri: {} on {} {} while other ranks use PMI; ending the job",
                        job.who(j, g),
                        s.host,
                        policy::left_pmi(s.initialized)
                    );
                    let left = Failure::Ended {
                        code: Some(0),
                        signal: None,
                    };
                    self.pmix_failure(j, left, vec![g]);
                    self.teardown(Ending::Failed);
                }
            }
            Report::Abort {
                rank,
                code,
                message,
            } => {
                let who = rank.map_or("a process".to_string(), |r| who(j, r));
                let msg = if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                };
                say!("kauri: {who} aborted the job with code {code}{msg}");
                crate::host::mpir::aborting(&format!(
                    "{who} aborted the job with code {code}{msg}"
                ));
                self.teardown(Ending::Abort(code));
            }
            Report::Failed { reason } => {
                if discarded {
                    return;
                }
                if self.ending.is_none() {
                    say!("kauri: {reason}; ending the job");
                }
                self.teardown(Ending::Failed);
            }
            Report::Lost {
                host,
                reason,
                ranks,
            } => {
                let Some(job) = self.jobs[j].live() else {
                    return;
                };
                if job.answer.is_none() && !discarded && self.ending.is_none() {
                    // Its ranks (and those of the hosts below it) are gone with it.
                    let gone: Vec<usize> = ranks
                        .into_iter()
                        .filter(|&r| job.ranks.get(r).is_some_and(|s| s.ended.is_none()))
                        .collect();
                    let lost = if self.fault_tolerant {
                        Failure::Aborted
                    } else {
                        Failure::Lost
                    };
                    self.pmix_failure(j, lost, gone.clone());
                    if !self.auto_cleanup {
                        self.dead_processes(j, gone);
                    }
                }
                if self.jobs[j].live().is_some_and(|job| job.answer.is_some()) {
                    // A host of a job being spawned cannot be reached: the spawn fails.
                    debug!(%host, "a host of a spawned job was lost");
                    self.fail_spawn(j, reason);
                } else if !discarded && !self.auto_cleanup && self.ending.is_none() {
                    // The user asked the job to go on when a part of it fails: without this
                    // host. A fence that needs its ranks fails the job when it starts.
                    let why = if self.fault_tolerant {
                        "-with-ft"
                    } else {
                        "-disable-auto-cleanup"
                    };
                    say!("kauri: {reason}; the job goes on without it ({why})");
                    self.lost = true;
                } else if !discarded {
                    if self.ending.is_none() {
                        say!("kauri: {reason}");
                    }
                    self.teardown(Ending::Failed);
                }
            }
            Report::NodeStarted { host, error, procs } => {
                // The debugger's table covers the first job only.
                if j == 0 {
                    self.first()
                        .procs
                        .extend(procs.into_iter().map(|(rank, pid, exe)| {
                            crate::host::mpir::Proc {
                                rank,
                                host: host.clone(),
                                executable: exe,
                                pid,
                            }
                        }));
                    self.mpir_check(j);
                }
                if let Some(e) = self.node_started(j, error) {
                    if self.ending.is_none() {
                        say!("kauri: {e}; ending the job");
                    }
                    debug!(%host, "a host could not start its ranks");
                    self.teardown(Ending::Failed);
                }
            }
            Report::ProtocolError { rank, error } => {
                let who = rank.map_or("a PMI client".to_string(), |r| who(j, r));
                say!("kauri: {who} sent a bad PMI message: {error}");
            }
            Report::UnreadReplies { rank, queued } => {
                let who = rank.map_or("a PMI client".to_string(), |r| who(j, r));
                say!(
                    "kauri: {who} does not read its PMI replies ({} MiB queued); closing its \
                     connection",
                    queued >> 20
                );
            }
        }
    }

    /// A signal to kauri: SIGINT, SIGTERM and SIGHUP end the job (a second SIGINT during
    /// the teardown kills at once); SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the
    /// ranks first.
    pub(super) fn on_signal(&mut self, sig: i32) {
        match sig {
            libc::SIGINT if self.ending.is_some() => self.kill_all(),
            libc::SIGTERM => self.teardown(Ending::Signal(sig)),
            libc::SIGINT | libc::SIGHUP => {
                self.signal_all(sig);
                self.teardown(Ending::Signal(sig));
            }
            libc::SIGUSR1 => self.diagnose(Asked::Signal, false),
            _ => self.signal_all(sig),
        }
    }

    /// `MPIEXEC_TIMEOUT` bounds the whole run: it starts the teardown, or, when one is under
    /// way already, kills everything and stops waiting soon after.
    pub(super) fn on_timeout(&mut self) {
        self.timed_out = true;
        let secs = self.timeout.unwrap_or_default().as_secs();
        if self.ending.is_none() {
            say!("kauri: job timed out after {secs} s (MPIEXEC_TIMEOUT)");
            // Where is everybody? The teardown follows the answers (or the wait's end).
            self.diagnose(Asked::Timeout, self.timeout_stacks);
            return;
        }
        say!("kauri: job timed out after {secs} s (MPIEXEC_TIMEOUT) during its teardown");
        self.kill_all();
        self.kill_at = None;
        let soon = Instant::now() + Duration::from_secs(1);
        self.leave_at = Some(self.leave_at.map_or(soon, |t| t.min(soon)));
    }

    /// The agents had their time after the kill: name the ones that never answered and stop
    /// waiting (leaving closes their links, which ends them and their ranks).
    pub(super) fn give_up(&mut self) {
        self.leave_at = None;
        let mut silent: Vec<String> = Vec::new();
        for j in self.jobs.iter().filter_map(Job::live) {
            for h in j.branch.kids().unfinished() {
                if !silent.contains(&h) {
                    silent.push(h);
                }
            }
            if j.branch.node().is_some_and(|n| n.running() > 0) {
                silent.push(format!("{} (this host's ranks)", self.cluster.me));
            }
        }
        let waited = self.answer_wait.as_secs_f64();
        say!(
            "kauri: no answer from {} {waited:.0} s after the kill; leaving without it",
            if silent.is_empty() {
                "the job".to_string()
            } else {
                format!("the agent(s) on {}", silent.join(", "))
            }
        );
        self.gave_up = true;
    }

    pub(super) fn on_kill_timer(&mut self) {
        self.leave_at = Some(Instant::now() + self.answer_wait);
        self.kill_all();
        self.kill_at = None;
    }

    pub(super) fn signal_all(&mut self, sig: i32) {
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            j.branch.signal(sig);
        }
    }

    pub(super) fn kill_all(&mut self) {
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            j.branch.kill();
        }
    }

    /// Tells every host of job `j`, when it is a PMIx job, that `ranks` failed: their PMIx
    /// servers notify their local clients. Called before the teardown the failure may bring,
    /// which follows it down the same links.
    pub(super) fn pmix_failure(&mut self, j: usize, failure: Failure, ranks: Vec<usize>) {
        let Some(job) = self.live_mut(j) else {
            return;
        };
        if !job.plan.pmix || ranks.is_empty() {
            return;
        }
        let (status, exit_code) = failure.event();
        job.branch.pmix_failure(status, ranks, exit_code, None);
    }

    /// Adds `ranks` to job `j`'s dead ranks (`-disable-auto-cleanup`, the job going on) and
    /// tells every host of the job: each serves the list as `PMI_dead_processes`, then sends
    /// `SIGUSR1` to its ranks in PMI. Nothing once the job is ending.
    pub(super) fn dead_processes(&mut self, j: usize, ranks: impl IntoIterator<Item = usize>) {
        if self.ending.is_some() {
            return;
        }
        let Some(job) = self.jobs[j].live_mut() else {
            return;
        };
        let before = job.dead.len();
        for r in ranks {
            if !job.dead.contains(&r) {
                job.dead.push(r);
            }
        }
        if job.dead.len() > before {
            job.branch.dead_processes(job.dead.clone(), None);
        }
    }

    /// Ends the run: `SIGTERM` to every rank of every job, `SIGKILL` after the grace. The
    /// first reason is the one that counts.
    pub(super) fn teardown(&mut self, why: Ending) {
        if self.ending.is_none() {
            self.ending = Some(why);
        }
        if self
            .jobs
            .iter()
            .filter_map(Job::live)
            .all(|j| j.branch.ending())
        {
            return;
        }
        for j in self.jobs.iter_mut().filter_map(Job::live_mut) {
            j.branch.teardown();
        }
        self.kill_at = Some(Instant::now() + self.grace);
    }
}
