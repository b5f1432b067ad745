//! The startup profile (`--profile`, `KAURI_PROFILE=1`): when each phase of a job happened,
//! recorded per host and printed by the front end at exit as a table or as JSON.
//!
//! Every host records its own events on its own clock, in microseconds since its origin (the
//! front end's start; an agent's handshake with its parent). An agent sends its subtree's
//! records up just before `Done` ([`crate::tree::Up::Profile`]); its parent moves them onto its
//! own clock with [`HostProfile::lift`], by the moment that child's handshake arrived there. So
//! the front end sees every host on its own clock without synchronised clocks; the error is one
//! link's one-way latency per tree level.
//!
//! This module only records and renders; it starts nothing and touches no socket.

use serde::{Deserialize, Serialize};

/// How the profile is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileFormat {
    /// A short table on stderr.
    Text,
    /// One line of JSON on stderr.
    Json,
    /// Chrome trace events in a file (`kauri-PID.trace.json`), one track per host, which
    /// Perfetto (ui.perfetto.dev) and `chrome://tracing` open.
    Trace,
}

/// A `--profile` or `KAURI_PROFILE` value that names no format: the value (trimmed), printed
/// with the formats there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile format {0:?}: text, json or trace")]
pub struct ProfileFormatError(pub String);

impl ProfileFormat {
    /// Reads `--profile=VALUE` or `KAURI_PROFILE=VALUE`: `None` means no profile.
    pub fn parse(v: &str) -> Result<Option<ProfileFormat>, ProfileFormatError> {
        match v.trim() {
            "" | "0" | "no" | "off" => Ok(None),
            "1" | "yes" | "on" | "text" => Ok(Some(ProfileFormat::Text)),
            "json" => Ok(Some(ProfileFormat::Json)),
            "trace" => Ok(Some(ProfileFormat::Trace)),
            other => Err(ProfileFormatError(other.to_string())),
        }
    }
}

/// One fence as one host saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceMark {
    /// The fence's number, from 0.
    pub epoch: u64,
    /// Every local rank had entered it.
    pub ready_us: u64,
    /// The merged delta arrived and the local ranks were released.
    pub released_us: Option<u64>,
}

/// What one host (the front end's own, or an agent's) recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostProfile {
    /// The agent's id (0: the front end).
    pub id: u32,
    /// Its host.
    pub host: String,
    /// Its depth in the tree (0: the front end, 1: the front end's children, …).
    pub level: u32,
    /// Its parent began launching it.
    pub launched_us: Option<u64>,
    /// Its handshake reached its parent.
    pub connected_us: Option<u64>,
    /// How many ranks it runs.
    pub ranks: u32,
    /// It began forking its ranks.
    pub fork_start_us: Option<u64>,
    /// Every rank was forked.
    pub forked_us: Option<u64>,
    /// Its first rank finished the PMI handshake.
    pub first_init_us: Option<u64>,
    /// Its last rank finished the PMI handshake.
    pub last_init_us: Option<u64>,
    /// Its first rank called PMI finalize.
    pub first_finalize_us: Option<u64>,
    /// Its last rank called PMI finalize.
    pub last_finalize_us: Option<u64>,
    /// Its first rank ended.
    pub first_exit_us: Option<u64>,
    /// Its last rank ended.
    pub last_exit_us: Option<u64>,
    /// Its fences, in order.
    pub fences: Vec<FenceMark>,
}

fn first_last(first: &mut Option<u64>, last: &mut Option<u64>, t: u64) {
    first.get_or_insert(t);
    *last = Some(last.map_or(t, |l| l.max(t)));
}

impl HostProfile {
    /// An empty record for host `host`, agent `id`.
    pub fn new(id: u32, host: &str) -> HostProfile {
        HostProfile {
            id,
            host: host.to_string(),
            ..HostProfile::default()
        }
    }

    /// A rank finished the PMI handshake at `t`.
    pub fn initialized(&mut self, t: u64) {
        first_last(&mut self.first_init_us, &mut self.last_init_us, t);
    }

    /// A rank called finalize at `t`.
    pub fn finalized(&mut self, t: u64) {
        first_last(&mut self.first_finalize_us, &mut self.last_finalize_us, t);
    }

