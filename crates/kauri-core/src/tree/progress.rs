//! Progress at `-v`: lines on the front end's stderr, at a person's pace, saying how far the
//! job's start has come: its agents launched and connected on each level of the tree, its
//! ranks started and through PMI init, and each fence with how many ranks entered it.
//!
//! The front end learns of each step as it happens, from the points that also feed the startup
//! profile ([`crate::tree::profile`]): each hub notes the launches and connections of its
//! children, each branch its ranks' PMI init and its host's entry into a fence, and they go up
//! the tree as [`Step`]s in a `Report::Progress` when the job plan asks for them
//! (`JobPlan::progress`, set by `-v`); the ranks started come with each agent's
//! `NodeStarted`. [`Progress`] counts them at the root and says what to print.
//!
//! The pace: a phase that completes (every agent connected, every rank started, every rank
//! through PMI init, a fence) has its line at once. In between, at most one line a second says
//! where the phases under way stand, and only when that changed since the last such line, so
//! a short job prints only its phases' lines and a stuck one falls silent. A fence that
//! completes within a second of the last fence's line waits for that second's line (a program
//! that fences in a loop makes one line a second, not one a fence), and the last one is
//! printed at the end ([`Progress::flush`]).
//!
//! This module only counts and words; it prints nothing and reads no clock: each call takes
//! the time.

use crate::plan::Subtree;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The least time between two lines of the phases under way.
pub const PACE: Duration = Duration::from_secs(1);

/// One step of a job's start, reported up the tree for the progress lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// A parent began launching the agents with these ids.
    Launched(Vec<u32>),
    /// The agent with this id passed its handshake with its parent.
    Connected(u32),
    /// A rank finished the PMI handshake (an agent's first is the `Report::Initialized` the
    /// root gets anyway).
    Initialized(usize),
    /// Every rank of a host entered a fence.
    FenceEntered {
        /// The fence's number, from 0.
        epoch: u64,
        /// How many ranks the host runs.
        ranks: u32,
    },
}

/// One level of the tree: how many agents it has, and how many were launched and connected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Level {
    agents: usize,
    launched: usize,
    connected: usize,
}

/// The fence under way, or the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fence {
    epoch: u64,
    /// Ranks that entered it (by whole hosts).
    entered: usize,
    complete: bool,
    /// Its completion was printed.
    said: bool,
}

/// The phases whose completion was printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Said {
    agents: bool,
    started: bool,
    initialized: bool,
}

/// What the root knows of the job's start, and what of it was printed.
#[derive(Debug, Clone)]
pub struct Progress {
    /// When kauri started: each line says how long ago that was.
    began: Instant,
    levels: Vec<Level>,
    /// Each agent's level, by id (1: the front end's children).
    level_of: std::collections::HashMap<u32, usize>,
    launched: HashSet<u32>,
    connected: HashSet<u32>,
    ranks: usize,
    started: usize,
    initialized: Vec<bool>,
    initialized_count: usize,
    fences: Vec<Fence>,
    said: Said,
    /// Something changed since the last line of the phases under way.
    changed: bool,
    /// When that line was printed (at first, when kauri started).
    last_line: Instant,
    /// What the lines of the phases under way last said of each (agents, ranks, fence).
    last_words: [String; 3],
    /// When the last fence's completion was printed.
    last_fence: Option<Instant>,
}

/// Each agent in `subtrees` (the front end's children's), with its level.
fn levels(subtrees: &[Subtree], level: usize, out: &mut Vec<(u32, usize)>) {
    for t in subtrees {
        out.push((t.id, level));
        levels(&t.children, level + 1, out);
    }
}

