//! The requests only the root answers: spawn (a new job of the run), publish and lookup (the
//! name table or `kauri nameserver`), cross-job direct modex and PMIx collectives.

use super::*;
use kauri_proto::service::NoPlan;

impl Root {
    /// Sends an answer to whoever asked.
    /// Ends the lookups that wait for names nobody is left to publish: once every process of
    /// the run still running waits in a lookup, each waiting lookup is answered "not
    /// published" (the PMIx client gets `PMIX_ERR_NOT_FOUND`), with one line saying so. Only
    /// for the run's own name table: through `kauri nameserver`, another run may publish.
    pub(super) fn end_stuck_lookups(&mut self) {
        if self.waiting.is_empty() || !matches!(self.names, Names::Own(_)) {
            return;
        }
        let now = std::time::Instant::now();
        let waiting: std::collections::HashSet<&str> = self
            .waiting
            .iter(now)
            .filter_map(|(_, (_, by))| by.as_deref())
            .collect();
        // A released job's ranks have all ended.
        let all_wait = self.jobs.iter().filter_map(Job::live).all(|j| {
            j.ranks.iter().enumerate().all(|(r, s)| {
                s.ended() || waiting.contains(format!("{}:{r}", j.plan.kvsname).as_str())
            })
        });
        if !all_wait {
            return;
        }
        let stuck = self.waiting.drain(now);
        if stuck.is_empty() {
            return;
        }
        let mut names: Vec<&str> = stuck.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        say!(
            "kauri: a PMIx lookup of {} can never succeed: every process of the run still running waits in a lookup; it ends with PMIX_ERR_NOT_FOUND",
            names.join(", ")
        );
        for (name, (asker, _)) in stuck {
            let e = Refused::NobodyLeft { name };
            self.answer(asker, ServiceReply::Found(Err(e)));
        }
    }

    pub(super) fn answer(&mut self, a: Asker, reply: ServiceReply) {
        if let Some(j) = self.live_mut(a.job) {
            j.branch.reply(a.agent, a.req, reply);
        }
    }

    /// A spawned job whose start failed: answer the spawner, kill what did start.
    pub(super) fn fail_spawn(&mut self, idx: usize, why: String) {
        let Some(j) = self.live_mut(idx) else {
            return;
        };
        j.discarded = true;
        j.branch.kill();
        if let Some(a) = j.answer.take() {
            debug!(idx, %why, "spawn failed");
            self.answer(a, ServiceReply::Spawn(Err(why)));
        }
    }

    /// Answers the spawner once every host of spawned job `idx` has said how its start went.
    pub(super) fn check_spawn(&mut self, idx: usize) {
        let Some(j) = self.live_mut(idx) else {
            return;
        };
        if j.starting > 0 || j.answer.is_none() || j.discarded {
            return;
        }
        if let Some(e) = j.start_error.clone() {
            self.fail_spawn(idx, e);
        } else if let Some(a) = j.answer.take() {
            let done = SpawnDone {
                jobid: j.plan.kvsname.clone(),
                size: j.plan.size,
            };
            self.answer(a, ServiceReply::Spawn(Ok(done)));
        }
    }

    /// One more host of job `idx` has started its ranks (or failed to); the error when it
    /// ends the run (a host of the job the user started).
    pub(super) fn node_started(&mut self, idx: usize, error: Option<String>) -> Option<String> {
        let j = self.live_mut(idx)?;
        j.starting = j.starting.saturating_sub(1);
        if j.discarded {
            // Late agents of a failed spawn: make sure they end too.
            j.branch.kill();
            return None;
        }
        if let Some(e) = error {
            if j.spawner.is_none() {
                return Some(e);
            }
            j.start_error.get_or_insert(e);
        }
        self.check_spawn(idx);
        None
    }

    /// Fills the debugger's process table (MPIR) once every host of the first job has
    /// started its ranks: the table covers the job the user started, as mpiexec's does.
    pub(super) fn mpir_check(&mut self, j: usize) {
        let Some(job) = self.live_mut(j) else {
            return;
        };
        let all_in = job.procs.len() == job.plan.size;
        if j != 0 || !all_in {
            return;
        }
        kauri_host::mpir::publish(std::mem::take(&mut job.procs));
    }

    /// The job whose namespace (kvsname) is `nspace`.
    pub(super) fn job_named(&self, nspace: &str) -> Option<usize> {
        self.jobs.iter().position(|j| j.kvsname() == nspace)
    }