    /// A rank ended at `t`.
    pub fn exited(&mut self, t: u64) {
        first_last(&mut self.first_exit_us, &mut self.last_exit_us, t);
    }

    /// Every local rank entered fence `epoch` at `t`.
    pub fn fence_ready(&mut self, epoch: u64, t: u64) {
        self.fences.push(FenceMark {
            epoch,
            ready_us: t,
            released_us: None,
        });
    }

    /// Fence `epoch`'s merged delta arrived at `t`.
    pub fn fence_released(&mut self, epoch: u64, t: u64) {
        match self.fences.iter_mut().find(|f| f.epoch == epoch) {
            Some(f) => f.released_us = Some(t),
            // A host without ranks takes part in no fence of its own; nothing to mark.
            None if self.ranks == 0 => {}
            None => self.fences.push(FenceMark {
                epoch,
                ready_us: t,
                released_us: Some(t),
            }),
        }
    }

    /// Moves a child's record onto its parent's clock (`offset_us`: the child's origin there)
    /// and one level down the tree.
    pub fn lift(&mut self, offset_us: u64) {
        self.level += 1;
        let s = |t: &mut Option<u64>| {
            if let Some(v) = t {
                *v = v.saturating_add(offset_us);
            }
        };
        for t in [
            &mut self.launched_us,
            &mut self.connected_us,
            &mut self.fork_start_us,
            &mut self.forked_us,
            &mut self.first_init_us,
            &mut self.last_init_us,
            &mut self.first_finalize_us,
            &mut self.last_finalize_us,
            &mut self.first_exit_us,
            &mut self.last_exit_us,
        ] {
            s(t);
        }
        for f in &mut self.fences {
            f.ready_us = f.ready_us.saturating_add(offset_us);
            s(&mut f.released_us);
        }
    }
}

/// Moves the records a child `id` sent up onto this host's clock: the child connected at
/// `connected_us` (this clock), and its parent began launching it at `launched_us`.
pub fn adopt(
    records: &mut [HostProfile],
    id: u32,
    launched_us: Option<u64>,
    connected_us: Option<u64>,
) {
    let offset = connected_us.unwrap_or(0);
    for r in records.iter_mut() {
        r.lift(offset);
        if r.id == id {
            r.launched_us = launched_us;
            r.connected_us = connected_us;
        }
    }
}

/// What the root saw of one fence: how much the merged delta carried.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootFence {
    /// The fence's number.
    pub epoch: u64,
    /// The root had every contribution and sent the merged delta down.
    pub complete_us: u64,
    /// Pairs in the merged delta.
    pub keys: usize,
    /// Bytes of keys and values in the merged delta.
    pub bytes: usize,
}

impl RootFence {
    /// The root completed fence `epoch` at `t` with `delta`.
    pub fn new(epoch: u64, t: u64, delta: &crate::proto::kvs::Packed) -> RootFence {
        let keys = delta.count().unwrap_or(0);
        RootFence {
            epoch,
            complete_us: t,
            keys,
            // each pair carries two 4-byte lengths
            bytes: delta.byte_len().saturating_sub(8 * keys),
        }
    }
}

/// One row of the job's profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// What happened: `agents`, `fork`, `pmi_init`, `fence`, `finalize`, `exit`, `teardown`,
    /// `total`.
    pub phase: String,
    /// The tree level (`agents` rows) or the fence's epoch (`fence` rows).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    /// When it began, in milliseconds since kauri started.
    pub start_ms: f64,
    /// When it ended.
    pub end_ms: f64,
    /// `end_ms - start_ms`.
    pub ms: f64,
    /// How many agents or ranks it covers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// A fence: from the last host ready to the last host released (the tree's own cost;
    /// the rest of `ms` is ranks arriving at different times).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree_ms: Option<f64>,
    /// A fence: pairs in the merged delta.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<usize>,
    /// A fence: bytes of keys and values in the merged delta.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<usize>,
}

