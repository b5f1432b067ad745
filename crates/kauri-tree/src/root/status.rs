//! The hang diagnosis: asking every host for its ranks' states (`kauri --status`, a timeout)
//! and printing the answer.

use super::*;

/// The diagnosis, line by line: every rank's host, pid and PMI state (at most
/// [`STATUS_LINES`] one per line, the rest counted by state), the hosts whose agent is still
/// being launched, the ranks whose host did not answer, and what each open fence still waits
/// for.
pub(super) fn status_lines(got: &[(usize, HostStatus)], jobs: &[Vec<RankState>]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut seen: Vec<Vec<bool>> = jobs.iter().map(|r| vec![false; r.len()]).collect();
    let mut rest: std::collections::BTreeMap<String, usize> = Default::default();
    let mut listed = 0;
    let mut rows: Vec<(usize, &str, &crate::msg::RankStatus)> = got
        .iter()
        .flat_map(|(j, h)| h.ranks.iter().map(move |r| (*j, h.host.as_str(), r)))
        .collect();
    rows.sort_by_key(|(j, _, r)| (*j, r.rank));
    for (j, host, r) in rows {
        if let Some(s) = seen.get_mut(j).and_then(|v| v.get_mut(r.rank)) {
            *s = true;
        }
        let state = r.pmi.to_string();
        if listed < STATUS_LINES {
            let pid = r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
            lines.push(format!("{} on {host}{pid}: {state}", who(j, r.rank)));
            listed += 1;
        } else {
            *rest.entry(state).or_default() += 1;
        }
    }
    if !rest.is_empty() {
        let counts: Vec<String> = rest.iter().map(|(s, n)| format!("{s}: {n}")).collect();
        lines.push(format!(
            "and {} more ranks ({})",
            rest.values().sum::<usize>(),
            counts.join(", ")
        ));
    }
    let not_up = launching_lines(got);
    let mut silent: Vec<String> = Vec::new();
    for (j, ranks) in jobs.iter().enumerate() {
        for (r, st) in ranks.iter().enumerate() {
            if !seen[j][r]
                && !st.ended()
                && !silent.contains(&st.host)
                && !not_up.hosts.contains(&(j, st.host.as_str()))
            {
                silent.push(st.host.clone());
            }
        }
    }
    lines.extend(not_up.lines);
    if !silent.is_empty() {
        lines.push(format!("no answer from the host(s) {}", silent.join(", ")));
    }
    for (j, h) in got {
        for r in &h.ranks {
            if let Some(stack) = &r.stack {
                let pid = r.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
                lines.push(format!("stack of {} on {}{pid}:", who(*j, r.rank), h.host));
                lines.extend(stack.lines().map(|l| format!("  {l}")));
            }
        }
    }
    for (_, h) in got {
        if let Some((epoch, local, kids)) = &h.fence {
            let mut waits = Vec::new();
            if *local {
                waits.push(format!("the ranks on {}", h.host));
            }
            waits.extend(kids.iter().map(|k| format!("the agent on {k}")));
            if !waits.is_empty() {
                lines.push(format!(
                    "on {}, fence {epoch} waits for {}",
                    h.host,
                    waits.join(", ")
                ));
            }
        }
    }
    lines
}

/// The hosts whose agent is not up yet, in a diagnosis: a line for each, and the hosts
/// themselves with their job's index (they are not among the hosts that did not answer).
struct NotUp<'a> {
    lines: Vec<String>,
    hosts: Vec<(usize, &'a str)>,
}

/// What the hosts' answers say of their child agents still being launched: `host b: agent
/// being launched for 3.2 s (ssh)`, or waiting for a launch slot; and the hosts below such an
/// agent, which it launches once it runs.
fn launching_lines(got: &[(usize, HostStatus)]) -> NotUp<'_> {
    let mut not_up = NotUp {
        lines: Vec::new(),
        hosts: Vec::new(),
    };
    for (j, h) in got {
        let job = if *j == 0 {
            String::new()
        } else {
            format!(" (spawned job {j})")
        };
        for l in &h.launching {
            let what = match l.since_ms {
                Some(ms) => format!(
                    "agent being launched for {:.1} s ({})",
                    ms as f64 / 1e3,
                    l.launcher
                ),
                None => format!("agent waiting for a launch slot ({})", l.launcher),
            };
            not_up.lines.push(format!("host {}{job}: {what}", l.host));
            if !l.below.is_empty() {
                not_up.lines.push(format!(
                    "host(s) {}{job}: agents to be launched by the agent on {} once it runs",
                    l.below.join(", "),
                    l.host
                ));
            }
            not_up.hosts.push((*j, l.host.as_str()));
            not_up
                .hosts
                .extend(l.below.iter().map(|b| (*j, b.as_str())));
        }
    }
    not_up
}