impl Progress {
    /// The progress of a job of `ranks` ranks whose tree below the front end is `subtrees`,
    /// started (kauri's own start) at `began`.
    pub fn new(began: Instant, ranks: usize, subtrees: &[Subtree]) -> Progress {
        let mut agents = Vec::new();
        levels(subtrees, 1, &mut agents);
        let depth = agents.iter().map(|&(_, l)| l).max().unwrap_or(0);
        let mut lv = vec![Level::default(); depth];
        for &(_, l) in &agents {
            lv[l - 1].agents += 1;
        }
        Progress {
            began,
            levels: lv,
            level_of: agents.into_iter().collect(),
            launched: HashSet::new(),
            connected: HashSet::new(),
            ranks,
            started: 0,
            initialized: vec![false; ranks],
            initialized_count: 0,
            fences: Vec::new(),
            said: Said::default(),
            changed: false,
            last_line: began,
            last_words: Default::default(),
            last_fence: None,
        }
    }

    /// A step reported at `now`: the lines to print at once.
    pub fn step(&mut self, step: Step, now: Instant) -> Vec<String> {
        match step {
            Step::Launched(ids) => {
                for id in ids {
                    if let Some(&l) = self.level_of.get(&id) {
                        if self.launched.insert(id) {
                            self.levels[l - 1].launched += 1;
                            self.changed = true;
                        }
                    }
                }
            }
            Step::Connected(id) => {
                if let Some(&l) = self.level_of.get(&id) {
                    if self.connected.insert(id) {
                        self.levels[l - 1].connected += 1;
                        self.changed = true;
                    }
                }
            }
            Step::Initialized(rank) => return self.initialized(rank, now),
            Step::FenceEntered { epoch, ranks } => self.fence_entered(epoch, ranks as usize),
        }
        self.phases_done(now)
    }

    /// `n` more ranks started, at `now`: the lines to print at once.
    pub fn started(&mut self, n: usize, now: Instant) -> Vec<String> {
        if n > 0 {
            self.started = (self.started + n).min(self.ranks);
            self.changed = true;
        }
        self.phases_done(now)
    }

    /// `rank` finished the PMI handshake, at `now`: the lines to print at once.
    pub fn initialized(&mut self, rank: usize, now: Instant) -> Vec<String> {
        if let Some(r) = self.initialized.get_mut(rank).filter(|r| !**r) {
            *r = true;
            self.initialized_count += 1;
            self.changed = true;
        }
        self.phases_done(now)
    }

    fn fence_entered(&mut self, epoch: u64, ranks: usize) {
        match self.fences.iter_mut().find(|f| f.epoch == epoch) {
            Some(f) if !f.complete => f.entered = (f.entered + ranks).min(self.ranks),
            Some(_) => return,
            None => {
                if self.fences.iter().any(|f| f.epoch > epoch) {
                    return;
                }
                // The fences before it completed (PMI fences follow one another): only one
                // whose completion waits to be printed stays.
                self.fences.retain(|f| f.complete && !f.said);
                self.fences.push(Fence {
                    epoch,
                    entered: ranks.min(self.ranks),
                    complete: false,
                    said: false,
                });
            }
        }
        self.changed = true;
    }

    /// Fence `epoch` completed, at `now`: the lines to print at once.
    pub fn fence_done(&mut self, epoch: u64, now: Instant) -> Vec<String> {
        match self.fences.iter_mut().find(|f| f.epoch == epoch) {
            Some(f) => f.complete = true,
            None => {
                self.fences.clear();
                self.fences.push(Fence {
                    epoch,
                    entered: 0,
                    complete: true,
                    said: false,
                });
            }
        }
        // An earlier fence's completion that waits is old news now.
        self.fences.retain(|f| f.epoch >= epoch);
        self.changed = true;
        self.phases_done(now)
    }

    /// When the line of the phases under way is due, if something changed.
    pub fn due(&self) -> Option<Instant> {
        self.changed.then_some(self.last_line + PACE)
    }

