//! What kauri asks of its machine, below every other folder but the console: its names and
//! addresses ([`hostname`], [`iface`] for `-iface`, [`machine`]: which host entries name this
//! machine), the ports it listens on or hands out ([`ports`]), the owner of a loopback
//! connection ([`peer`]), and what a program file links ([`elf`]). It knows nothing of jobs,
//! plans or trees.

pub mod clock;
pub mod elf;
pub mod hostname;
pub mod iface;
pub mod machine;
pub mod peer;
pub mod ports;
pub mod program;
