//! The MPIR process-acquisition interface: the symbols a parallel debugger (TotalView, DDT,
//! STAT, a gdb script) reads in the starter process to find every rank of a job. Kauri fills
//! [`MPIR_proctable`] once every rank of the job the user started has been forked, on every
//! host (host, executable, pid, in rank order), sets [`MPIR_debug_state`] to
//! `MPIR_DEBUG_SPAWNED` and calls [`MPIR_Breakpoint`], where a debugger that started or
//! attached to kauri stops to read the table.
//!
//! The names and layout are the MPIR standard's (MPI Forum, "The MPIR Process Acquisition
//! Interface", 2010); they are C symbols, hence the lower-case statics.
#![allow(non_upper_case_globals, non_snake_case, non_camel_case_types)]

use std::ffi::{c_char, c_int, CString};

/// One process of the table.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MPIR_PROCDESC {
    /// The host it runs on.
    pub host_name: *const c_char,
    /// Its executable.
    pub executable_name: *const c_char,
    /// Its pid on that host.
    pub pid: c_int,
}

/// `MPIR_debug_state`: the table is filled.
pub const MPIR_DEBUG_SPAWNED: c_int = 1;
/// `MPIR_debug_state`: the job is aborting.
pub const MPIR_DEBUG_ABORTING: c_int = 2;

/// The processes, in rank order (`MPIR_proctable_size` of them).
#[no_mangle]
#[used]
pub static mut MPIR_proctable: *mut MPIR_PROCDESC = std::ptr::null_mut();
/// How many entries [`MPIR_proctable`] has.
#[no_mangle]
#[used]
pub static mut MPIR_proctable_size: c_int = 0;
/// `MPIR_DEBUG_SPAWNED` once the table is filled, `MPIR_DEBUG_ABORTING` when the job aborts.
#[no_mangle]
#[used]
pub static mut MPIR_debug_state: c_int = 0;
/// Set by a debugger that has kauri under its control.
#[no_mangle]
#[used]
pub static mut MPIR_being_debugged: c_int = 0;
/// The reason of an abort, when [`MPIR_debug_state`] says it aborts.
#[no_mangle]
#[used]
pub static mut MPIR_debug_abort_string: *const c_char = std::ptr::null();
/// Kauri starts the processes and is not one of them.
#[no_mangle]
#[used]
pub static mut MPIR_i_am_starter: c_int = 1;
/// A debugger may attach to some of the processes only.
#[no_mangle]
#[used]
pub static mut MPIR_partial_attach_ok: c_int = 1;
/// The processes' message queues are not for the debugger to read through kauri.
#[no_mangle]
#[used]
pub static mut MPIR_ignore_queues: c_int = 1;

/// Where a debugger sets its breakpoint; kauri calls it once the table is filled.
#[no_mangle]
#[inline(never)]
pub extern "C" fn MPIR_Breakpoint() -> c_int {
    // Something the optimiser must keep, so the function is not merged or removed.
    std::hint::black_box(0)
}

/// One rank for the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Its rank.
    pub rank: usize,
    /// Its host.
    pub host: String,
    /// Its executable (as resolved on its host), its bytes as they are: a path need not be
    /// UTF-8.
    pub executable: std::ffi::OsString,
    /// Its pid there.
    pub pid: u32,
}

/// Fills the table with `procs` (sorted by rank here), marks it spawned and calls
/// [`MPIR_Breakpoint`]. Called once, from the thread that runs the job; the strings stay
/// allocated for the life of the process.
pub fn publish(mut procs: Vec<Proc>) {
    procs.sort_by_key(|p| p.rank);
    let leak = |s: &[u8]| -> *const c_char {
        let s: Vec<u8> = s.iter().copied().filter(|&b| b != 0).collect();
        CString::new(s).unwrap_or_default().into_raw().cast_const()
    };
    let table: Vec<MPIR_PROCDESC> = procs
        .iter()
        .map(|p| MPIR_PROCDESC {
            host_name: leak(p.host.as_bytes()),
            executable_name: leak(std::os::unix::ffi::OsStrExt::as_bytes(
                p.executable.as_os_str(),
            )),
            pid: p.pid as c_int,
        })
        .collect();
    let n = table.len() as c_int;
    let ptr = Box::leak(table.into_boxed_slice()).as_mut_ptr();
    // SAFETY: written once, from one thread, before the debugger is told (by the breakpoint
    // below) to read them; nothing in kauri reads them.
    unsafe {
        MPIR_proctable = ptr;
        MPIR_proctable_size = n;
        MPIR_debug_state = MPIR_DEBUG_SPAWNED;
    }
    MPIR_Breakpoint();
}

/// Marks the job as aborting, with `why`, and calls [`MPIR_Breakpoint`] (a debugger may
/// want to look before the processes go).
pub fn aborting(why: &str) {
    let s = CString::new(why.replace('\0', "")).unwrap_or_default();
    // SAFETY: as in `publish`; the string is leaked, so it stays valid.
    unsafe {
        MPIR_debug_abort_string = s.into_raw().cast_const();
        MPIR_debug_state = MPIR_DEBUG_ABORTING;
    }
    MPIR_Breakpoint();
}