/// The whole job's profile, as printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobProfile {
    /// Ranks in the job.
    pub ranks: usize,
    /// Hosts that ran ranks or agents (the front end's own included when it runs ranks).
    pub hosts: usize,
    /// The tree's shape: its width, `flat`, or `cost` (the cost-model tree).
    pub tree: String,
    /// The phases, in order.
    pub phases: Vec<Phase>,
    /// Every host's own record.
    pub per_host: Vec<HostProfile>,
    /// Which attempt of a job that restarts (`-max-restarts`) this is: its restart count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart: Option<u32>,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn phase(name: &str, index: Option<u64>, start: u64, end: u64) -> Phase {
    Phase {
        phase: name.into(),
        index,
        start_ms: ms(start),
        end_ms: ms(end),
        ms: ms(end.saturating_sub(start)),
        count: None,
        tree_ms: None,
        keys: None,
        bytes: None,
    }
}

/// The earliest and latest of the values `f` picks from the hosts that have one.
fn span(
    hosts: &[HostProfile],
    f: impl Fn(&HostProfile) -> (Option<u64>, Option<u64>),
) -> Option<(u64, u64)> {
    let (mut lo, mut hi) = (None::<u64>, None::<u64>);
    for h in hosts {
        let (a, b) = f(h);
        if let Some(a) = a {
            lo = Some(lo.map_or(a, |l| l.min(a)));
        }
        if let Some(b) = b {
            hi = Some(hi.map_or(b, |l| l.max(b)));
        }
    }
    Some((lo?, hi?))
}

impl JobProfile {
    /// Puts the phases together from every host's record and the root's fences; the job
    /// ended (every agent gone, every line printed) at `end_us`.
    pub fn build(
        ranks: usize,
        tree: String,
        mut hosts: Vec<HostProfile>,
        fences: &[RootFence],
        end_us: u64,
    ) -> JobProfile {
        hosts.sort_by_key(|h| h.id);
        let mut phases = Vec::new();
        let depth = hosts.iter().map(|h| h.level).max().unwrap_or(0);
        for level in 1..=depth {
            let at: Vec<HostProfile> = hosts.iter().filter(|h| h.level == level).cloned().collect();
            if let Some((a, b)) = span(&at, |h| (h.launched_us, h.connected_us)) {
                let mut p = phase("agents", Some(level as u64), a, b);
                p.count = Some(at.len());
                phases.push(p);
            }
        }
        if let Some((a, b)) = span(&hosts, |h| (h.fork_start_us, h.forked_us)) {
            let mut p = phase("fork", None, a, b);
            p.count = Some(ranks);
            phases.push(p);
        }
        if let Some((a, b)) = span(&hosts, |h| (h.first_init_us, h.last_init_us)) {
            phases.push(phase("pmi_init", None, a, b));
        }
        for f in fences {
            let marks: Vec<&FenceMark> = hosts
                .iter()
                .flat_map(|h| h.fences.iter().filter(|m| m.epoch == f.epoch))
                .collect();
            let first = marks
                .iter()
                .map(|m| m.ready_us)
                .min()
                .unwrap_or(f.complete_us);
            let last_ready = marks
                .iter()
                .map(|m| m.ready_us)
                .max()
                .unwrap_or(f.complete_us);
            let released = marks
                .iter()
                .filter_map(|m| m.released_us)
                .max()
                .unwrap_or(f.complete_us)
                .max(f.complete_us);
            let mut p = phase("fence", Some(f.epoch), first, released);
            p.tree_ms = Some(ms(released.saturating_sub(last_ready)));
            p.keys = Some(f.keys);
            p.bytes = Some(f.bytes);
            phases.push(p);
        }
        if let Some((a, b)) = span(&hosts, |h| (h.first_finalize_us, h.last_finalize_us)) {
            phases.push(phase("finalize", None, a, b));
        }
        if let Some((a, b)) = span(&hosts, |h| (h.first_exit_us, h.last_exit_us)) {
            let mut p = phase("exit", None, a, b);
            p.count = Some(ranks);
            phases.push(p);
            phases.push(phase("teardown", None, b, end_us.max(b)));
        }
        phases.push(phase("total", None, 0, end_us));
        JobProfile {
            ranks,
            hosts: hosts.iter().filter(|h| h.id != 0 || h.ranks > 0).count(),
            tree,
            phases,
            per_host: hosts,
            restart: None,
        }
    }

