//! What kauri asks of its machine, below every layer of kauri that does I/O: its names and
//! addresses ([`hostname`], [`iface`] for `-iface`, [`machine`]: which host entries name this
//! machine), the ports it listens on or hands out ([`ports`]), the owner of a loopback
//! connection ([`peer`]), what a program file links ([`elf`]), where a program is
//! ([`program`]) and its clocks ([`clock`]); and kauri's own words on stdout and stderr
//! ([`console`]: `say!`, `show!`). It knows nothing of jobs, plans or trees; the `kauri`
//! crate re-exports it as `kauri::os` and `kauri::console`.

#![warn(missing_docs)]

#[macro_use]
pub mod console;
pub mod clock;
pub mod elf;
pub mod env;
pub mod hostname;
pub mod iface;
pub mod machine;
pub mod peer;
pub mod ports;
pub mod program;
pub mod trace;
