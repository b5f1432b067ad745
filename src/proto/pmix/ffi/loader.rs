//! The library itself, loaded at run time (`dlopen`), and the symbol table of the entry
//! points Kauri calls.

use super::types::*;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

// ---------------------------------------------------------------------------------------------
// The library itself, loaded at run time (`dlopen`), so that each run can be served by the
// OpenPMIx its programs carry (Open MPI 5's wheel brings OpenPMIx 5 as `libpmix.so.2`, the
// same soname as Debian's 4.2): [`choose_library`], else `KAURI_PMIX_LIBRARY`, else the
// system's.

/// Declares [`Lib`], the library's entry points Kauri calls, each found by its C name.
macro_rules! pmix_entry_points {
    ($( $(#[$doc:meta])* $field:ident = $sym:literal : fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// The entry points of the loaded OpenPMIx library.
        pub(super) struct Lib {
            /// The file it was loaded from, as given to `dlopen`.
            pub(super) path: String,
            $( $(#[$doc])* pub(super) $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl Lib {
            /// Looks every entry point up in the library `handle` (from `dlopen`).
            ///
            /// # Safety
            /// `handle` is a live handle from `dlopen`, never closed.
            unsafe fn bind(handle: *mut c_void, path: String) -> Result<Lib, String> {
                Ok(Lib {
                    $( $field: {
                        let name = concat!($sym, "\0");
                        // SAFETY: handle is live; name is NUL-terminated.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(format!("{path}: it has no {}", $sym));
                        }
                        // SAFETY: the symbol is the library's function of this C signature
                        // (pmix_server.h, pmix.h; the same from 4.0 to 5.0).
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p)
                        }
                    }, )*
                    path,
                })
            }
        }
    };
}

pmix_entry_points! {
    server_init = "PMIx_server_init":
        fn(*mut pmix_server_module_t, *mut pmix_info_t, usize) -> Status;
    server_finalize = "PMIx_server_finalize": fn() -> Status;
    generate_regex = "PMIx_generate_regex": fn(*const c_char, *mut *mut c_char) -> Status;
    generate_ppn = "PMIx_generate_ppn": fn(*const c_char, *mut *mut c_char) -> Status;
    register_nspace = "PMIx_server_register_nspace":
        fn(*const c_char, c_int, *mut pmix_info_t, usize, pmix_op_cbfunc_t, *mut c_void) -> Status;
    deregister_nspace = "PMIx_server_deregister_nspace":
        fn(*const c_char, pmix_op_cbfunc_t, *mut c_void);
    register_client = "PMIx_server_register_client":
        fn(*const pmix_proc_t, libc::uid_t, libc::gid_t, *mut c_void, pmix_op_cbfunc_t, *mut c_void) -> Status;
    setup_fork = "PMIx_server_setup_fork": fn(*const pmix_proc_t, *mut *mut *mut c_char) -> Status;
    dmodex_request = "PMIx_server_dmodex_request":
        fn(*const pmix_proc_t, pmix_dmodex_response_fn_t, *mut c_void) -> Status;
    error_string = "PMIx_Error_string": fn(Status) -> *const c_char;
    get_version = "PMIx_Get_version": fn() -> *const c_char;
    notify_event = "PMIx_Notify_event":
        fn(Status, *const pmix_proc_t, u8, *const pmix_info_t, usize, pmix_op_cbfunc_t, *mut c_void) -> Status;
    client_init = "PMIx_Init": fn(*mut pmix_proc_t, *mut pmix_info_t, usize) -> Status;
    client_finalize = "PMIx_Finalize": fn(*const pmix_info_t, usize) -> Status;
    client_abort = "PMIx_Abort": fn(c_int, *const c_char, *mut pmix_proc_t, usize) -> Status;
    client_put = "PMIx_Put": fn(u8, *const c_char, *mut pmix_value_t) -> Status;
    client_commit = "PMIx_Commit": fn() -> Status;
    client_fence = "PMIx_Fence": fn(*const pmix_proc_t, usize, *const pmix_info_t, usize) -> Status;
    client_get = "PMIx_Get":
        fn(*const pmix_proc_t, *const c_char, *const pmix_info_t, usize, *mut *mut pmix_value_t) -> Status;
    value_destruct = "PMIx_Value_destruct": fn(*mut pmix_value_t);
}

impl std::fmt::Debug for Lib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lib").field("path", &self.path).finish()
    }
}

/// The variable naming the OpenPMIx library file to load (`libpmix.so.2` of the user's
/// choice), for the server and for `kauri pmi`; it wins over Kauri's own choice.
pub const LIBRARY_VAR: &str = "KAURI_PMIX_LIBRARY";

