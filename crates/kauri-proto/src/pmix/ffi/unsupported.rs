//! The upcalls Kauri does not implement: each answers "not supported" at once.

use super::types::*;
use super::values::read_proc;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::Mutex;

/// The upcalls already reported as not supported (each once per process).
static REFUSED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The line under `-v` for an upcall Kauri does not implement, the first time it comes.
pub fn unsupported_line(upcall: &str, who: Option<(String, u32)>) -> String {
    let who = match who {
        None => "?".to_string(),
        Some((ns, PMIX_RANK_WILDCARD)) => format!("{ns}:*"),
        Some((ns, PMIX_RANK_UNDEF)) => format!("{ns}:undef"),
        Some((ns, r)) => format!("{ns}:{r}"),
    };
    format!("kauri: PMIx upcall {upcall} from {who} is not supported")
}

/// Answers an upcall Kauri does not implement: `PMIX_ERR_NOT_SUPPORTED`, returned at once (so
/// the library calls no callback and answers its client itself), said on stderr under `-v` the
/// first time this process gets it.
///
/// # Safety
/// `proc_` must be NULL or point to a valid `pmix_proc_t`.
pub(super) unsafe fn unsupported(upcall: &'static str, proc_: *const pmix_proc_t) -> Status {
    let first = REFUSED.lock().is_ok_and(|mut seen| {
        let new = !seen.contains(&upcall);
        if new {
            seen.push(upcall);
        }
        new
    });
    if first && tracing::enabled!(tracing::Level::INFO) {
        // SAFETY: per this function's contract.
        let who = unsafe { read_proc(proc_) };
        say!("{}", unsupported_line(upcall, who));
    }
    PMIX_ERR_NOT_SUPPORTED
}

/// The first of the `n` processes at `procs`, or NULL when there are none: the caller an
/// upcall that passes a list (`iof_pull`) is said to come from.
fn first_proc(procs: *const pmix_proc_t, n: usize) -> *const pmix_proc_t {
    if n > 0 {
        procs
    } else {
        ptr::null()
    }
}

/// Defines upcalls Kauri answers with [`unsupported`], one per line: the function, the
/// upcall's name, the argument naming its caller (a `*const pmix_proc_t`), then its C
/// signature (the arguments it does not read are `_`).
macro_rules! unsupported_upcalls {
    ($( $name:ident($upcall:literal, $who:expr) = fn($($arg:tt: $ty:ty),*); )*) => {
        $(
            #[allow(clippy::too_many_arguments)]
            pub(super) unsafe extern "C" fn $name($($arg: $ty),*) -> Status {
                // SAFETY: the library passes a valid proc (or NULL) as the caller; a list
                // (`iof_pull`) points to its count of valid entries, the first read if any.
                unsafe { unsupported($upcall, $who) }
            }
        )*
    };
}

unsupported_upcalls! {
    up_notify_event("notify_event", source) = fn(_: Status, source: *const pmix_proc_t, _: u8, _: *mut pmix_info_t, _: usize, _: pmix_op_cbfunc_t, _: *mut c_void);
    up_allocate("allocate", client) = fn(client: *const pmix_proc_t, _: u8, _: *const pmix_info_t, _: usize, _: *const c_void, _: *mut c_void);
    up_monitor("monitor", requestor) = fn(requestor: *const pmix_proc_t, _: *const pmix_info_t, _: Status, _: *const pmix_info_t, _: usize, _: *const c_void, _: *mut c_void);
    up_get_credential("get_credential", proc_) = fn(proc_: *const pmix_proc_t, _: *const pmix_info_t, _: usize, _: *const c_void, _: *mut c_void);
    up_validate_credential("validate_credential", proc_) = fn(proc_: *const pmix_proc_t, _: *const c_void, _: *const pmix_info_t, _: usize, _: *const c_void, _: *mut c_void);
    up_iof_pull("iof_pull", first_proc(procs, nprocs)) = fn(procs: *const pmix_proc_t, nprocs: usize, _: *const pmix_info_t, _: usize, _: u16, _: pmix_op_cbfunc_t, _: *mut c_void);
    up_push_stdin("push_stdin", source) = fn(source: *const pmix_proc_t, _: *const pmix_proc_t, _: usize, _: *const pmix_info_t, _: usize, _: *const c_void, _: pmix_op_cbfunc_t, _: *mut c_void);
    up_fabric("fabric", requestor) = fn(requestor: *const pmix_proc_t, _: c_int, _: *const pmix_info_t, _: usize, _: *const c_void, _: *mut c_void);
}
