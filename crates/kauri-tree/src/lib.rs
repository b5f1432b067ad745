//! The overlay tree between the front end and the agents: its links and its shape.
//!
//! A link is one TCP connection from a child (an agent) to its parent (an agent or the front
//! end). The parent speaks first: [`Down::Challenge`] with a random nonce; the child answers
//! [`Up::Hello`] with an HMAC-SHA256 of the nonce under the per-job key ([`auth`]), which never
//! appears on a command line (it reaches agents in their environment or on their stdin). A
//! connection that does not answer correctly is refused and the job goes on; until the proof
//! is checked, both sides read frames of at most [`HANDSHAKE_FRAME_MAX`] bytes. Then the parent
//! sends [`Down::Spec`], the child's part of the job, and the link carries fence contributions,
//! output and reports up ([`Up`], [`Report`]) and fence results, stdin, signals and teardown
//! down ([`Down`]) until the child says [`Up::Done`].
//!
//! Frames ([`frame`]) are a 4-byte big-endian length and a bincode body; the messages
//! ([`msg`]) are batched by kind: one fence contribution per agent per fence (all puts of its
//! subtree), output as runs of whole lines, never one message per key. The tree's shape
//! ([`shape`]) says which agent is whose parent.
//!
//! After the handshake, everything sent on a link goes through its [`Link`] queue and the one
//! task that writes it ([`link`]). The sockets themselves belong to `hub` (a parent's side)
//! and `agent` (a child's side); this module owns what is said on links, how it is framed,
//! checked and queued. What the links carry is `plan`'s job plan and `service`'s
//! requests; neither of those modules may import this one.
//!
//! Above the links, the tree's I/O: each host's [`branch::Branch`], the [`hub`] that accepts a
//! parent's children, the [`agent`] a launcher starts on each host, the [`root`] that runs a
//! job from the front end, and the [`status`] socket. The crate uses only the crates below it
//! (the core, `kauri-os`, `kauri-launch`, `kauri-proto`, `kauri-plan`, `kauri-host`,
//! `pmi-wire`); the `kauri` crate re-exports it as `kauri::tree`.

#![warn(missing_docs)]

#[macro_use]
extern crate kauri_os;

pub use kauri_core::tree::{gather, msg, policy, profile, progress, refusals, shape};

pub mod agent;
pub mod auth;
pub mod branch;
pub mod frame;
pub mod hub;
pub mod link;
pub mod root;
pub mod status;

pub use auth::{mac, new_key, nonce, verify};
pub use frame::{
    decode_frame, encode, read_body, recv, recv_frame, recv_limited, send, Body, FrameReader,
    FRAME_MAX, HANDSHAKE_FRAME_MAX,
};
pub use link::{link, Link, Queue};
pub use msg::{Down, HostStatus, Launching, RankStatus, Report, Up};
pub use shape::{build, build_cost, LaunchCost};

#[cfg(test)]
mod tests {
    /// The core names signals by number without libc: each number is the OS's.
    #[test]
    fn the_policys_signal_numbers_are_libcs() {
        use super::policy::{exit_status, signal_name, Ending};
        for (n, name) in [
            (libc::SIGHUP, "SIGHUP"),
            (libc::SIGINT, "SIGINT"),
            (libc::SIGQUIT, "SIGQUIT"),
            (libc::SIGILL, "SIGILL"),
            (libc::SIGTRAP, "SIGTRAP"),
            (libc::SIGABRT, "SIGABRT"),
            (libc::SIGBUS, "SIGBUS"),
            (libc::SIGFPE, "SIGFPE"),
            (libc::SIGKILL, "SIGKILL"),
            (libc::SIGUSR1, "SIGUSR1"),
            (libc::SIGSEGV, "SIGSEGV"),
            (libc::SIGUSR2, "SIGUSR2"),
            (libc::SIGPIPE, "SIGPIPE"),
            (libc::SIGALRM, "SIGALRM"),
            (libc::SIGTERM, "SIGTERM"),
        ] {
            assert_eq!(signal_name(n), name);
        }
        assert_eq!(super::policy::SIGTERM, libc::SIGTERM);
        assert_eq!(super::policy::SIGKILL, libc::SIGKILL);
        assert_eq!(signal_name(64), "signal");
        assert_eq!(
            exit_status(Some(Ending::OutputClosed), 1),
            128 + libc::SIGPIPE
        );
    }
}