    /// At `now`: the line of the phases under way, when it is due and says something new.
    pub fn tick(&mut self, now: Instant) -> Option<String> {
        if !self.changed || now < self.last_line + PACE {
            return None;
        }
        self.changed = false;
        let mut parts = Vec::new();
        for (phase, words) in self.under_way() {
            if words != self.last_words[phase] {
                parts.push(words.clone());
                self.last_words[phase] = words;
            }
        }
        if parts.is_empty() {
            return None;
        }
        for f in self.fences.iter_mut().filter(|f| f.complete) {
            f.said = true;
            self.last_fence = Some(now);
        }
        self.last_line = now;
        Some(self.line(&parts.join("; "), now))
    }

    /// At the job's end (`now`): the completion of the last fence, when it waits to be printed.
    pub fn flush(&mut self, now: Instant) -> Option<String> {
        let f = self.fences.iter_mut().find(|f| f.complete && !f.said)?;
        f.said = true;
        let words = fence_words(f, self.ranks);
        Some(self.line(&words, now))
    }

    /// `words` as a line: `kauri: WORDS at T s`.
    fn line(&self, words: &str, now: Instant) -> String {
        let t = now.saturating_duration_since(self.began).as_secs_f64();
        format!("kauri: {words} at {t:.2} s")
    }

    /// The lines of the phases that completed and were not printed yet.
    fn phases_done(&mut self, now: Instant) -> Vec<String> {
        let mut lines = Vec::new();
        let agents: usize = self.levels.iter().map(|l| l.agents).sum();
        if !self.said.agents && agents > 0 && self.connected.len() >= agents {
            self.said.agents = true;
            lines.push(self.line(&self.agents_words(), now));
        }
        if !self.said.started && self.ranks > 0 && self.started >= self.ranks {
            self.said.started = true;
            lines.push(self.line(&format!("ranks {0}/{0} started", self.ranks), now));
        }
        if !self.said.initialized && self.ranks > 0 && self.initialized_count >= self.ranks {
            self.said.initialized = true;
            let words = format!("ranks {0}/{0} through PMI init", self.ranks);
            lines.push(self.line(&words, now));
        }
        let paced = self.last_fence.is_none_or(|t| now >= t + PACE);
        if let Some(f) = self.fences.iter_mut().find(|f| f.complete && !f.said) {
            if paced {
                f.said = true;
                let words = fence_words(f, self.ranks);
                self.last_fence = Some(now);
                // It counts as the second's line: fences in a loop make one line a second.
                self.last_line = now;
                lines.push(self.line(&words, now));
            }
        }
        lines
    }

    /// `agents C/T connected (level 1: c/t, level 2: c/t with L launching, …)`.
    fn agents_words(&self) -> String {
        let total: usize = self.levels.iter().map(|l| l.agents).sum();
        let levels: Vec<String> = self
            .levels
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let launching = l.launched.saturating_sub(l.connected);
                let mut s = format!("level {}: {}/{}", i + 1, l.connected, l.agents);
                if launching > 0 {
                    s.push_str(&format!(" with {launching} launching"));
                }
                s
            })
            .collect();
        format!(
            "agents {}/{total} connected ({})",
            self.connected.len(),
            levels.join(", ")
        )
    }

    /// The phases under way (begun, their completion not printed), each in words with its
    /// index in `last_words`.
    fn under_way(&self) -> Vec<(usize, String)> {
        let mut parts = Vec::new();
        if !self.said.agents && !self.launched.is_empty() {
            parts.push((0, self.agents_words()));
        }
        let starting = !self.said.started && self.started > 0;
        let initializing = !self.said.initialized && self.initialized_count > 0;
        if starting || initializing {
            let mut s = format!("ranks {}/{} started", self.started, self.ranks);
            if self.initialized_count > 0 {
                s.push_str(&format!(
                    ", {}/{} through PMI init",
                    self.initialized_count, self.ranks
                ));
            }
            parts.push((1, s));
        }
        if let Some(f) = self.fences.iter().rev().find(|f| !f.said) {
            parts.push((2, fence_words(f, self.ranks)));
        }
        parts
    }
}