    /// Agent `from` of job `j` wants the PMIx data of `rank` of namespace `nspace`, another
    /// job's (one its ranks connected to): asked through that job's tree, under an id of its
    /// own; the answer comes up that tree to [`CROSS_JOB`] and goes down `j`'s to the asker.
    pub(super) fn cross_dmodex(
        &mut self,
        j: usize,
        from: u32,
        req: u64,
        rank: usize,
        nspace: &str,
    ) {
        let Some(k) = self.job_named(nspace) else {
            let none = kauri_proto::pmix::ffi::PMIX_ERR_NOT_FOUND;
            if let Some(job) = self.live_mut(j) {
                job.branch.dmodex_data(from, req, none, Vec::new());
            }
            return;
        };
        let Some(job) = self.live_mut(k) else {
            // An ended job's data went with it, as under Hydra.
            let none = kauri_proto::pmix::ffi::PMIX_ERR_NOT_FOUND;
            if let Some(job) = self.live_mut(j) {
                job.branch.dmodex_data(from, req, none, Vec::new());
            }
            return;
        };
        if k == j {
            let out = job.branch.dmodex_serve(from, req, rank);
            return self.on_out(j, out);
        }
        let id = (0..)
            .find(|i| !self.cross_dmodex.contains_key(i))
            .expect("a free id");
        self.cross_dmodex.insert(id, (j, from, req));
        let out = self
            .live_mut(k)
            .and_then(|job| job.branch.dmodex_serve(CROSS_JOB, id, rank));
        self.on_out(k, out);
    }

    /// One server's part of PMIx collective `sig` over `procs`: it covers the participants
    /// `covered`. Once every participant is covered, every host of every job taking part gets
    /// the contributions (the hosts with a part in it answer their server), and a context id
    /// new in the run if a server asked for one (`context_id`: a group construct).
    pub(super) fn collective(
        &mut self,
        sig: String,
        procs: &[(String, u32)],
        covered: &[(String, u32)],
        data: Vec<u8>,
        context_id: bool,
    ) {
        let wild = kauri_proto::pmix::ffi::PMIX_RANK_WILDCARD;
        if !self.collectives.contains_key(&sig) {
            let mut c = Collective::default();
            for (ns, r) in procs {
                let Some(k) = self.job_named(ns) else {
                    c.failed
                        .get_or_insert(format!("{ns} is no job of this run"));
                    continue;
                };
                c.jobs.insert(k);
                if *r == wild {
                    c.want.extend((0..self.jobs[k].size()).map(|r| (k, r)));
                } else {
                    c.want.insert((k, *r as usize));
                }
            }
            self.collectives.insert(sig.clone(), c);
        }
        let mut names = std::collections::HashMap::new();
        for (ns, r) in covered {
            let k = *names
                .entry(ns.clone())
                .or_insert_with(|| self.job_named(ns));
            if let Some(k) = k {
                self.collectives
                    .get_mut(&sig)
                    .expect("made above")
                    .have
                    .insert((k, *r as usize));
            }
        }
        let c = self.collectives.get_mut(&sig).expect("made above");
        c.data.extend_from_slice(&data);
        c.context_id |= context_id;
        if c.failed.is_none() && !c.want.is_subset(&c.have) {
            return;
        }
        let c = self.collectives.remove(&sig).expect("made above");
        let status = match &c.failed {
            None => kauri_proto::pmix::ffi::PMIX_SUCCESS,
            Some(why) => {
                say!("kauri: a PMIx collective cannot complete: {why}");
                kauri_proto::pmix::ffi::PMIX_ERR_NOT_FOUND
            }
        };
        let id = (c.context_id && c.failed.is_none()).then(|| {
            self.next_context_id += 1;
            self.next_context_id
        });
        debug!(%sig, jobs = c.jobs.len(), context_id = ?id, "PMIx collective complete");
        for k in c.jobs {
            if let Some(job) = self.live_mut(k) {
                job.branch
                    .pmix_collective_done(sig.clone(), status, c.data.clone(), id);
            }
        }
    }

    /// Serves the requests the last event brought: spawns start their job here; the name
    /// service answers from the run's table or asks the shared server.
    pub(super) async fn serve_requests(&mut self) {
        for (asker, service) in std::mem::take(&mut self.requests) {
            match service {
                Service::Spawn {
                    commands,
                    preput,
                    pmix,
                } => self.spawn(asker, &commands, preput, pmix).await,
                Service::Terminate {
                    procs,
                    by,
                    status,
                    message,
                } => {
                    let reply = self.terminate(&procs, &by, status, &message);
                    self.answer(asker, ServiceReply::Done(reply));
                }
                Service::Jobs => {
                    let jobs = self
                        .jobs
                        .iter()
                        .map(|j| (j.kvsname().to_string(), j.size()))
                        .collect();
                    self.answer(asker, ServiceReply::Jobs(jobs));
                }
                Service::JobOf { nspace } => {
                    let plan = self
                        .job_named(&nspace)
                        .and_then(|k| self.jobs[k].live())
                        .map(|j| Box::new(j.plan.clone()))
                        .ok_or(NoPlan::NoJob { nspace });
                    self.answer(asker, ServiceReply::Job(plan));
                }
                s => match &mut self.names {
                    Names::Own(t) => {
                        let reply = t.apply(0, &s);
                        let now = std::time::Instant::now();
                        match (&s, &reply) {
                            // Nobody published the name yet: a lookup that waits is answered
                            // by the publish.
                            (Service::Lookup { name, wait, by }, ServiceReply::Found(Err(e)))
                                if *wait != Wait::No && e.not_published() =>
                            {
                                debug!(%name, ?wait, "a lookup waits for its name");
                                self.waiting.add(name, (asker, by.clone()), *wait, now);
                                self.end_stuck_lookups();
                            }
                            (Service::Publish { name, port, .. }, ServiceReply::Done(Ok(()))) => {
                                let waiting = self.waiting.published(name, now);
                                self.answer(asker, reply);
                                for (w, _) in waiting {
                                    self.answer(w, ServiceReply::Found(Ok(port.clone())));
                                }
                            }
                            _ => self.answer(asker, reply),
                        }
                    }
                    Names::Server(c) => {
                        let (c, tx) = (c.clone(), self.svc_tx.clone());
                        tokio::task::spawn_local(async move {
                            let r = c.ask(s).await;
                            let _ = tx.send((asker, r));
                        });
                    }
                },
            }
        }
    }