/// The system's library, by soname (the dynamic linker's search path).
const SYSTEM_LIBRARY: &str = "libpmix.so.2";

/// The file this process should load, set by [`choose_library`] before the first use.
static CHOSEN: Mutex<Option<String>> = Mutex::new(None);
/// The library, loaded at first use.
static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();

/// Chooses the OpenPMIx library file this process loads at its first PMIx call (`None`: the
/// system's). [`LIBRARY_VAR`] in the environment wins. Has no effect once the library is
/// loaded: then says which one is.
pub fn choose_library(path: Option<&str>) -> Result<(), String> {
    if let Some(Ok(l)) = LIB.get() {
        if path.is_some_and(|p| p != l.path) {
            return Err(format!("the PMIx library {} is already loaded", l.path));
        }
        return Ok(());
    }
    if let Ok(mut c) = CHOSEN.lock() {
        *c = path.map(str::to_string);
    }
    Ok(())
}

/// The file the library was loaded from, once it is.
pub fn loaded_library() -> Option<String> {
    match LIB.get() {
        Some(Ok(l)) => Some(l.path.clone()),
        _ => None,
    }
}

/// The library, loaded on first use.
pub(super) fn lib() -> Result<&'static Lib, String> {
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// `dlopen` of `path`, or the loader's message.
fn open(path: &str) -> Result<*mut c_void, String> {
    let c = CString::new(path).map_err(|_| format!("{path:?}: a NUL in the name"))?;
    // SAFETY: c is NUL-terminated. RTLD_GLOBAL: OpenPMIx 4's components (Debian's
    // pmix2/lib/pmix/*.so) resolve the library's symbols from the global scope.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if !h.is_null() {
        return Ok(h);
    }
    // SAFETY: dlerror returns the last error of this thread, a static string or NULL.
    let e = unsafe { libc::dlerror() };
    Err(if e.is_null() {
        format!("{path}: cannot be loaded")
    } else {
        // SAFETY: non-NULL, NUL-terminated, valid until the next dl call of this thread.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    })
}

fn load() -> Result<Lib, String> {
    let wanted = std::env::var(LIBRARY_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| CHOSEN.lock().ok().and_then(|c| c.clone()));
    let mut candidates: Vec<String> = wanted.iter().cloned().collect();
    candidates.push(SYSTEM_LIBRARY.into());
    // Where `pkg-config pmix` put it at build time, for a library outside the loader's path.
    if let Some(dir) = option_env!("KAURI_PMIX_LIBDIR") {
        candidates.push(format!("{dir}/{SYSTEM_LIBRARY}"));
    }
    let mut errors = Vec::new();
    for path in candidates {
        match open(&path) {
            // SAFETY: h is a live handle from dlopen, never closed.
            Ok(h) => match unsafe { Lib::bind(h, path.clone()) } {
                Ok(l) => {
                    if !errors.is_empty() {
                        say!(
                            "kauri: cannot use the PMIx library {}; serving with {path}",
                            errors.join("; ")
                        );
                    }
                    return Ok(l);
                }
                Err(e) => errors.push(e),
            },
            Err(e) => errors.push(e),
        }
    }
    Err(format!(
        "no OpenPMIx library could be loaded ({}); install libpmix2 or set {LIBRARY_VAR}",
        errors.join("; ")
    ))
}

/// The PMIx library's own version line (`OpenPMIx 4.2.2, ...`), as `PMIx_Get_version` gives it.
pub fn library_version() -> String {
    let Ok(l) = lib() else {
        return "unknown (no OpenPMIx library loads)".into();
    };
    // SAFETY: PMIx_Get_version takes nothing and returns a pointer to a static NUL-terminated
    // string (or NULL); it needs no initialised library.
    let p = unsafe { (l.get_version)() };
    if p.is_null() {
        return "unknown".into();
    }
    // SAFETY: p is non-NULL and points to a static C string owned by the library.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The library's name for a status.
pub fn error_string(status: Status) -> String {
    let Ok(l) = lib() else {
        return format!("PMIx status {status}");
    };
    // SAFETY: PMIx_Error_string returns a pointer to a static NUL-terminated string (or NULL).
    let p = unsafe { (l.error_string)(status) };
    if p.is_null() {
        return format!("PMIx status {status}");
    }
    // SAFETY: p is non-NULL and points to a static C string owned by the library.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

pub(super) fn check(what: &str, rc: Status) -> Result<(), String> {
    if rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED {
        Ok(())
    } else {
        Err(format!("{what}: {} ({rc})", error_string(rc)))
    }
}
