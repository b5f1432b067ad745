//! The progress lines at `-v` ([`crate::progress`]): what the root hears of the first
//! job's start, counted, and the lines printed on its stderr.

use super::*;
use crate::progress::Progress;

impl Root {
    /// Tells the progress `f` (when the run shows it) what happened now, and prints the lines
    /// it says to print at once. Once the run is ending, its own lines say why: progress
    /// lines stop.
    pub(super) fn note_progress(
        &mut self,
        f: impl FnOnce(&mut Progress, std::time::Instant) -> Vec<String>,
    ) {
        let Some(p) = self.progress.as_mut() else {
            return;
        };
        let lines = f(p, std::time::Instant::now());
        if self.ending.is_none() {
            for line in lines {
                say!("{line}");
            }
        }
    }

    /// When the line of the phases under way is due, while the run is not ending.
    pub(super) fn progress_due(&self) -> Option<Instant> {
        let due = self.progress.as_ref()?.due()?;
        self.ending.is_none().then(|| Instant::from_std(due))
    }

    /// The line of the phases under way, when it says something new.
    pub(super) fn progress_tick(&mut self) {
        self.note_progress(|p, now| p.tick(now).into_iter().collect());
    }

    /// At the end: the last fence's line, when it waited.
    pub(super) fn progress_flush(&mut self) {
        self.note_progress(|p, now| p.flush(now).into_iter().collect());
    }
}
