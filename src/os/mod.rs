//! What kauri asks of its machine, below every other folder but the console: its names
//! ([`hostname`]), the ports it listens on or hands out ([`ports`]), and the owner of a
//! loopback connection ([`peer`]). It knows nothing of jobs, plans or trees.

pub mod elf;
pub mod hostname;
pub mod peer;
pub mod ports;
