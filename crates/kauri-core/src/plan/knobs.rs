//! kauri's own times, as its variables give them (`KAURI_KILL_GRACE=0.5`): their names, their
//! range and their parsing. The command line checks them ([`crate::cli::check_env_knobs`]);
//! the front end and the keeper read them.

use std::time::Duration;

/// The longest time any of kauri's times may be set to, in seconds (about three years):
/// beyond it a deadline added to the clock could overflow.
pub const SECS_MAX: u64 = 100_000_000;

/// kauri's variables that hold a time in seconds (fractions allowed), with what they are.
pub const SECONDS_VARS: &[&str] = &[
    "KAURI_KILL_GRACE",
    "KAURI_CONNECT_TIMEOUT",
    "KAURI_HEARTBEAT",
    "KAURI_HEARTBEAT_TIMEOUT",
    "KAURI_TEARDOWN_WAIT",
];

/// A time in seconds as a user writes it (`2`, `0.5`), from 0 to [`SECS_MAX`]; `None` for
/// anything else (not a number, negative, NaN, infinite, too long).
pub fn parse_secs(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (0.0..=SECS_MAX as f64).contains(s))
        .map(Duration::from_secs_f64)
}
