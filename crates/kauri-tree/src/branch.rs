//! One node of the tree: the core's [`Branch`] (every decision of a host's part of a job)
//! over this host's ranks (the host layer's [`Node`]) and its child links (the [`Children`]
//! hub, which implements [`Links`] in `hub`).

use crate::hub::Children;
pub use kauri_core::tree::branch::{Branch, Host, HubEvent, Links, NodeEvent, Out};
use kauri_host::node::Node;

/// A branch of kauri's: this host's ranks and its children's links.
pub type JobBranch = Branch<Node, Children>;
