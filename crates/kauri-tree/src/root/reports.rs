//! What the root does with what a branch hands up: fences, publishes, requests, and reports of
//! ranks' and hosts' ends, through the policy to teardown; signals and timers.

use super::*;

impl Root {
    /// An event of job `j`'s ranks on this host.
    pub(super) fn on_node(&mut self, j: usize, ev: NodeEvent) {
        let now = self.clock.now();
        let Some(job) = self.live_mut(j) else {
            return debug!(j, "an event of a released job's ranks");
        };
        let out = job.branch.on_node(ev, now);
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

    /// A message up job `j`'s tree, at its top: acted on here.
    pub(super) fn on_up(&mut self, j: usize, up: Up) {
        let Some(job) = self.jobs.get_mut(j).and_then(Job::live_mut) else {
            return debug!(j, "a message up a released job's tree");
        };
        let branch = &mut job.branch;
        match up {
            Up::Fence { epoch, delta } => {
                // The whole tree has contributed: release everyone.
                let now = self.clock.now();
                if let Some((_, fences)) = self.profile.as_mut().filter(|_| j == 0) {
                    fences.push(RootFence::new(epoch, now, &delta));
                }
                let out = branch.fence_done(epoch, delta, now);
                self.on_out(j, out);
                if j == 0 {
                    self.note_progress(|p, now| p.fence_done(epoch, now));
                }
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
            Up::PmixCollective(c) => {
                self.collective(c.sig, &c.procs, &c.covered, c.data, c.context_id)
            }
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
            Up::StdinTaken(n) if j == 0 => self.stdin_credit.give_back(n),
            Up::StdinTaken(_) => {}
            Up::Hello { .. } | Up::Output { .. } | Up::Profile(_) | Up::Heartbeat | Up::Done => {}
        }
    }

    /// A report of job `j`'s ranks or hosts, handed up to the root: each kind is one step.
    pub(super) fn on_report(&mut self, j: usize, r: Report) {
        let Some(discarded) = self.live_mut(j).map(|job| job.discarded) else {
            return debug!(j, "a report of a released job");
        };
        match r {
            Report::Exited {
                host,
                in_teardown,
                end,
            } => self.on_exited(j, discarded, host, in_teardown, end),
            Report::Initialized { rank } => {
                if j == 0 {
                    self.note_progress(|p, now| p.initialized(rank, now));
                }
                self.on_initialized(j, rank, discarded)
            }
            Report::Progress(step) if j == 0 => self.note_progress(|p, now| p.step(step, now)),
            Report::Progress(_) => {}
            Report::Abort {
                rank,
                code,
                message,
            } => self.on_abort(j, rank, code, &message),
            Report::Failed { reason } => self.on_failed(discarded, &reason),
            Report::Lost {
                host,
                reason,
                ranks,
            } => self.on_lost(j, discarded, &host, reason, ranks),
            Report::NodeStarted { host, error, procs } => {
                self.on_node_started(j, host, error, procs)
            }
            Report::ProtocolError { rank, error } => {
                say!("kauri: {} sent a bad PMI message: {error}", client(j, rank));
            }
            Report::UnreadReplies { rank, queued } => {
                say!("kauri: {}", unread_replies_line(&client(j, rank), queued));
            }
            Report::Singleton { rank } => self.on_singleton(j, discarded, rank),
            Report::LeftPmi { rank } => self.on_left_pmi(j, discarded, rank),
        }
    }

    /// A rank ended (`end`, on `host`, which had begun the teardown if `in_teardown`): its
    /// host has a free slot again, its record keeps how it ended, and, unless its job was
    /// discarded, the policy judges its end.
    fn on_exited(
        &mut self,
        j: usize,
        discarded: bool,
        host: String,
        in_teardown: bool,
        end: RankEnd,
    ) {
        if let Some(n) = self.cluster.hosts.iter().position(|h| h.name == host) {
            self.cluster.in_use[n] = self.cluster.in_use[n].saturating_sub(1);
        }
        let in_teardown = ended_with_job(in_teardown, end.signal, self.ending);
        let Some(st) = self.live_mut(j).and_then(|job| job.ranks.get_mut(end.rank)) else {
            return;
        };
        st.host = host;
        st.during_teardown = in_teardown || discarded;
        st.end = Some(end);
        self.end_stuck_lookups();
        if discarded {
            return;
        }
        self.judge_exit(j, &end, in_teardown);
    }

    /// What a rank's end means for its job (`in_teardown`: it ended with the job): the other
    /// ranks are told of an abnormal end or of a death, and the policy's verdict may end the
    /// job.
    fn judge_exit(&mut self, j: usize, end: &RankEnd, in_teardown: bool) {
        let Some(job) = self.jobs[j].live() else {
            return;
        };
        let verdict = policy::on_exit(
            end.code,
            end.initialized,
            end.finalized,
            self.ending.is_some(),
            self.auto_cleanup,
            others_in_pmi(&job.ranks, end.rank),
        );
        let why = (verdict == ExitVerdict::Failed).then(|| {
            let host = job.ranks.get(end.rank).map_or("", |s| s.host.as_str());
            format!("{} on {host} {}", who(j, end.rank), how_it_ended(end))
        });
        // The other ranks hear of an abnormal end first (with -disable-auto-cleanup,
        // instead of the teardown).
        if abnormal_end(end.code, verdict) && !in_teardown && self.ending.is_none() {
            let failure = Failure::Ended {
                code: end.code,
                signal: end.signal,
            };
            self.pmix_failure(j, failure, vec![end.rank]);
        }
        if let Some(line) = why {
            self.failed_because(&line);
        }
        // As Hydra: a rank that leaves PMI without finalize has died, and the job goes
        // on without it; the survivors are told.
        let died = end.initialized && !end.finalized && !in_teardown;
        if died && verdict == ExitVerdict::Nothing && !self.auto_cleanup {
            self.dead_processes(j, [end.rank]);
        }
        self.act_on_verdict(j, end.rank, verdict);
    }

    /// Carries out the policy's verdict on the end of job `j`'s `rank`: nothing, or the
    /// teardown (with a line when the rank left PMI while others use it).
    fn act_on_verdict(&mut self, j: usize, rank: usize, verdict: ExitVerdict) {
        let Some(job) = self.jobs[j].live() else {
            return;
        };
        match verdict {
            ExitVerdict::Nothing => {}
            ExitVerdict::Failed => self.teardown(Ending::Failed),
            ExitVerdict::LeftPmi(what) => {
                let line = left_pmi_line(&job.who(j, rank), &job.ranks[rank].host, what);
                say!("kauri: {line}");
                self.failed_because(&line);
                self.teardown(Ending::Failed);
            }
        }
    }

    /// The job fails for what `line` says (the first such, before the job was ending, is
    /// what an attempt of a job that restarts tells its supervisor).
    fn failed_because(&mut self, line: &str) {
        if self.ending.is_some() {
            return;
        }
        if let Some(a) = self.attempt.as_mut().filter(|a| a.why.is_none()) {
            a.why = Some(line.to_string());
        }
    }

    /// A rank of job `j` finished the PMI handshake: a rank that already left without
    /// finalize can never join this one's fences, so the job ends.
    fn on_initialized(&mut self, j: usize, rank: usize, discarded: bool) {
        let Some(job) = self.jobs[j].live_mut() else {
            return;
        };
        if let Some(s) = job.ranks.get_mut(rank) {
            s.told_initialized = true;
        }
        let Some(g) = left_without_finalize(&job.ranks) else {
            return;
        };
        if self.ending.is_some() || discarded {
            return;
        }
        let s = &job.ranks[g];
        let what = if s.left_pmi && !s.ended() {
            HUNG_UP
        } else {
            policy::left_pmi(s.initialized())
        };
        let line = left_pmi_line(&job.who(j, g), &s.host, what);
        say!("kauri: {line}");
        self.failed_because(&line);
        let left = Failure::Ended {
            code: Some(0),
            signal: None,
        };
        self.pmix_failure(j, left, vec![g]);
        self.teardown(Ending::Failed);
    }

    /// A rank of job `j` (or a process not known) aborted the job: said here and to the
    /// debugger, and the job ends with its code.
    fn on_abort(&mut self, j: usize, rank: Option<usize>, code: i32, message: &str) {
        let who = rank.map_or("a process".to_string(), |r| who(j, r));
        let line = abort_line(&who, code, message);
        say!("kauri: {line}");
        self.failed_because(&line);
        kauri_host::mpir::aborting(&line);
        self.teardown(Ending::Abort(code));
    }

    /// A rank of job `j` closed its PMI connection without finalize and runs on: it uses PMI
    /// no more. While other ranks use it, they can never complete a fence with it, so the job
    /// ends (as when a rank exits 0 without finalize); else it goes on, and a rank that
    /// initializes later ends it ([`Root::on_initialized`]).
    fn on_left_pmi(&mut self, j: usize, discarded: bool, rank: usize) {
        let Some(job) = self.jobs[j].live_mut() else {
            return;
        };
        let Some(st) = job.ranks.get_mut(rank) else {
            return;
        };
        st.left_pmi = true;
        if discarded || self.ending.is_some() || !others_in_pmi(&job.ranks, rank) {
            return;
        }
        let line = left_pmi_line(&job.who(j, rank), &job.ranks[rank].host, HUNG_UP);
        say!("kauri: {line}");
        self.failed_because(&line);
        let left = Failure::Ended {
            code: Some(0),
            signal: None,
        };
        self.pmix_failure(j, left, vec![rank]);
        self.teardown(Ending::Failed);
    }

    /// A rank of job `j` runs as an Open MPI singleton: the job ends now, with one line naming
    /// the rank and what would have served it, and a failing status.
    fn on_singleton(&mut self, j: usize, discarded: bool, rank: usize) {
        let Some(job) = self.jobs[j].live() else {
            return;
        };
        if discarded || self.ending.is_some() {
            return;
        }
        let host = job.ranks.get(rank).map_or("its host", |r| r.host.as_str());
        let served = if job.plan.pmix {
            policy::Served::Pmix
        } else if job.plan.apps.iter().any(|a| a.uses_open_mpi_flux()) {
            policy::Served::FluxPmi
        } else {
            policy::Served::Pmi
        };
        let line = policy::singleton_line(&client(j, Some(rank)), host, served);
        say!("{line}");
        self.singleton_seen = true;
        self.teardown(Ending::Failed);
    }

    fn on_failed(&mut self, discarded: bool, reason: &str) {
        if discarded {
            return;
        }
        if self.ending.is_none() {
            say!("kauri: {reason}; ending the job");
        }
        self.failed_because(reason);
        self.teardown(Ending::Failed);
    }

    /// An agent of job `j` on `host` was lost, with the `ranks` of its subtree: the other
    /// ranks are told, then the spawn fails, the job goes on without it, or it ends.
    fn on_lost(
        &mut self,
        j: usize,
        discarded: bool,
        host: &str,
        reason: String,
        ranks: Vec<usize>,
    ) {
        let Some(job) = self.jobs[j].live() else {
            return;
        };
        if job.answer.is_none() && !discarded && self.ending.is_none() {
            self.drop_lost_ranks(j, ranks);
        }
        let first = !discarded && self.ending.is_none();
        if let Some(a) = self.attempt.as_mut().filter(|_| first) {
            if !a.lost.iter().any(|h| h == host) {
                a.lost.push(host.to_string());
            }
        }
        self.failed_because(&reason);
        let spawning = self.jobs[j].live().is_some_and(|job| job.answer.is_some());
        let after = after_lost(AfterLostFacts {
            spawning,
            discarded,
            auto_cleanup: self.auto_cleanup,
            ending: self.ending.is_some(),
            fault_tolerant: self.fault_tolerant,
        });
        match after {
            AfterLost::FailSpawn => {
                // A host of a job being spawned cannot be reached: the spawn fails.
                debug!(%host, "a host of a spawned job was lost");
                self.fail_spawn(j, reason);
            }
            AfterLost::GoOn(why) => {
                // The user asked the job to go on when a part of it fails: without this
                // host. A fence that needs its ranks fails the job when it starts.
                say!("kauri: {reason}; the job goes on without it ({why})");
                self.lost = true;
            }
            AfterLost::End { say } => {
                if say {
                    say!("kauri: {reason}");
                }
                self.teardown(Ending::Failed);
            }
            AfterLost::Nothing => {}
        }
    }

    /// The ranks of a lost host (and of the hosts below it) are gone with it: those of job
    /// `j` still running are failed processes to PMIx clients and, under
    /// `-disable-auto-cleanup`, dead processes to the others.
    fn drop_lost_ranks(&mut self, j: usize, ranks: Vec<usize>) {
        let Some(job) = self.jobs[j].live() else {
            return;
        };
        let gone: Vec<usize> = ranks
            .into_iter()
            .filter(|&r| job.ranks.get(r).is_some_and(|s| !s.ended()))
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

    /// An agent of job `j` on `host` started its ranks (`procs`), or could not (`error`):
    /// the first job's go into the debugger's table, and a failure to start ends the run.
    fn on_node_started(
        &mut self,
        j: usize,
        host: String,
        error: Option<String>,
        procs: Vec<(usize, u32, std::ffi::OsString)>,
    ) {
        // The debugger's table covers the first job only.
        if j == 0 {
            let n = procs.len();
            self.note_progress(|p, now| p.started(n, now));
            self.first()
                .procs
                .extend(
                    procs
                        .into_iter()
                        .map(|(rank, pid, exe)| kauri_host::mpir::Proc {
                            rank,
                            host: host.clone(),
                            executable: exe,
                            pid,
                        }),
                );
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

/// How a failed rank ended, for the line of a restart: `exited with code 3`, `was killed by
/// signal 9 (SIGKILL)`.
fn how_it_ended(end: &RankEnd) -> String {
    match (end.signal, end.code) {
        (Some(s), _) => format!("was killed by signal {s} ({})", policy::signal_name(s)),
        (None, Some(c)) => format!("exited with code {c}"),
        (None, None) => "ended".to_string(),
    }
}

/// Whether a rank ended with the job rather than as a failure: its host said it ended in
/// the teardown, or it was killed by the signal kauri forwarded to it (SIGINT, SIGHUP), the
/// signal that began the `ending`.
pub(super) fn ended_with_job(
    in_teardown: bool,
    signal: Option<i32>,
    ending: Option<Ending>,
) -> bool {
    // Here, the teardown began with the signal, so its host says so; an agent can see its
    // rank die of the forwarded signal before the teardown that follows it reaches it, so
    // the root decides.
    let forwarded = signal.is_some_and(|s| ending == Some(Ending::Signal(s)));
    in_teardown || forwarded
}

/// Whether a rank other than `rank` uses PMI still: it initialized, and neither finalized,
/// nor ended, nor closed its PMI connection.
pub(super) fn others_in_pmi(ranks: &[RankState], rank: usize) -> bool {
    ranks
        .iter()
        .enumerate()
        .any(|(r, s)| r != rank && s.initialized() && !s.finalized() && !s.left_pmi && !s.ended())
}

/// What a rank that closed its PMI connection without finalize, and runs on, did.
const HUNG_UP: &str = "closed its PMI connection without finalizing and runs on";

/// Whether a rank's end is abnormal, which the other ranks hear of: a code other than 0 (or
/// a signal), or leaving PMI while other ranks use it.
pub(super) fn abnormal_end(code: Option<i32>, verdict: ExitVerdict) -> bool {
    code != Some(0) || matches!(verdict, ExitVerdict::LeftPmi(_))
}

/// The first rank that exited 0 without finalizing PMI, or closed its PMI connection without
/// finalize and runs on (it can never join a fence).
pub(super) fn left_without_finalize(ranks: &[RankState]) -> Option<usize> {
    ranks.iter().position(|s| {
        let exited = s.end.is_some_and(|e| e.exited_with(0));
        !s.finalized() && (exited || s.left_pmi && !s.ended())
    })
}

/// The line for a rank (`who`, on `host`) that left PMI (`what` it did) while other ranks
/// use it.
pub(super) fn left_pmi_line(who: &str, host: &str, what: &str) -> String {
    format!("{who} on {host} {what} while other ranks use PMI; ending the job")
}

/// The line for an abort by `who` with `code` and the rank's `message` (none when empty).
pub(super) fn abort_line(who: &str, code: i32, message: &str) -> String {
    let msg = if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    };
    format!("{who} aborted the job with code {code}{msg}")
}

/// A PMI client of job `j`, by its rank when known.
pub(super) fn client(j: usize, rank: Option<usize>) -> String {
    rank.map_or("a PMI client".to_string(), |r| who(j, r))
}

/// The line for a client (`who`) whose connection is closed with `queued` bytes of replies
/// it did not read, counted in MiB.
pub(super) fn unread_replies_line(who: &str, queued: usize) -> String {
    format!(
        "{who} does not read its PMI replies ({} MiB queued); closing its connection",
        queued >> 20
    )
}

/// What the root knows when a host of a job is lost.
#[derive(Debug, Clone, Copy)]
pub(super) struct AfterLostFacts {
    /// The job is being spawned (its asker waits for the answer).
    pub(super) spawning: bool,
    /// The job failed to start and was killed.
    pub(super) discarded: bool,
    pub(super) auto_cleanup: bool,
    /// The run is ending already.
    pub(super) ending: bool,
    pub(super) fault_tolerant: bool,
}

/// What the root does once a host of a job is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterLost {
    /// The spawn of the job fails.
    FailSpawn,
    /// The job goes on without the host, by the option named.
    GoOn(&'static str),
    /// The run ends; `say`: with the reason's line (none once it is ending).
    End { say: bool },
    /// Nothing: the job was discarded.
    Nothing,
}

/// The decision on a lost host: a spawn fails, a job the user asked to keep going goes on
/// (`-disable-auto-cleanup`, `-with-ft`), any other ends the run.
pub(super) fn after_lost(f: AfterLostFacts) -> AfterLost {
    if f.spawning {
        AfterLost::FailSpawn
    } else if !f.discarded && !f.auto_cleanup && !f.ending {
        AfterLost::GoOn(if f.fault_tolerant {
            "-with-ft"
        } else {
            "-disable-auto-cleanup"
        })
    } else if !f.discarded {
        AfterLost::End { say: !f.ending }
    } else {
        AfterLost::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rank that initialized or not, and ended (finalized or not) with `ended`'s code and
    /// signal, or runs.
    fn rank(
        initialized: bool,
        finalized: bool,
        ended: Option<(Option<i32>, Option<i32>)>,
    ) -> RankState {
        RankState {
            told_initialized: initialized,
            end: ended.map(|(code, signal)| RankEnd {
                code,
                signal,
                initialized,
                finalized,
                ..RankEnd::default()
            }),
            ..RankState::default()
        }
    }

    #[test]
    fn a_rank_killed_by_the_forwarded_signal_ended_with_the_job() {
        let int = Some(Ending::Signal(libc::SIGINT));
        assert!(ended_with_job(false, Some(libc::SIGINT), int));
        assert!(!ended_with_job(false, Some(libc::SIGKILL), int));
        assert!(!ended_with_job(
            false,
            Some(libc::SIGINT),
            Some(Ending::Failed)
        ));
        assert!(!ended_with_job(false, None, int));
        assert!(ended_with_job(true, None, None));
    }

    #[test]
    fn others_in_pmi_counts_only_other_running_initialized_ranks() {
        let ranks = vec![
            rank(true, false, None),
            rank(true, true, Some((Some(0), None))),
            rank(true, false, Some((Some(0), None))),
            rank(false, false, None),
        ];
        assert!(!others_in_pmi(&ranks, 0));
        assert!(others_in_pmi(&ranks, 1));
        assert!(!others_in_pmi(&ranks[1..], 5));
    }

    #[test]
    fn an_end_is_abnormal_for_a_failure_or_leaving_pmi() {
        assert!(!abnormal_end(Some(0), ExitVerdict::Nothing));
        assert!(abnormal_end(Some(0), ExitVerdict::LeftPmi("left")));
        assert!(abnormal_end(Some(3), ExitVerdict::Nothing));
        assert!(abnormal_end(None, ExitVerdict::Failed));
    }

    #[test]
    fn the_first_rank_that_exited_0_unfinalized_is_found() {
        let ranks = vec![
            rank(true, true, Some((Some(0), None))),
            rank(true, false, Some((Some(1), None))),
            rank(true, false, None),
            rank(false, false, Some((Some(0), None))),
            rank(true, false, Some((Some(0), None))),
        ];
        assert_eq!(left_without_finalize(&ranks), Some(3));
        assert_eq!(left_without_finalize(&ranks[..3]), None);
    }

    #[test]
    fn lines_for_the_user() {
        assert_eq!(
            abort_line("rank 2", 7, ""),
            "rank 2 aborted the job with code 7"
        );
        assert_eq!(
            abort_line("a process", 1, "bye"),
            "a process aborted the job with code 1: bye"
        );
        assert_eq!(client(0, None), "a PMI client");
        assert_eq!(client(2, Some(1)), "rank 1 of spawned job 2");
        assert_eq!(
            unread_replies_line("rank 0", 3 << 20 | 5),
            "rank 0 does not read its PMI replies (3 MiB queued); closing its connection"
        );
        assert_eq!(
            left_pmi_line("rank 1", "n1", "exited before PMI init"),
            "rank 1 on n1 exited before PMI init while other ranks use PMI; ending the job"
        );
    }

    #[test]
    fn a_lost_host_fails_a_spawn_goes_on_or_ends_the_run() {
        let f = AfterLostFacts {
            spawning: false,
            discarded: false,
            auto_cleanup: true,
            ending: false,
            fault_tolerant: false,
        };
        assert_eq!(after_lost(f), AfterLost::End { say: true });
        let ending = AfterLostFacts { ending: true, ..f };
        assert_eq!(after_lost(ending), AfterLost::End { say: false });
        let spawning = AfterLostFacts {
            spawning: true,
            discarded: true,
            ..f
        };
        assert_eq!(after_lost(spawning), AfterLost::FailSpawn);
        let keep = AfterLostFacts {
            auto_cleanup: false,
            ..f
        };
        assert_eq!(after_lost(keep), AfterLost::GoOn("-disable-auto-cleanup"));
        let ft = AfterLostFacts {
            fault_tolerant: true,
            ..keep
        };
        assert_eq!(after_lost(ft), AfterLost::GoOn("-with-ft"));
        let keep_ending = AfterLostFacts {
            ending: true,
            ..keep
        };
        assert_eq!(after_lost(keep_ending), AfterLost::End { say: false });
        let discarded = AfterLostFacts {
            discarded: true,
            ..f
        };
        assert_eq!(after_lost(discarded), AfterLost::Nothing);
    }
}