/// Where a spawned job came from, for the hang diagnosis: the job that spawned it, and
/// whether every rank of that one has ended.
pub(super) struct Lineage {
    pub(super) spawner: usize,
    pub(super) spawner_ended: bool,
}

/// A line for each spawned job that may wait for parents that are gone: every rank of the job
/// that spawned it has ended, while each of its own ranks still runs, none waits in a PMI call
/// and no fence of its is under way (what Open MPI children in a barrier with their vanished
/// parents look like). `names[j]` is job `j`'s name.
pub(super) fn orphan_lines(
    got: &[(usize, HostStatus)],
    jobs: &[Vec<RankState>],
    lineage: &[Option<Lineage>],
    names: &[&str],
) -> Vec<String> {
    use kauri_proto::pmi::RankPmi;
    let mut lines = Vec::new();
    for (j, l) in lineage.iter().enumerate() {
        let Some(l) = l.as_ref().filter(|l| l.spawner_ended) else {
            continue;
        };
        let ranks = &jobs[j];
        if ranks.is_empty() || ranks.iter().any(RankState::ended) {
            continue;
        }
        let hosts: Vec<&HostStatus> = got
            .iter()
            .filter(|(k, _)| *k == j)
            .map(|(_, h)| h)
            .collect();
        let waiting = hosts.iter().any(|h| {
            h.fence.is_some()
                || h.ranks
                    .iter()
                    .any(|r| !matches!(r.pmi, RankPmi::Running | RankPmi::NotInitialized))
        });
        if hosts.is_empty() || waiting {
            continue;
        }
        let last = match hosts.iter().filter_map(|h| h.quiet_ms).min() {
            Some(ms) => format!("for {:.0} s", ms as f64 / 1e3),
            None => "since they started".to_string(),
        };
        let parent = if l.spawner == 0 {
            "the first job".to_string()
        } else {
            format!("spawned job {}", l.spawner)
        };
        lines.push(format!(
            "spawned job {j} ({}) may wait for parents that are gone: every rank of {parent}, \
             which spawned it, has ended, and its {} rank(s) still run and have asked nothing \
             of kauri {last}",
            names[j],
            ranks.len()
        ));
    }
    lines
}

impl Root {
    /// Asks every host of every job where its ranks are (with the stuck ranks' stacks when
    /// `stacks`), for `whom`; joins the round under way, if one is.
    pub(super) fn diagnose(&mut self, whom: Asked, stacks: bool) {
        if let Some(round) = self.status.as_mut() {
            round.for_whom.push(whom);
            return;
        }
        let wait = if stacks { STACKS_WAIT } else { STATUS_WAIT };
        let mut round = StatusRound {
            due: Instant::now() + wait,
            want: 0,
            got: Vec::new(),
            for_whom: vec![whom],
        };
        for (j, job) in self.jobs.iter_mut().enumerate() {
            let Some(job) = job.live_mut() else {
                continue;
            };
            round.want += job.branch.hosts();
            let mine = job.branch.ask_status(stacks);
            if stacks {
                let tx = self.own_status.clone();
                tokio::task::spawn_local(async move {
                    let _ = tx.send((j, crate::status::add_stacks(mine).await));
                });
            } else {
                round.got.push((j, mine));
            }
        }
        self.status = Some(round);
        self.status_complete();
    }

    /// Hosts' answers to the diagnosis under way (late ones, after it printed, are dropped).
    pub(super) fn status_answer(&mut self, j: usize, hosts: Vec<HostStatus>) {
        if let Some(round) = self.status.as_mut() {
            round.got.extend(hosts.into_iter().map(|h| (j, h)));
            self.status_complete();
        }
    }

    /// Where each live spawned job came from ([`Lineage`]); `None` for the first job and the
    /// released ones.
    fn lineage(&self) -> Vec<Option<Lineage>> {
        let ended = |k: usize| match &self.jobs[k] {
            Job::Live(j) => j.ranks.iter().all(RankState::ended),
            Job::Released(_) => true,
        };
        self.jobs
            .iter()
            .map(|j| {
                let spawner = j.live()?.spawner?;
                Some(Lineage {
                    spawner,
                    spawner_ended: ended(spawner),
                })
            })
            .collect()
    }

