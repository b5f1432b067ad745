//! The trace of `kauri pmi -v`: each wire line or library call on stderr, with the time and
//! the rank.

use pmi_wire::client::{Direction, Trace};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Where `-v` lines go: stderr, with the UTC time of day and the rank.
#[derive(Clone)]
pub(super) struct Log {
    on: bool,
    rank: Arc<AtomicI64>,
}

impl Log {
    pub(super) fn new(on: bool) -> Log {
        // Before init, the rank the launcher put in the environment, if any.
        let rank = ["PMI_RANK", "PMIX_RANK", "PMI_ID", "SLURM_PROCID"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
            .unwrap_or(-1);
        Log {
            on,
            rank: Arc::new(AtomicI64::new(rank)),
        }
    }

    pub(super) fn set_rank(&self, r: i64) {
        self.rank.store(r, Ordering::Relaxed);
    }

    /// `rank R: `, or nothing when the rank is unknown.
    pub(super) fn who(&self) -> String {
        match self.rank.load(Ordering::Relaxed) {
            r if r >= 0 => format!("rank {r}: "),
            _ => String::new(),
        }
    }

    pub(super) fn line(&self, arrow: &str, text: &str) {
        if !self.on {
            return;
        }
        let r = self.rank.load(Ordering::Relaxed);
        let rank = if r >= 0 { r.to_string() } else { "?".into() };
        say!("{} rank {rank} {arrow} {text}", utc_now());
    }

    /// A library call and its result (libpmi2, pmix).
    pub(super) fn call(&self, call: &str, result: &str) {
        self.line("call", &format!("{call} = {result}"));
    }

    /// The hook for pmi-wire's client, or `None` when `-v` is off.
    pub(super) fn wire_trace(&self) -> Option<Trace> {
        if !self.on {
            return None;
        }
        let log = self.clone();
        Some(Box::new(move |d: Direction, bytes: &[u8]| {
            let text = String::from_utf8_lossy(bytes);
            let arrow = match d {
                Direction::Sent => "->",
                Direction::Received => "<-",
            };
            log.line(arrow, text.trim_end_matches('\n'));
        }))
    }
}

/// The time of day, UTC, to the microsecond: `HH:MM:SS.ffffff`.
fn utc_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_micros()
    )
}
