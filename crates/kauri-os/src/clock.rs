//! The clocks kauri reads: a host's monotonic clock for its startup profile ([`Clock`]), and
//! the wall clock, as the output patterns count from it (`%t`).

use std::time::Instant;

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A host's clock: microseconds since its origin.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    /// The origin.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Now, in microseconds since the origin.
    pub fn now(&self) -> u64 {
        self.at(Instant::now())
    }

    /// `t` in microseconds since the origin (0 for an instant before it).
    pub fn at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.origin).as_micros() as u64
    }
}
