//! One host's ranks: the [`node::Node`] that starts them, serves their PMI connections and
//! PMIx upcalls and reports their ends; the processes themselves ([`proc`], [`child`],
//! [`keeper`]), their output ([`iofwd`], [`output`]), binding ([`bind`]), the hardware
//! topology handed to them ([`topology`]), the debugger interface ([`mpir`]), and the system
//! calls a child makes before its `execve` ([`syscall`]).
//! The root and every agent run one `Node` for their host.

pub mod bind;
pub mod child;
pub mod events;
pub mod iofwd;
pub mod keeper;
pub mod mpir;
pub mod node;
pub mod ompi;
pub mod output;
pub mod proc;
pub mod syscall;
pub mod topology;