    /// `PMIx_Abort` of some processes by `by`: one line, then `SIGKILL` to each (a rank of
    /// `PMIX_RANK_WILDCARD`: every rank of that namespace) down its job's tree. What follows is what
    /// follows any rank killed by a signal (the job ends, unless `-disable-auto-cleanup`).
    pub(super) fn terminate(
        &mut self,
        procs: &[(String, u32)],
        by: &str,
        status: i32,
        message: &str,
    ) -> Result<(), Refused> {
        let mut by_job: Vec<(usize, Vec<usize>)> = Vec::new();
        for (ns, r) in procs {
            let k = self
                .job_named(ns)
                .ok_or_else(|| Refused::NoJob { ns: ns.clone() })?;
            let size = self.jobs[k].size();
            let ranks: Vec<usize> = if *r == kauri_proto::pmix::ffi::PMIX_RANK_WILDCARD {
                (0..size).collect()
            } else if (*r as usize) < size {
                vec![*r as usize]
            } else {
                return Err(Refused::NoRank {
                    ns: ns.clone(),
                    rank: *r,
                });
            };
            match by_job.iter_mut().find(|(j, _)| *j == k) {
                Some((_, v)) => v.extend(ranks),
                None => by_job.push((k, ranks)),
            }
        }
        let what: Vec<String> = by_job
            .iter()
            .map(|(k, ranks)| {
                let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
                format!("{} rank(s) {}", self.jobs[*k].kvsname(), list.join(","))
            })
            .collect();
        let why = if message.is_empty() {
            String::new()
        } else {
            format!(": {message}")
        };
        say!(
            "kauri: {by} called PMIx_Abort (status {status}) on {}{why}",
            what.join("; ")
        );
        for (k, mut ranks) in by_job {
            ranks.sort_unstable();
            ranks.dedup();
            if let Some(job) = self.live_mut(k) {
                job.branch.signal_ranks(libc::SIGKILL, ranks);
            }
        }
        Ok(())
    }

    /// Starts the job a rank asked for; the answer goes back once every host started its
    /// ranks, or at once when it cannot start.
    pub(super) async fn spawn(
        &mut self,
        asker: Asker,
        commands: &[SpawnCommand],
        preput: Delta,
        pmix: Option<kauri_proto::service::PmixSpawn>,
    ) {
        if self.ending.is_some() {
            let reply = ServiceReply::Spawn(Err("the run is ending".into()));
            return self.answer(asker, reply);
        }
        let Some(spawner) = self.jobs.get(asker.job).and_then(Job::live) else {
            return debug!(job = asker.job, "a spawn asked by a released job");
        };
        let spawner = &spawner.plan;
        let planned = plan_spawn(&mut self.cluster, spawner, commands, preput, pmix.as_ref());
        let (plan, local, remote) = match planned {
            Ok(x) => x,
            Err(e) => return self.answer(asker, ServiceReply::Spawn(Err(e.to_string()))),
        };
        let idx = self.jobs.len();
        info!(idx, kvsname = %plan.kvsname, size = plan.size, "spawning a job");
        let started = start_job(
            idx,
            &self.cluster,
            plan,
            local,
            remote,
            &self.wires,
            self.clock,
            None,
        )
        .await;
        match started {
            Ok(mut j) => {
                j.spawner = Some(asker.job);
                j.answer = Some(asker);
                self.jobs.push(Job::Live(Box::new(j)));
                self.check_spawn(idx);
            }
            Err((e, Some(mut j))) => {
                j.spawner = Some(asker.job);
                j.answer = Some(asker);
                self.jobs.push(Job::Live(Box::new(j)));
                self.fail_spawn(idx, e);
            }
            Err((e, None)) => self.answer(asker, ServiceReply::Spawn(Err(e))),
        }
    }
}