    /// One line of JSON.
    pub fn json(&self) -> String {
        #[derive(Serialize)]
        struct Wrapped<'a> {
            kauri_profile: &'a JobProfile,
        }
        serde_json::to_string(&Wrapped {
            kauri_profile: self,
        })
        .unwrap_or_else(|e| format!("{{\"kauri_profile_error\":\"{e}\"}}"))
    }

    /// The timeline as Chrome trace events (the JSON object format, `{"traceEvents": […]}`):
    /// one process per host, named `host (agent N, level L)`, whose first thread holds a
    /// slice for the host's whole part of the job, and each other thread one kind of phase
    /// (the agent's launch, forking its ranks, their PMI init, the fences, finalize, their
    /// exits), so that slices on one thread never overlap and every slice lies within its
    /// host's. Times in microseconds since kauri started.
    pub fn trace(&self) -> String {
        use serde_json::{json, Value};
        let mut events: Vec<Value> = Vec::new();
        for h in &self.per_host {
            let pid = h.id;
            let mut slices: Vec<(u32, String, u64, u64)> = Vec::new();
            let mut add = |tid: u32, name: String, a: Option<u64>, b: Option<u64>| {
                if let (Some(a), Some(b)) = (a, b) {
                    slices.push((tid, name, a.min(b), a.max(b)));
                }
            };
            add(1, "agent launched".into(), h.launched_us, h.connected_us);
            add(
                2,
                format!("{} ranks forked", h.ranks),
                h.fork_start_us,
                h.forked_us,
            );
            add(3, "PMI init".into(), h.first_init_us, h.last_init_us);
            for f in &h.fences {
                add(
                    4,
                    format!("fence {}", f.epoch),
                    Some(f.ready_us),
                    f.released_us,
                );
            }
            add(
                5,
                "finalize".into(),
                h.first_finalize_us,
                h.last_finalize_us,
            );
            add(6, "ranks exited".into(), h.first_exit_us, h.last_exit_us);
            let start = slices.iter().map(|s| s.2).min().unwrap_or(0);
            let end = slices.iter().map(|s| s.3).max().unwrap_or(start);
            let threads = [
                (0, "host"),
                (1, "launch"),
                (2, "fork"),
                (3, "init"),
                (4, "fences"),
                (5, "finalize"),
                (6, "exit"),
            ];
            events.push(
                json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                "args": {"name": format!("{} (agent {}, level {})", h.host, h.id, h.level)}}),
            );
            events.push(
                json!({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                "args": {"sort_index": h.id}}),
            );
            for (tid, name) in threads {
                events.push(
                    json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"name": name}}),
                );
            }
            events.push(
                json!({"name": h.host, "cat": "host", "ph": "X", "pid": pid, "tid": 0,
                "ts": start, "dur": end - start, "args": {"ranks": h.ranks}}),
            );
            for (tid, name, a, b) in slices {
                events.push(json!({"name": name, "cat": "phase", "ph": "X", "pid": pid,
                    "tid": tid, "ts": a, "dur": b - a}));
            }
        }
        let doc = json!({
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"ranks": self.ranks, "hosts": self.hosts, "tree": self.tree},
        });
        doc.to_string()
    }

    /// The table.
    pub fn text(&self) -> String {
        let restart = self
            .restart
            .map(|r| format!(", restart {r}"))
            .unwrap_or_default();
        let mut s = format!(
            "kauri profile: {} ranks on {} hosts, tree {}{restart}; ms since kauri started\n",
            self.ranks, self.hosts, self.tree
        );
        s.push_str(&format!(
            "{:<18} {:>10} {:>10} {:>10}  {}\n",
            "phase", "start", "end", "took", "detail"
        ));
        for p in &self.phases {
            let (name, detail) = match p.phase.as_str() {
                "agents" => (
                    format!("agents, level {}", p.index.unwrap_or(0)),
                    format!("{} launched to last connected", p.count.unwrap_or(0)),
                ),
                "fork" => (
                    "ranks forked".to_string(),
                    format!("{} ranks", p.count.unwrap_or(0)),
                ),
                "pmi_init" => ("PMI init".into(), "first to last rank".into()),
                "fence" => (
                    format!("fence {}", p.index.unwrap_or(0)),
                    format!(
                        "tree {:.3} ms, {} keys, {} B",
                        p.tree_ms.unwrap_or(0.0),
                        p.keys.unwrap_or(0),
                        p.bytes.unwrap_or(0)
                    ),
                ),
                "finalize" => ("PMI finalize".into(), "first to last rank".into()),
                "exit" => ("ranks exited".into(), "first to last".into()),
                "teardown" => ("teardown".into(), "last exit to kauri done".into()),
                other => (other.to_string(), String::new()),
            };
            s.push_str(&format!(
                "{name:<18} {:>10.3} {:>10.3} {:>10.3}  {detail}\n",
                p.start_ms, p.end_ms, p.ms
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        assert_eq!(ProfileFormat::parse("1"), Ok(Some(ProfileFormat::Text)));
        assert_eq!(ProfileFormat::parse("json"), Ok(Some(ProfileFormat::Json)));
        assert_eq!(ProfileFormat::parse("0"), Ok(None));
        assert!(ProfileFormat::parse("xml").is_err());
    }

    /// An unknown format prints the line kauri printed when the error was text (the value
    /// trimmed and quoted).
    #[test]
    fn an_unknown_format_prints_its_line() {
        let e = ProfileFormat::parse(" xml\n").unwrap_err();
        assert_eq!(e, ProfileFormatError("xml".into()));
        assert_eq!(e.to_string(), "profile format \"xml\": text, json or trace");
        let e = ProfileFormat::parse("a\"b").unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"profile format "a\"b": text, json or trace"#
        );
    }

    #[test]
    fn a_child_record_moves_onto_the_parents_clock() {
        let mut child = HostProfile::new(3, "b");
        child.ranks = 1;
        child.initialized(100);
        child.fence_ready(0, 200);
        child.fence_released(0, 250);
        let mut grandchild = HostProfile::new(7, "c");
        grandchild.launched_us = Some(10);
        grandchild.connected_us = Some(50);
        grandchild.lift(0); // as the child adopted it
        let mut v = vec![child, grandchild];
        adopt(&mut v, 3, Some(1000), Some(2000));
        assert_eq!(v[0].level, 1);
        assert_eq!(v[0].first_init_us, Some(2100));
        assert_eq!(v[0].fences[0].released_us, Some(2250));
        assert_eq!(
            (v[0].launched_us, v[0].connected_us),
            (Some(1000), Some(2000))
        );
        assert_eq!(v[1].level, 2);
        assert_eq!(
            (v[1].launched_us, v[1].connected_us),
            (Some(2010), Some(2050))
        );
    }

    #[test]
    fn the_job_profile_has_every_phase() {
        let mut root = HostProfile::new(0, "a");
        root.ranks = 1;
        root.fork_start_us = Some(10);
        root.forked_us = Some(20);
        root.initialized(30);
        root.fence_ready(0, 40);
        root.fence_released(0, 60);
        root.finalized(70);
        root.exited(80);
        let mut kid = root.clone();
        kid.id = 1;
        kid.fences.clear();
        kid.fence_ready(0, 50);
        kid.fence_released(0, 60);
        kid.lift(0);
        kid.launched_us = Some(1);
        kid.connected_us = Some(5);
        let delta = crate::proto::kvs::Packed::from_pairs([("k", "vv")]);
        let p = JobProfile::build(
            2,
            "8".into(),
            vec![kid, root],
            &[RootFence::new(0, 55, &delta)],
            100,
        );
        let names: Vec<&str> = p.phases.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(
            names,
            ["agents", "fork", "pmi_init", "fence", "finalize", "exit", "teardown", "total"]
        );
        let fence = &p.phases[3];
        assert_eq!((fence.keys, fence.bytes), (Some(1), Some(3)));
        assert_eq!(fence.start_ms, 0.04);
        assert_eq!(fence.tree_ms, Some(0.01));
        assert!(p.text().contains("fence 0"));
        let v: serde_json::Value = serde_json::from_str(&p.json()).unwrap();
        assert_eq!(v["kauri_profile"]["ranks"], 2);
    }
}
