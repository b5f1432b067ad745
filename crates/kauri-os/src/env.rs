//! The process's environment, as the C libraries kauri loads read it.
//!
//! glibc's `getenv` takes no lock: a `getenv` in one thread that walks `environ` while
//! another thread's `setenv` grows it reads freed memory. Rust's `std::env` locks against
//! itself only. Two C libraries meet here: libhwloc reads `HWLOC_*` variables while it
//! discovers the topology on a thread of its own (`host::topology`), and OpenPMIx reads the
//! variables kauri sets just before its server starts (`pmix::ffi::server`), which happens
//! while other threads run. Each holds [`lock`] for as long as it reads or changes the
//! environment, so the two never overlap.

use std::sync::{Mutex, MutexGuard};

static C_ENV: Mutex<()> = Mutex::new(());

/// Held while a C library reads the environment on a thread of kauri's, and while kauri
/// changes the environment after its threads started. Never held across an `.await`.
pub fn lock() -> MutexGuard<'static, ()> {
    C_ENV.lock().unwrap_or_else(|e| e.into_inner())
}