    /// Prints the diagnosis once every host has answered, or was said not to be up yet (an
    /// agent still being launched, and the hosts below it, are not asked).
    pub(super) fn status_complete(&mut self) {
        let told = |r: &StatusRound| {
            r.got.len()
                + r.got
                    .iter()
                    .flat_map(|(_, h)| &h.launching)
                    .map(crate::Launching::hosts)
                    .sum::<usize>()
        };
        if self.status.as_ref().is_some_and(|r| told(r) >= r.want) {
            self.print_status();
        }
    }

    /// Gives the diagnosis (what the hosts said, and which hosts did not answer) to whoever
    /// asked: printed for a timeout (which then tears the job down) or a signal, sent to a
    /// `kauri --status`.
    pub(super) fn print_status(&mut self) {
        let Some(round) = self.status.take() else {
            return;
        };
        let names: Vec<Vec<RankState>> = self
            .jobs
            .iter()
            .map(|j| j.live().map_or_else(Vec::new, |j| j.ranks.clone()))
            .collect();
        let mut lines = status_lines(&round.got, &names);
        lines.extend(orphan_lines(
            &round.got,
            &names,
            &self.lineage(),
            &self.jobs.iter().map(Job::kvsname).collect::<Vec<_>>(),
        ));
        let timeout = round.for_whom.iter().any(|w| matches!(w, Asked::Timeout));
        let restart = self
            .attempt
            .as_ref()
            .map(|a| format!(" (restart {} of {})", a.restart.0, a.restart.1))
            .unwrap_or_default();
        let heading = if timeout {
            format!("where the ranks were{restart}:")
        } else {
            format!("where the ranks are{restart}:")
        };
        let mut printed = false;
        let mut timed_out = false;
        for whom in round.for_whom {
            match whom {
                Asked::Timeout | Asked::Signal if !printed => {
                    printed = true;
                    say!("kauri:   {heading}");
                    for line in &lines {
                        say!("kauri:   {line}");
                    }
                    timed_out |= matches!(whom, Asked::Timeout);
                }
                Asked::Timeout => timed_out = true,
                Asked::Signal => {}
                Asked::Client(tx) => {
                    let ranks: usize = names.iter().map(Vec::len).sum();
                    let mut text = vec![format!(
                        "kauri {} ({} job(s), {ranks} ranks, running for {:.0} s): {}",
                        std::process::id(),
                        names.len(),
                        self.clock.now() as f64 / 1e6,
                        self.command
                    )];
                    text.push(format!("  {heading}"));
                    text.extend(lines.iter().map(|l| format!("  {l}")));
                    let _ = tx.send(text);
                }
            }
        }
        if timed_out {
            self.teardown(Ending::Timeout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Launching;

    fn on(host: &str) -> RankState {
        RankState {
            host: host.into(),
            ..RankState::default()
        }
    }

    /// The root's own answer, with no rank of its own and two children not up: b, being
    /// launched, which launches c once it runs; and d, which waits for a launch slot.
    fn root_launching() -> HostStatus {
        HostStatus {
            host: "front".into(),
            ranks: Vec::new(),
            fence: None,
            quiet_ms: None,
            launching: vec![
                Launching {
                    host: "b".into(),
                    since_ms: Some(3210),
                    launcher: "ssh".into(),
                    below: vec!["c".into()],
                },
                Launching {
                    host: "d".into(),
                    since_ms: None,
                    launcher: "ssh".into(),
                    below: Vec::new(),
                },
            ],
        }
    }

    #[test]
    fn hosts_being_launched_are_named_apart_from_those_that_did_not_answer() {
        let got = [(0, root_launching())];
        let jobs = [vec![on("b"), on("c"), on("d"), on("e")]];
        let lines = status_lines(&got, &jobs);
        assert_eq!(
            lines,
            [
                "host b: agent being launched for 3.2 s (ssh)",
                "host(s) c: agents to be launched by the agent on b once it runs",
                "host d: agent waiting for a launch slot (ssh)",
                "no answer from the host(s) e",
            ]
        );
    }

    #[test]
    fn a_spawned_jobs_hosts_being_launched_name_their_job() {
        let got = [(1, root_launching())];
        let jobs = [Vec::new(), vec![on("b"), on("d")]];
        let lines = status_lines(&got, &jobs);
        assert_eq!(
            lines[0],
            "host b (spawned job 1): agent being launched for 3.2 s (ssh)"
        );
        assert!(
            !lines.iter().any(|l| l.starts_with("no answer")),
            "{lines:?}"
        );
    }
}