/// `fence N: k/T ranks entered`, or, once complete, `fence N complete, k/T ranks,`.
fn fence_words(f: &Fence, ranks: usize) -> String {
    if f.complete {
        format!("fence {} complete, {}/{ranks} ranks,", f.epoch, f.entered)
    } else {
        format!("fence {}: {}/{ranks} ranks entered", f.epoch, f.entered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::HostPlan;

    fn tree(id: u32, children: Vec<Subtree>) -> Subtree {
        Subtree {
            id,
            plan: HostPlan {
                host: format!("h{id}"),
                node: id as usize,
                index: 0,
                ranks: Vec::new(),
            },
            children,
        }
    }

    /// Two agents on level 1, two below the first on level 2; 4 ranks.
    fn progress(t0: Instant) -> Progress {
        let subtrees = vec![
            tree(1, vec![tree(3, vec![]), tree(4, vec![])]),
            tree(2, vec![]),
        ];
        Progress::new(t0, 4, &subtrees)
    }

    fn ms(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn each_phase_says_when_it_completes() {
        let t0 = Instant::now();
        let mut p = progress(t0);
        assert!(p.step(Step::Launched(vec![1, 2]), t0).is_empty());
        assert!(p.step(Step::Connected(1), t0).is_empty());
        assert!(p.step(Step::Launched(vec![3, 4]), t0).is_empty());
        assert_eq!(
            p.agents_words(),
            "agents 1/4 connected (level 1: 1/2 with 1 launching, level 2: 0/2 with 2 launching)"
        );
        for id in [2, 3] {
            assert!(p.step(Step::Connected(id), t0).is_empty());
        }
        // An unknown agent and a second connection change nothing.
        assert!(p.step(Step::Connected(99), t0).is_empty());
        assert!(p.step(Step::Connected(3), t0).is_empty());
        assert_eq!(
            p.step(Step::Connected(4), ms(t0, 250)),
            ["kauri: agents 4/4 connected (level 1: 2/2, level 2: 2/2) at 0.25 s"]
        );
        assert!(p.started(3, t0).is_empty());
        assert_eq!(p.started(1, t0), ["kauri: ranks 4/4 started at 0.00 s"]);
        for r in [0, 1, 2, 2, 7] {
            assert!(p.initialized(r, t0).is_empty());
        }
        assert_eq!(
            p.step(Step::Initialized(3), t0),
            ["kauri: ranks 4/4 through PMI init at 0.00 s"]
        );
        let enter = |ranks| Step::FenceEntered { epoch: 0, ranks };
        assert!(p.step(enter(3), t0).is_empty());
        assert!(p.step(enter(1), t0).is_empty());
        assert_eq!(
            p.fence_done(0, t0),
            ["kauri: fence 0 complete, 4/4 ranks, at 0.00 s"]
        );
        // Every phase said: nothing is under way, nothing is due.
        assert_eq!(p.tick(ms(t0, 5000)), None);
        assert_eq!(p.flush(t0), None);
    }

    #[test]
    fn the_phases_under_way_have_one_line_a_second_when_they_changed() {
        let t0 = Instant::now();
        let mut p = progress(t0);
        assert_eq!(p.due(), None, "nothing happened");
        p.step(Step::Launched(vec![1, 2]), ms(t0, 100));
        p.started(1, ms(t0, 100));
        assert_eq!(p.due(), Some(ms(t0, 1000)), "not before a second");
        assert_eq!(p.tick(ms(t0, 999)), None);
        assert_eq!(
            p.tick(ms(t0, 1000)).as_deref(),
            Some(
                "kauri: agents 0/4 connected (level 1: 0/2 with 2 launching, level 2: 0/2); \
                 ranks 1/4 started at 1.00 s"
            )
        );
        assert_eq!(p.due(), None);
        p.step(Step::Connected(1), ms(t0, 1100));
        p.initialized(0, ms(t0, 1200));
        assert_eq!(p.due(), Some(ms(t0, 2000)));
        assert_eq!(p.tick(ms(t0, 1500)), None);
        assert_eq!(
            p.tick(ms(t0, 2100)).as_deref(),
            Some(
                "kauri: agents 1/4 connected (level 1: 1/2 with 1 launching, level 2: 0/2); \
                 ranks 1/4 started, 1/4 through PMI init at 2.10 s"
            )
        );
        // The same again changes nothing.
        p.initialized(0, ms(t0, 2200));
        p.step(Step::Launched(vec![1]), ms(t0, 2200));
        assert_eq!(p.due(), None);
        // The agents complete: their line at once; the ranks' words have not changed since
        // the last line, so the next says nothing of them.
        for id in [2, 3] {
            assert!(p.step(Step::Connected(id), ms(t0, 2300)).is_empty());
        }
        assert_eq!(p.step(Step::Connected(4), ms(t0, 2300)).len(), 1);
        assert_eq!(p.tick(ms(t0, 3200)), None);
        p.started(1, ms(t0, 3300));
        assert_eq!(
            p.tick(ms(t0, 3300)).as_deref(),
            Some("kauri: ranks 2/4 started, 1/4 through PMI init at 3.30 s")
        );
    }

    /// 1000 fences in 2.5 s, the timer firing when due before each fence's events (`early`)
    /// or after them: the lines said.
    fn fence_loop(early: bool) -> Vec<String> {
        let t0 = Instant::now();
        let mut p = progress(t0);
        let mut lines = Vec::new();
        let tick = |p: &mut Progress, now: Instant, lines: &mut Vec<String>| {
            if let Some(due) = p.due().filter(|&d| d <= now) {
                lines.extend(p.tick(due));
            }
        };
        for epoch in 0..1000u64 {
            let now = ms(t0, epoch * 5 / 2);
            if early {
                tick(&mut p, now, &mut lines);
            }
            lines.extend(p.step(Step::FenceEntered { epoch, ranks: 4 }, now));
            lines.extend(p.fence_done(epoch, now));
            if !early {
                tick(&mut p, now, &mut lines);
            }
        }
        lines.extend(p.flush(ms(t0, 2500)));
        assert_eq!(p.flush(ms(t0, 2600)), None, "said once");
        lines
    }

    #[test]
    fn fences_in_a_loop_make_one_line_a_second() {
        let line = |n, t| format!("kauri: fence {n} complete, 4/4 ranks, at {t} s");
        let said = [
            line(0, "0.00"),
            line(399, "1.00"),
            line(799, "2.00"),
            line(999, "2.50"),
        ];
        assert_eq!(fence_loop(true), said);
        assert_eq!(fence_loop(false), said);
    }

    #[test]
    fn a_fence_under_way_says_how_many_ranks_entered() {
        let t0 = Instant::now();
        let mut p = progress(t0);
        p.step(Step::FenceEntered { epoch: 0, ranks: 3 }, t0);
        // A late report of an older fence, or more ranks than the job has, are no news.
        assert_eq!(
            p.tick(ms(t0, 1000)).as_deref(),
            Some("kauri: fence 0: 3/4 ranks entered at 1.00 s")
        );
        p.step(Step::FenceEntered { epoch: 0, ranks: 9 }, ms(t0, 1100));
        assert_eq!(
            p.tick(ms(t0, 2000)).as_deref(),
            Some("kauri: fence 0: 4/4 ranks entered at 2.00 s")
        );
    }

    #[test]
    fn a_job_without_agents_has_no_agents_line() {
        let t0 = Instant::now();
        let mut p = Progress::new(t0, 1, &[]);
        assert_eq!(p.started(1, t0), ["kauri: ranks 1/1 started at 0.00 s"]);
        assert_eq!(p.tick(ms(t0, 5000)), None);
    }
}
