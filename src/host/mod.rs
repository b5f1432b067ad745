//! One host's ranks: the [`node::Node`] that starts them, serves their PMI connections and
//! PMIx upcalls and reports their ends; the processes themselves ([`proc`], [`spawn`],
//! [`keeper`]), their output ([`iofwd`], [`output`]), binding ([`bind`]), the hardware
//! topology handed to them ([`topology`]), and the debugger interface ([`mpir`]).
//! The root and every agent run one `Node` for their host.

pub mod bind;
pub mod events;
pub mod iofwd;
pub mod keeper;
pub mod mpir;
pub mod node;
pub mod ompi;
pub mod output;
pub mod proc;
pub mod spawn;
pub mod topology;
