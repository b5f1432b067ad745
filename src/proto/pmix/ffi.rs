//! The OpenPMIx server library (4.2, or 5.0 as Open MPI 5 carries it), by hand: the
//! `#[repr(C)]` types and the functions Kauri uses (looked up in the library it loads at run
//! time: [`choose_library`]), the upcalls the library makes into Kauri, and the safe wrappers
//! around both. This is the only module of the PMIx server with `unsafe` code.
//!
//! Layouts are those of `pmix_common.h`/`pmix_server.h` 4.2 on LP64 Linux (checked by the
//! `layouts_match_the_c_headers` test, which compiles a C probe against the installed headers
//! when a C compiler and `pkg-config pmix` are there).
//!
//! Threads: the library calls the upcalls ([`Upcall`]) on its own progress thread. Each one
//! only turns its arguments into Rust values and sends them, with a [`ModexReply`] where an
//! answer is due, into the channel registered for the namespace ([`route`]); the agent's
//! event loop answers later, from its own thread (the library shifts every callback into its
//! progress thread itself, so that is allowed).

#![allow(non_camel_case_types)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Mutex, OnceLock};
use tokio::sync::mpsc;

/// A PMIx status code (`pmix_status_t`).
pub type Status = c_int;
/// Success.
pub const PMIX_SUCCESS: Status = 0;
/// A generic error.
pub const PMIX_ERROR: Status = -1;
/// The data asked for does not exist.
pub const PMIX_ERR_NOT_FOUND: Status = -46;
/// The operation is not supported.
pub const PMIX_ERR_NOT_SUPPORTED: Status = -47;
/// `PMIX_ERR_PARTIAL_SUCCESS`: some of what was asked is answered.
pub const PMIX_ERR_PARTIAL_SUCCESS: Status = -52;
/// A spawn failed.
pub const PMIX_ERR_JOB_FAILED_TO_LAUNCH: Status = -181;
/// The operation completed at once; no callback will follow.
pub const PMIX_OPERATION_SUCCEEDED: Status = -157;
/// The name exists already (a publish of a published name).
pub const PMIX_ERR_EXISTS: Status = -11;
/// A value of the wrong type (a published value that is not a string).
pub const PMIX_ERR_TYPE_MISMATCH: Status = -18;
/// The caller may not do this (an unpublish of someone else's name).
pub const PMIX_ERR_NO_PERMISSIONS: Status = -23;
/// The operation did not complete in the time given (a lookup's `PMIX_TIMEOUT`).
pub const PMIX_ERR_TIMEOUT: Status = -24;
/// A bad argument (a publish with no data, a lookup with no key).
pub const PMIX_ERR_BAD_PARAM: Status = -27;
/// The rank meaning "every rank of the namespace".
pub const PMIX_RANK_WILDCARD: u32 = 0xffff_fffe;
/// The rank meaning "no rank in particular".
pub const PMIX_RANK_UNDEF: u32 = u32::MAX;

const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;
const PMIX_SIZE: u16 = 4;
const PMIX_INT: u16 = 6;
const PMIX_INT8: u16 = 7;
const PMIX_INT16: u16 = 8;
const PMIX_INT32: u16 = 9;
const PMIX_INT64: u16 = 10;
const PMIX_UINT: u16 = 11;
const PMIX_UINT8: u16 = 12;
const PMIX_UINT16: u16 = 13;
const PMIX_UINT32: u16 = 14;
const PMIX_UINT64: u16 = 15;
const PMIX_PERSIST: u16 = 30;
const PMIX_DATA_RANGE: u16 = 33;
const PMIX_INFO: u16 = 24;
const PMIX_BYTE_OBJECT: u16 = 27;
const PMIX_DATA_ARRAY: u16 = 39;
const PMIX_PROC_RANK: u16 = 40;

const NSLEN: usize = 256;
const KEYLEN: usize = 512;

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_proc_t {
    nspace: [c_char; NSLEN],
    rank: u32,
}

/// `pmix_data_array_t`.
#[repr(C)]
struct pmix_data_array_t {
    type_: u16,
    size: usize,
    array: *mut c_void,
}

/// The members of `pmix_value_t`'s union that Kauri writes or reads, padded to the union's
/// size.
#[repr(C)]
#[derive(Clone, Copy)]
union pmix_value_data {
    flag: bool,
    string: *mut c_char,
    size: usize,
    integer: c_int,
    int8: i8,
    int16: i16,
    int32: i32,
    int64: i64,
    uint8: u8,
    uint16: u16,
    uint32: u32,
    uint64: u64,
    darray: *mut pmix_data_array_t,
    bo: pmix_byte_object_t,
    _size: [u64; 3],
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct pmix_byte_object_t {
    bytes: *mut c_char,
    size: usize,
}

/// `pmix_value_t`.
#[repr(C)]
struct pmix_value_t {
    type_: u16,
    data: pmix_value_data,
}

/// `pmix_info_t`.
#[repr(C)]
struct pmix_info_t {
    key: [c_char; KEYLEN],
    flags: u32,
    value: pmix_value_t,
}

/// `pmix_pdata_t`: one answer of a lookup (who published, the key, the value).
#[repr(C)]
struct pmix_pdata_t {
    proc_: pmix_proc_t,
    key: [c_char; KEYLEN],
    value: pmix_value_t,
}

type pmix_op_cbfunc_t = Option<unsafe extern "C" fn(Status, *mut c_void)>;
type pmix_lookup_cbfunc_t =
    Option<unsafe extern "C" fn(Status, *mut pmix_pdata_t, usize, *mut c_void)>;
type pmix_release_cbfunc_t = Option<unsafe extern "C" fn(*mut c_void)>;
type pmix_modex_cbfunc_t = Option<
    unsafe extern "C" fn(
        Status,
        *const c_char,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
>;
type pmix_dmodex_response_fn_t =
    Option<unsafe extern "C" fn(Status, *mut c_char, usize, *mut c_void)>;

/// `pmix_app_t`: one application of a spawn.
#[repr(C)]
struct pmix_app_t {
    cmd: *mut c_char,
    argv: *mut *mut c_char,
    env: *mut *mut c_char,
    cwd: *mut c_char,
    maxprocs: c_int,
    info: *mut pmix_info_t,
    ninfo: usize,
}

type pmix_spawn_cbfunc_t = Option<unsafe extern "C" fn(Status, *mut c_char, *mut c_void)>;
type SpawnFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    *const pmix_app_t,
    usize,
    pmix_spawn_cbfunc_t,
    *mut c_void,
) -> Status;
/// `connect` and `disconnect`.
type ConnectFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;

type ConnectedFn =
    unsafe extern "C" fn(*const pmix_proc_t, *mut c_void, pmix_op_cbfunc_t, *mut c_void) -> Status;
type Connected2Fn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut c_void,
    *mut pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type AbortFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut c_void,
    c_int,
    *const c_char,
    *mut pmix_proc_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type FenceFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    *mut c_char,
    usize,
    pmix_modex_cbfunc_t,
    *mut c_void,
) -> Status;
type DmodexFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    pmix_modex_cbfunc_t,
    *mut c_void,
) -> Status;

type PublishFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type LookupFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut *mut c_char,
    *const pmix_info_t,
    usize,
    pmix_lookup_cbfunc_t,
    *mut c_void,
) -> Status;
type UnpublishFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut *mut c_char,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
// The upcalls Kauri answers "not supported": only the arguments it reads are typed; the
// others are pointers (`*const c_void`) or integers of their C width.
type NotifyFn = unsafe extern "C" fn(
    Status,
    *const pmix_proc_t,
    u8,
    *mut pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type QueryFn = unsafe extern "C" fn(
    *mut pmix_proc_t,
    *mut c_void,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type AllocFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    u8,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type JobControlFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type MonitorFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    Status,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type GetCredFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type ValidateCredFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const c_void,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type IofPullFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    u16,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type StdinFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    *const c_void,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type FabricFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    c_int,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;

/// `group` (`pmix_server_grp_fn_t`): the operation (`pmix_group_operation_t`, an enum), the
/// group's id, its members, the directives, and an info callback (`pmix_info_cbfunc_t`).
type LogFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
);
type GroupFn = unsafe extern "C" fn(
    c_int,
    *mut c_char,
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    pmix_info_cbfunc_t,
    *mut c_void,
) -> Status;
type pmix_info_cbfunc_t = Option<
    unsafe extern "C" fn(
        Status,
        *mut pmix_info_t,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
>;

/// `pmix_server_module_t` (the 4.0 layout: 28 function pointers; and 5.0's 29th, NULL).
/// Every entry is Kauri's except five it leaves NULL on purpose, because OpenPMIx 4.2 does better without them (see
/// `docs/pmix.md`, "The server module"): `register_events`, `deregister_events`, `listener`,
/// `tool_connected` and `log`, typed here as plain pointers.
#[repr(C)]
struct pmix_server_module_t {
    client_connected: Option<ConnectedFn>,
    client_finalized: Option<ConnectedFn>,
    abort: Option<AbortFn>,
    fence_nb: Option<FenceFn>,
    direct_modex: Option<DmodexFn>,
    publish: Option<PublishFn>,
    lookup: Option<LookupFn>,
    unpublish: Option<UnpublishFn>,
    spawn: Option<SpawnFn>,
    connect: Option<ConnectFn>,
    disconnect: Option<ConnectFn>,
    register_events: *const c_void,
    deregister_events: *const c_void,
    listener: *const c_void,
    notify_event: Option<NotifyFn>,
    query: Option<QueryFn>,
    tool_connected: *const c_void,
    log: Option<LogFn>,
    allocate: Option<AllocFn>,
    job_control: Option<JobControlFn>,
    monitor: Option<MonitorFn>,
    get_credential: Option<GetCredFn>,
    validate_credential: Option<ValidateCredFn>,
    iof_pull: Option<IofPullFn>,
    push_stdin: Option<StdinFn>,
    group: Option<GroupFn>,
    fabric: Option<FabricFn>,
    client_connected2: Option<Connected2Fn>,
    /// 5.0's `session_control`: never filled, but there so that OpenPMIx 5, which copies the
    /// whole structure, reads Kauri's NULL and not what lies beyond the 4.x structure.
    session_control: *const c_void,
}

// ---------------------------------------------------------------------------------------------
// The library itself, loaded at run time (`dlopen`), so that each run can be served by the
// OpenPMIx its programs carry (Open MPI 5's wheel brings OpenPMIx 5 as `libpmix.so.2`, the
// same soname as Debian's 4.2): [`choose_library`], else `KAURI_PMIX_LIBRARY`, else the
// system's.

/// Declares [`Lib`], the library's entry points Kauri calls, each found by its C name.
macro_rules! pmix_entry_points {
    ($( $(#[$doc:meta])* $field:ident = $sym:literal : fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// The entry points of the loaded OpenPMIx library.
        struct Lib {
            /// The file it was loaded from, as given to `dlopen`.
            path: String,
            $( $(#[$doc])* $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
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
fn lib() -> Result<&'static Lib, String> {
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

/// A value of the job information handed to [`register_nspace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    /// `PMIX_STRING`.
    Str(String),
    /// `PMIX_UINT32`.
    U32(u32),
    /// `PMIX_UINT16`.
    U16(u16),
    /// `PMIX_PROC_RANK`.
    Rank(u32),
    /// `PMIX_BOOL`.
    Bool(bool),
    /// `PMIX_DATA_ARRAY` of `PMIX_INFO`: a nested list of keys and values.
    Infos(Vec<(String, Val)>),
    /// `PMIX_PROC`: a process, by namespace and rank.
    Proc(String, u32),
    /// `PMIX_SIZE`.
    Size(usize),
    /// `PMIX_BYTE_OBJECT`: opaque bytes.
    Bytes(Vec<u8>),
    /// `PMIX_DATA_ARRAY` of `PMIX_PROC`: processes, by namespace and rank.
    Procs(Vec<(String, u32)>),
}

/// A `pmix_info_t` array built from Rust values, with everything it points to. It must
/// outlive every call it is passed to (the library copies what it keeps).
struct InfoArray {
    infos: Vec<pmix_info_t>,
    _strings: Vec<CString>,
    // Boxed: the infos point at each array, which must not move when the Vec grows.
    #[allow(clippy::vec_box)]
    _arrays: Vec<Box<pmix_data_array_t>>,
    _nested: Vec<InfoArray>,
    // Boxed for the same reason.
    #[allow(clippy::vec_box)]
    _procs: Vec<Box<pmix_proc_t>>,
    _proc_arrays: Vec<Vec<pmix_proc_t>>,
}

impl Drop for InfoArray {
    fn drop(&mut self) {
        // The bytes of a `Val::Bytes` are `malloc`ed: the library may take them (OpenPMIx 4.2
        // loads a group's `PMIX_GROUP_ENDPT_DATA` into a buffer it frees, and sets the
        // pointer to NULL); what it left is freed here.
        for i in &mut self.infos {
            if i.value.type_ == PMIX_BYTE_OBJECT {
                // SAFETY: a byte object's value is the `bo` member; a non-NULL pointer there
                // is one `Val::Bytes` made with malloc and nobody else freed.
                unsafe {
                    let p = i.value.data.bo.bytes;
                    if !p.is_null() {
                        libc::free(p.cast());
                        i.value.data.bo.bytes = ptr::null_mut();
                    }
                }
            }
        }
    }
}

fn c_string(s: &str) -> CString {
    // Interior NULs cannot be carried; cut the string there.
    let end = s.find('\0').unwrap_or(s.len());
    CString::new(&s[..end]).unwrap_or_default()
}

fn fill<const N: usize>(dst: &mut [c_char; N], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
}

impl InfoArray {
    fn new(items: &[(String, Val)]) -> InfoArray {
        let mut a = InfoArray {
            infos: Vec::with_capacity(items.len()),
            _strings: Vec::new(),
            _arrays: Vec::new(),
            _nested: Vec::new(),
            _procs: Vec::new(),
            _proc_arrays: Vec::new(),
        };
        for (k, v) in items {
            let mut info = pmix_info_t {
                key: [0; KEYLEN],
                flags: 0,
                value: pmix_value_t {
                    type_: 0,
                    data: pmix_value_data { _size: [0; 3] },
                },
            };
            fill(&mut info.key, k);
            let (t, d) = match v {
                Val::Str(s) => {
                    let c = c_string(s);
                    let p = c.as_ptr() as *mut c_char;
                    a._strings.push(c);
                    (PMIX_STRING, pmix_value_data { string: p })
                }
                Val::U32(x) => (PMIX_UINT32, pmix_value_data { uint32: *x }),
                Val::U16(x) => (PMIX_UINT16, pmix_value_data { uint16: *x }),
                Val::Rank(x) => (PMIX_PROC_RANK, pmix_value_data { uint32: *x }),
                Val::Bool(x) => (PMIX_BOOL, pmix_value_data { flag: *x }),
                Val::Infos(list) => {
                    let mut nested = InfoArray::new(list);
                    let mut arr = Box::new(pmix_data_array_t {
                        type_: PMIX_INFO,
                        size: nested.infos.len(),
                        array: nested.infos.as_mut_ptr().cast(),
                    });
                    let p: *mut pmix_data_array_t = &mut *arr;
                    a._arrays.push(arr);
                    a._nested.push(nested);
                    (PMIX_DATA_ARRAY, pmix_value_data { darray: p })
                }
                Val::Size(x) => (PMIX_SIZE, pmix_value_data { size: *x }),
                Val::Proc(ns, r) => {
                    let p = Box::new(proc_t(ns, *r));
                    let ptr = &*p as *const pmix_proc_t as u64;
                    a._procs.push(p);
                    // A pointer is one u64 on LP64 (the layouts test).
                    (PMIX_PROC, pmix_value_data { _size: [ptr, 0, 0] })
                }
                Val::Bytes(b) => {
                    // malloc'ed, as the library's own: it may take them (see `Drop`).
                    // SAFETY: malloc of at least one byte; NULL is checked below.
                    let p = unsafe { libc::malloc(b.len().max(1)) }.cast::<c_char>();
                    let size = if p.is_null() {
                        0
                    } else {
                        // SAFETY: p holds at least b.len() bytes, and does not overlap b.
                        unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len()) };
                        b.len()
                    };
                    let bo = pmix_byte_object_t { bytes: p, size };
                    (PMIX_BYTE_OBJECT, pmix_value_data { bo })
                }
                Val::Procs(list) => {
                    let mut procs: Vec<pmix_proc_t> =
                        list.iter().map(|(ns, r)| proc_t(ns, *r)).collect();
                    let mut arr = Box::new(pmix_data_array_t {
                        type_: PMIX_PROC,
                        size: procs.len(),
                        array: procs.as_mut_ptr().cast(),
                    });
                    let p: *mut pmix_data_array_t = &mut *arr;
                    a._arrays.push(arr);
                    a._proc_arrays.push(procs);
                    (PMIX_DATA_ARRAY, pmix_value_data { darray: p })
                }
            };
            info.value.type_ = t;
            info.value.data = d;
            a.infos.push(info);
        }
        a
    }
}

fn proc_t(nspace: &str, rank: u32) -> pmix_proc_t {
    let mut p = pmix_proc_t {
        nspace: [0; NSLEN],
        rank,
    };
    fill(&mut p.nspace, nspace);
    p
}

fn nspace_buf(nspace: &str) -> [c_char; NSLEN] {
    let mut b = [0; NSLEN];
    fill(&mut b, nspace);
    b
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

fn check(what: &str, rc: Status) -> Result<(), String> {
    if rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED {
        Ok(())
    } else {
        Err(format!("{what}: {} ({rc})", error_string(rc)))
    }
}

/// What the library asks of its host, delivered to the namespace's channel.
#[derive(Debug)]
pub enum Upcall {
    /// A local client connected (`PMIx_Init`).
    Connected {
        /// Its rank.
        rank: u32,
    },
    /// A local client called `PMIx_Finalize`.
    Finalized {
        /// Its rank.
        rank: u32,
    },
    /// A local client called `PMIx_Abort`.
    Abort {
        /// Its rank.
        rank: u32,
        /// The status it asked for.
        status: i32,
        /// Its message.
        message: String,
        /// The processes to terminate (rank [`PMIX_RANK_WILDCARD`]: a whole namespace);
        /// empty: the caller's whole job.
        procs: Vec<(String, u32)>,
        /// Where the answer goes (the library waits for it before it releases the caller).
        reply: Option<OpReply>,
    },
    /// Every local client entered a fence over the whole namespace: `data` is this host's
    /// contribution; answer with every host's contributions, concatenated.
    Fence {
        /// This host's blob.
        data: Vec<u8>,
        /// Where the answer goes.
        reply: ModexReply,
    },
    /// A local client wants the data of rank `rank` of namespace `nspace` (this job's, or
    /// one it connected to), which runs on another host.
    Dmodex {
        /// The namespace of the rank.
        nspace: String,
        /// The rank whose data is wanted.
        rank: u32,
        /// Where the answer goes.
        reply: ModexReply,
    },
    /// A local client asks for a new job (`PMIx_Spawn`: `MPI_Comm_spawn`).
    Spawn {
        /// The rank that asked.
        rank: u32,
        /// The applications, in order.
        apps: Vec<SpawnApp>,
        /// The job-level directives (key, value as text where it is text).
        job_info: Vec<(String, String)>,
        /// Where the new namespace goes.
        reply: SpawnReply,
    },
    /// Local clients connect to the processes `procs` (`PMIx_Connect`): every namespace named
    /// must be known to this server before the answer.
    Connect {
        /// The processes (rank [`PMIX_RANK_WILDCARD`]: the whole namespace).
        procs: Vec<(String, u32)>,
        /// Where the answer goes.
        reply: OpReply,
    },
    /// Every local participant entered a collective over `procs` that is not a fence over one
    /// whole namespace: a fence over part of a namespace or over several (Open MPI's
    /// `MPI_Comm_disconnect`), or `PMIx_Disconnect`. `data`: this server's contribution.
    Collective {
        /// The participants (rank [`PMIX_RANK_WILDCARD`]: the whole namespace).
        procs: Vec<(String, u32)>,
        /// This server's blob.
        data: Vec<u8>,
        /// Where the answer goes.
        reply: CollectiveReply,
    },
    /// Every local member entered `PMIx_Group_construct` or `PMIx_Group_destruct` of group
    /// `grpid` over `procs`: a collective like [`Upcall::Collective`], answered with the
    /// group's results (a context id when asked, every server's contribution).
    Group {
        /// Construct or destruct.
        op: GroupOp,
        /// The group's id (the name the members gave it).
        grpid: String,
        /// The members (rank [`PMIX_RANK_WILDCARD`]: the whole namespace).
        procs: Vec<(String, u32)>,
        /// This server's contribution (`PMIX_GROUP_ENDPT_DATA`: its members' endpoint data
        /// and the `PMIX_GROUP_INFO` they gave), opaque; empty for a destruct.
        data: Vec<u8>,
        /// `PMIX_GROUP_ASSIGN_CONTEXT_ID`: the members want a context id unique in the run.
        assign_context_id: bool,
        /// Where the answer goes.
        reply: GroupReply,
    },
    /// A local client publishes: `info` holds its data (key: the name, value: the port) and
    /// its directives (`pmix.range`, `pmix.persist`, and `pmix.euid` added by the library).
    Publish {
        /// Its rank.
        rank: u32,
        /// Data and directives, as passed.
        info: Vec<(String, InfoVal)>,
        /// The `pmix_data_type_t` of each entry of `info` (a published `PMIX_UINT8` goes back
        /// to the lookup as a `PMIX_UINT8`).
        types: Vec<u16>,
        /// Where the answer goes.
        reply: OpReply,
    },
    /// A local client withdraws names it published.
    Unpublish {
        /// Its rank.
        rank: u32,
        /// The names.
        keys: Vec<String>,
        /// Its directives.
        info: Vec<(String, InfoVal)>,
        /// Where the answer goes.
        reply: OpReply,
    },
    /// A local client asks what the library could not answer itself (`PMIx_Query_info`).
    /// The library does not say which client: the upcall goes to one job of the server.
    Query {
        /// The rank the library named (its own).
        rank: u32,
        /// The queries.
        queries: Vec<Query>,
        /// Where the answers go.
        reply: QueryReply,
    },
    /// A local client looks names up.
    Lookup {
        /// Its rank.
        rank: u32,
        /// The names.
        keys: Vec<String>,
        /// Its directives (`pmix.wait`, `pmix.timeout`, `pmix.range`, …).
        info: Vec<(String, InfoVal)>,
        /// Where the answer goes.
        reply: LookupReply,
    },
}

/// One query of a `PMIx_Query_info`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Query {
    /// The keys asked for (`PMIX_QUERY_NAMESPACES`, `PMIX_JOB_SIZE`, …).
    pub keys: Vec<String>,
    /// Its qualifiers (`PMIX_NSPACE`, …).
    pub qualifiers: Vec<(String, InfoVal)>,
}

/// The library's callback for a query, to be called once.
#[derive(Debug)]
pub struct QueryReply {
    cbfunc: unsafe extern "C" fn(
        Status,
        *mut pmix_info_t,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
    cbdata: *mut c_void,
}

// SAFETY: as for ModexReply: the library accepts the callback from any thread.
unsafe impl Send for QueryReply {}

unsafe extern "C" fn release_infos(p: *mut c_void) {
    if !p.is_null() {
        // SAFETY: p is the Box<InfoArray> leaked in `QueryReply::done`, released once by the
        // library when it is done with the answers.
        drop(unsafe { Box::from_raw(p.cast::<InfoArray>()) });
    }
}

impl QueryReply {
    /// Answers the query with `status` and `answers` (each a queried key and its value).
    /// They stay alive until the library releases them.
    pub fn done(self, status: Status, answers: &[(String, Val)]) {
        if FINALIZED.load(Ordering::SeqCst) {
            return;
        }
        let mut a = Box::new(InfoArray::new(answers));
        let (ptr, n) = if a.infos.is_empty() {
            (std::ptr::null_mut(), 0)
        } else {
            (a.infos.as_mut_ptr(), a.infos.len())
        };
        let keep = Box::into_raw(a).cast::<c_void>();
        // SAFETY: cbfunc/cbdata came from the library for exactly one call; the answers live
        // until it calls release_infos with `keep`.
        unsafe { (self.cbfunc)(status, ptr, n, self.cbdata, Some(release_infos), keep) };
    }
}

/// A value a client passed in a `pmix_info_t`, as far as Kauri reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InfoVal {
    /// `PMIX_STRING` (NULL reads as empty).
    Str(String),
    /// `PMIX_BOOL`.
    Bool(bool),
    /// Any integer type (`PMIX_INT`, `PMIX_UINT32`, `PMIX_DATA_RANGE`, `PMIX_PERSIST`, …).
    Int(i64),
    /// `PMIX_BYTE_OBJECT`: opaque bytes (Open MPI publishes its communicator-id exchange so).
    Bytes(Vec<u8>),
    /// Any other type: its `pmix_data_type_t`.
    Other(u16),
}

/// One application of a spawn, as the library passed it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SpawnApp {
    /// The executable.
    pub cmd: String,
    /// Its arguments, without `argv[0]`.
    pub args: Vec<String>,
    /// Variables for its environment (`NAME=VALUE` split).
    pub env: Vec<(String, String)>,
    /// Its working directory, if given.
    pub cwd: Option<String>,
    /// How many processes.
    pub maxprocs: u32,
    /// Its directives (key, value as text where it is text).
    pub info: Vec<(String, String)>,
}

/// The library's callback for a spawn, to be called once.
#[derive(Debug)]
pub struct SpawnReply {
    cbfunc: unsafe extern "C" fn(Status, *mut c_char, *mut c_void),
    cbdata: *mut c_void,
}

// SAFETY: as for ModexReply: the library accepts its callbacks from any thread.
unsafe impl Send for SpawnReply {}

impl SpawnReply {
    /// Tells the library the spawn's outcome: the new namespace, or an error status.
    pub fn reply(self, status: Status, nspace: &str) {
        if FINALIZED.load(Ordering::SeqCst) {
            return;
        }
        let mut ns = nspace_buf(nspace);
        // SAFETY: cbfunc/cbdata came from the library for exactly one call; the namespace
        // buffer is valid for the call (the library copies it).
        unsafe { (self.cbfunc)(status, ns.as_mut_ptr(), self.cbdata) };
    }
}

/// The library's callback for an operation with no data back (publish, unpublish), to be
/// called once.
#[derive(Debug)]
pub struct OpReply {
    cbfunc: unsafe extern "C" fn(Status, *mut c_void),
    cbdata: *mut c_void,
}

// SAFETY: as for ModexReply: the library accepts the callback from any thread.
unsafe impl Send for OpReply {}

impl OpReply {
    /// Completes the operation with `status`.
    pub fn done(self, status: Status) {
        if FINALIZED.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: cbfunc/cbdata came from the library for exactly one call.
        unsafe { (self.cbfunc)(status, self.cbdata) };
    }
}

/// How a collective is answered: a fence hands the library every contribution, a disconnect
/// only a status, a group operation its results.
#[derive(Debug)]
pub enum CollectiveReply {
    /// `fence_nb`.
    Fence(ModexReply),
    /// `disconnect`.
    Op(OpReply),
    /// `group`.
    Group(GroupReply),
}

impl CollectiveReply {
    /// Answers the collective: `data` holds every server's contribution, `context_id` the
    /// context id the run gave it (a group construct that asked for one).
    pub fn reply(self, status: Status, data: Vec<u8>, context_id: Option<u64>) {
        match self {
            CollectiveReply::Fence(r) => r.reply(status, data),
            CollectiveReply::Op(r) => r.done(status),
            CollectiveReply::Group(r) => r.done(status, data, context_id),
        }
    }
}

/// A group operation (`pmix_group_operation_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupOp {
    /// `PMIX_GROUP_CONSTRUCT`.
    Construct,
    /// `PMIX_GROUP_DESTRUCT`.
    Destruct,
}

impl GroupOp {
    /// From the C value (`PMIX_GROUP_CONSTRUCT` is 0, `PMIX_GROUP_DESTRUCT` 1).
    pub fn from_c(op: c_int) -> Option<GroupOp> {
        match op {
            0 => Some(GroupOp::Construct),
            1 => Some(GroupOp::Destruct),
            _ => None,
        }
    }

    /// Its name, as a word.
    pub fn name(self) -> &'static str {
        match self {
            GroupOp::Construct => "construct",
            GroupOp::Destruct => "destruct",
        }
    }
}

/// `PMIX_GROUP_CONTEXT_ID`: the context id given to a group (`size_t`).
pub const GROUP_CONTEXT_ID: &str = "pmix.grp.ctxid";
/// `PMIX_GROUP_ASSIGN_CONTEXT_ID`: a construct asks for a context id (`bool`).
pub const GROUP_ASSIGN_CONTEXT_ID: &str = "pmix.grp.actxid";
/// `PMIX_GROUP_ENDPT_DATA`: a server's contribution to a construct, and the answer with
/// every server's (`pmix_byte_object_t`).
pub const GROUP_ENDPT_DATA: &str = "pmix.grp.endpt";
/// `PMIX_GROUP_LOCAL_ONLY`: the operation involves this host's processes alone, and they have
/// all joined it (added by the library).
pub const GROUP_LOCAL_ONLY: &str = "pmix.grp.lcl";
/// `PMIX_GROUP_MEMBERSHIP`: the members of a group (`pmix_data_array_t` of `pmix_proc_t`).
pub const GROUP_MEMBERSHIP: &str = "pmix.grp.mbrs";

/// The results of a completed group operation, as the library reads them: for a construct,
/// the context id (when one was given), every server's contribution concatenated (when there
/// is any: OpenPMIx 4.2 unpacks it as one sequence of tagged blobs and stores them as it
/// stores a fence's), and the members; nothing for a destruct.
pub fn group_results(
    op: GroupOp,
    members: &[(String, u32)],
    data: Vec<u8>,
    context_id: Option<u64>,
) -> Vec<(String, Val)> {
    let mut out = Vec::new();
    if op == GroupOp::Destruct {
        return out;
    }
    if let Some(id) = context_id {
        out.push((GROUP_CONTEXT_ID.to_string(), Val::Size(id as usize)));
    }
    if !data.is_empty() {
        out.push((GROUP_ENDPT_DATA.to_string(), Val::Bytes(data)));
    }
    out.push((GROUP_MEMBERSHIP.to_string(), Val::Procs(members.to_vec())));
    out
}

/// The library's callback for a group operation, to be called once.
#[derive(Debug)]
pub struct GroupReply {
    op: GroupOp,
    members: Vec<(String, u32)>,
    cbfunc: unsafe extern "C" fn(
        Status,
        *mut pmix_info_t,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
    cbdata: *mut c_void,
}

// SAFETY: as for ModexReply: the library accepts the callback from any thread (it shifts
// the work into its progress thread).
unsafe impl Send for GroupReply {}

impl GroupReply {
    /// Completes the operation with `status` and its results ([`group_results`]), which stay
    /// alive until the library releases them.
    pub fn done(self, status: Status, data: Vec<u8>, context_id: Option<u64>) {
        if FINALIZED.load(Ordering::SeqCst) {
            return;
        }
        let results = if status == PMIX_SUCCESS {
            group_results(self.op, &self.members, data, context_id)
        } else {
            Vec::new()
        };
        let mut a = Box::new(InfoArray::new(&results));
        let (ptr, n) = if a.infos.is_empty() {
            (ptr::null_mut(), 0)
        } else {
            (a.infos.as_mut_ptr(), a.infos.len())
        };
        let keep = Box::into_raw(a).cast::<c_void>();
        // SAFETY: cbfunc/cbdata came from the library for exactly one call; the results live
        // until it calls release_infos with `keep`.
        unsafe { (self.cbfunc)(status, ptr, n, self.cbdata, Some(release_infos), keep) };
    }
}

/// The library's callback for a lookup, to be called once.
#[derive(Debug)]
pub struct LookupReply {
    cbfunc: unsafe extern "C" fn(Status, *mut pmix_pdata_t, usize, *mut c_void),
    cbdata: *mut c_void,
}

// SAFETY: as for ModexReply: the library accepts the callback from any thread.
unsafe impl Send for LookupReply {}

impl LookupReply {
    /// Completes the lookup: `found` holds each name and its value as the name table keeps
    /// it (see [`crate::proto::pmix::names`]). A typed value goes back with its type and its
    /// publisher; a string or byte object as published, said to come from `publisher` (a
    /// namespace) and rank `PMIX_RANK_UNDEF` (the table does not keep who published those).
    pub fn done(self, status: Status, found: &[(String, String)], publisher: &str) {
        use crate::proto::pmix::names::{decode_bytes, decode_scalar};
        if FINALIZED.load(Ordering::SeqCst) {
            return;
        }
        enum Kept {
            Str(CString),
            Bytes(Vec<u8>),
            Scalar(u16, i64),
        }
        let values: Vec<(Kept, pmix_proc_t)> = found
            .iter()
            .map(|(_, p)| {
                if let Some(s) = decode_scalar(p) {
                    let proc_ = proc_t(&s.nspace, s.rank);
                    (Kept::Scalar(s.type_, s.value), proc_)
                } else if let Some(b) = decode_bytes(p) {
                    (Kept::Bytes(b), proc_t(publisher, PMIX_RANK_UNDEF))
                } else {
                    (Kept::Str(c_string(p)), proc_t(publisher, PMIX_RANK_UNDEF))
                }
            })
            .collect();
        let mut data: Vec<pmix_pdata_t> = found
            .iter()
            .zip(&values)
            .map(|((k, _), (v, proc_))| {
                let value = match v {
                    Kept::Str(p) => pmix_value_t {
                        type_: PMIX_STRING,
                        data: pmix_value_data {
                            string: p.as_ptr() as *mut c_char,
                        },
                    },
                    Kept::Bytes(b) => pmix_value_t {
                        type_: PMIX_BYTE_OBJECT,
                        data: pmix_value_data {
                            bo: pmix_byte_object_t {
                                bytes: b.as_ptr() as *mut c_char,
                                size: b.len(),
                            },
                        },
                    },
                    Kept::Scalar(t, x) => scalar_value(*t, *x),
                };
                let mut d = pmix_pdata_t {
                    proc_: *proc_,
                    key: [0; KEYLEN],
                    value,
                };
                fill(&mut d.key, k);
                d
            })
            .collect();
        let (ptr, n) = if data.is_empty() {
            (ptr::null_mut(), 0)
        } else {
            (data.as_mut_ptr(), data.len())
        };
        // SAFETY: cbfunc/cbdata came from the library for exactly one call; the array and the
        // strings it points to live until the call returns, and the library packs them into
        // its reply during the call (it keeps no pointer to them).
        unsafe { (self.cbfunc)(status, ptr, n, self.cbdata) };
    }
}

/// A boolean or integer value of type `t` (as [`read_infos`] read it into an `i64`) back in
/// the union member its type names.
fn scalar_value(t: u16, x: i64) -> pmix_value_t {
    let mut data = pmix_value_data { _size: [0; 3] };
    match t {
        PMIX_BOOL => data.flag = x != 0,
        PMIX_INT => data.integer = x as c_int,
        PMIX_INT8 => data.int8 = x as i8,
        PMIX_INT16 => data.int16 = x as i16,
        PMIX_INT32 => data.int32 = x as i32,
        PMIX_INT64 => data.int64 = x,
        PMIX_UINT | PMIX_UINT32 => data.uint32 = x as u32,
        PMIX_UINT8 | PMIX_PERSIST | PMIX_DATA_RANGE => data.uint8 = x as u8,
        PMIX_UINT16 => data.uint16 = x as u16,
        PMIX_UINT64 => data.uint64 = x as u64,
        PMIX_SIZE => data.size = x as usize,
        _ => data.int64 = x,
    }
    pmix_value_t { type_: t, data }
}

/// The library's callback for a fence or a direct-modex request, to be called once.
#[derive(Debug)]
pub struct ModexReply {
    cbfunc: unsafe extern "C" fn(
        Status,
        *const c_char,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
    cbdata: *mut c_void,
}

// SAFETY: the callback and its data belong to the library, which accepts the call from any
// thread (it shifts the work into its progress thread).
unsafe impl Send for ModexReply {}

unsafe extern "C" fn release_blob(p: *mut c_void) {
    if !p.is_null() {
        // SAFETY: p is the Box<Vec<u8>> leaked in `ModexReply::reply`, released once by the
        // library when it is done with the data.
        drop(unsafe { Box::from_raw(p.cast::<Vec<u8>>()) });
    }
}

impl ModexReply {
    /// Hands `data` (every host's blob, or one rank's data) to the library. The bytes stay
    /// alive until the library releases them.
    pub fn reply(self, status: Status, data: Vec<u8>) {
        if FINALIZED.load(Ordering::SeqCst) {
            return;
        }
        let blob = Box::new(data);
        let (ptr, len) = if blob.is_empty() {
            (ptr::null(), 0)
        } else {
            (blob.as_ptr().cast::<c_char>(), blob.len())
        };
        let raw = Box::into_raw(blob).cast::<c_void>();
        // SAFETY: cbfunc/cbdata came from the library for exactly one call; ptr/len describe
        // the heap bytes of `raw`, which stay valid until the library calls release_blob(raw).
        unsafe { (self.cbfunc)(status, ptr, len, self.cbdata, Some(release_blob), raw) };
    }
}

type Routes = Mutex<HashMap<String, mpsc::UnboundedSender<Upcall>>>;

fn routes() -> &'static Routes {
    static R: OnceLock<Routes> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Sends the upcalls of namespace `nspace` to `tx`, unless some channel takes them already;
/// true when this one does now.
pub fn route_if_none(nspace: &str, tx: mpsc::UnboundedSender<Upcall>) -> bool {
    match routes().lock() {
        Ok(mut r) if !r.contains_key(nspace) => {
            r.insert(nspace.to_string(), tx);
            true
        }
        _ => false,
    }
}

/// Sends the upcalls of namespace `nspace` to `tx` (replacing an earlier route).
pub fn route(nspace: &str, tx: mpsc::UnboundedSender<Upcall>) {
    if let Ok(mut r) = routes().lock() {
        r.insert(nspace.to_string(), tx);
    }
}

/// Stops routing namespace `nspace`.
pub fn unroute(nspace: &str) {
    if let Ok(mut r) = routes().lock() {
        r.remove(nspace);
    }
}

fn deliver(nspace: &str, up: Upcall) -> bool {
    match routes().lock() {
        Ok(r) => r.get(nspace).is_some_and(|tx| tx.send(up).is_ok()),
        Err(_) => false,
    }
}

/// Reads a `pmix_proc_t` the library passed in.
///
/// # Safety
/// `p` must be NULL or point to a valid `pmix_proc_t`.
unsafe fn read_proc(p: *const pmix_proc_t) -> Option<(String, u32)> {
    if p.is_null() {
        return None;
    }
    // SAFETY: p is non-NULL and valid per this function's contract.
    let p = unsafe { &*p };
    let bytes: Vec<u8> = p
        .nspace
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some((String::from_utf8_lossy(&bytes).into_owned(), p.rank))
}

unsafe extern "C" fn up_connected(
    proc_: *const pmix_proc_t,
    _obj: *mut c_void,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    deliver(&ns, Upcall::Connected { rank });
    if let Some(cb) = cbfunc {
        // SAFETY: the library's own completion callback and data, called once.
        unsafe { cb(PMIX_SUCCESS, cbdata) };
    }
    PMIX_SUCCESS
}

unsafe extern "C" fn up_connected2(
    proc_: *const pmix_proc_t,
    obj: *mut c_void,
    _info: *mut pmix_info_t,
    _ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: same arguments as client_connected, passed through.
    unsafe { up_connected(proc_, obj, cbfunc, cbdata) }
}

unsafe extern "C" fn up_finalized(
    proc_: *const pmix_proc_t,
    _obj: *mut c_void,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    if let Some((ns, rank)) = unsafe { read_proc(proc_) } {
        deliver(&ns, Upcall::Finalized { rank });
    }
    if let Some(cb) = cbfunc {
        // SAFETY: the library's own completion callback and data, called once.
        unsafe { cb(PMIX_SUCCESS, cbdata) };
    }
    PMIX_SUCCESS
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_abort(
    proc_: *const pmix_proc_t,
    _obj: *mut c_void,
    status: c_int,
    msg: *const c_char,
    procs: *mut pmix_proc_t,
    nprocs: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes nprocs valid procs (or NULL).
    let procs = unsafe { read_procs(procs, nprocs) };
    let message = if msg.is_null() {
        String::new()
    } else {
        // SAFETY: msg is a NUL-terminated string owned by the library for this call.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    if !procs.is_empty() {
        // Some processes: answered once the front end has signalled them.
        deliver(
            &ns,
            Upcall::Abort {
                rank,
                status,
                message,
                procs,
                reply: cbfunc.map(|cbfunc| OpReply { cbfunc, cbdata }),
            },
        );
        return PMIX_SUCCESS;
    }
    deliver(
        &ns,
        Upcall::Abort {
            rank,
            status,
            message,
            procs,
            reply: None,
        },
    );
    // The client is released and exits by itself; the job's teardown is under way.
    if let Some(cb) = cbfunc {
        // SAFETY: the library's own completion callback and data, called once.
        unsafe { cb(PMIX_SUCCESS, cbdata) };
    }
    PMIX_SUCCESS
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_fence(
    procs: *const pmix_proc_t,
    nprocs: usize,
    _info: *const pmix_info_t,
    _ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cbfunc: pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes nprocs valid entries (or NULL).
    let procs = unsafe { read_procs(procs, nprocs) };
    let blob = if data.is_null() || ndata == 0 {
        Vec::new()
    } else {
        // SAFETY: data points to ndata bytes owned by the library for this call; copied.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), ndata) }.to_vec()
    };
    let reply = ModexReply { cbfunc, cbdata };
    let up = match procs.as_slice() {
        // The whole of one namespace: the job's own fence, a tree allgather.
        [(_, PMIX_RANK_WILDCARD)] => Upcall::Fence { data: blob, reply },
        [] => return PMIX_ERR_NOT_SUPPORTED,
        _ => Upcall::Collective {
            procs: procs.clone(),
            data: blob,
            reply: CollectiveReply::Fence(reply),
        },
    };
    if deliver_any(&procs, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

/// Reads `n` `pmix_proc_t`s the library passed in.
///
/// # Safety
/// `p` must be NULL or point to `n` valid `pmix_proc_t`s.
unsafe fn read_procs(p: *const pmix_proc_t, n: usize) -> Vec<(String, u32)> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: p points to n valid entries per this function's contract.
    (0..n)
        .filter_map(|i| unsafe { read_proc(p.add(i)) })
        .collect()
}

/// Delivers `up` to the first of `procs`' namespaces this process routes.
fn deliver_any(procs: &[(String, u32)], up: Upcall) -> bool {
    let Ok(r) = routes().lock() else { return false };
    procs
        .iter()
        .find_map(|(ns, _)| r.get(ns))
        .is_some_and(|tx| tx.send(up).is_ok())
}

/// Delivers `up` to the job that registered first of those this server serves (the
/// upcalls that do not name a client: the library passes them its own name).
fn deliver_first(up: Upcall) -> bool {
    let Ok(r) = routes().lock() else { return false };
    r.iter()
        .min_by(|a, b| a.0.cmp(b.0))
        .is_some_and(|(_, tx)| tx.send(up).is_ok())
}

/// Reads a C string the library passed in (`None` for NULL).
///
/// # Safety
/// `p` must be NULL or a valid NUL-terminated string.
unsafe fn read_str(p: *const c_char) -> Option<String> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Reads a NULL-terminated array of C strings.
///
/// # Safety
/// `p` must be NULL or a valid NULL-terminated array of valid C strings.
unsafe fn read_argv(p: *const *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if p.is_null() {
        return out;
    }
    for i in 0.. {
        // SAFETY: the array is NULL-terminated; entries before the NULL are valid strings.
        let s = unsafe { *p.add(i) };
        if s.is_null() {
            break;
        }
        // SAFETY: a valid string, per the contract.
        out.extend(unsafe { read_str(s) });
    }
    out
}

/// Directives as text: each key with its value written out where it is a string, a boolean
/// or an integer (what a directive a launcher acts on holds), empty otherwise.
fn infos_text(infos: Vec<(String, InfoVal)>) -> Vec<(String, String)> {
    infos
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                InfoVal::Str(s) => s,
                InfoVal::Bool(b) => b.to_string(),
                InfoVal::Int(n) => n.to_string(),
                InfoVal::Bytes(_) | InfoVal::Other(_) => String::new(),
            };
            (k, text)
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_spawn(
    proc_: *const pmix_proc_t,
    job_info: *const pmix_info_t,
    ninfo: usize,
    apps: *const pmix_app_t,
    napps: usize,
    cbfunc: pmix_spawn_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    if apps.is_null() || napps == 0 {
        return PMIX_ERR_BAD_PARAM;
    }
    let apps = (0..napps)
        .map(|i| {
            // SAFETY: apps points to napps valid entries, valid for this call; copied.
            let a = unsafe { &*apps.add(i) };
            // SAFETY: the library's strings and arrays, valid for this call.
            let (cmd, argv, env, cwd, info) = unsafe {
                (
                    read_str(a.cmd).unwrap_or_default(),
                    read_argv(a.argv),
                    read_argv(a.env),
                    read_str(a.cwd),
                    infos_text(read_infos(a.info, a.ninfo)),
                )
            };
            SpawnApp {
                cmd,
                args: argv.into_iter().skip(1).collect(),
                env: env
                    .iter()
                    .filter_map(|e| e.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                cwd: cwd.filter(|c| !c.is_empty()),
                maxprocs: a.maxprocs.max(0) as u32,
                info,
            }
        })
        .collect();
    // SAFETY: the library's directives, valid for this call.
    let job_info = infos_text(unsafe { read_infos(job_info, ninfo) });
    let reply = SpawnReply { cbfunc, cbdata };
    let up = Upcall::Spawn {
        rank,
        apps,
        job_info,
        reply,
    };
    if deliver(&ns, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

unsafe extern "C" fn up_connect(
    procs: *const pmix_proc_t,
    nprocs: usize,
    _info: *const pmix_info_t,
    _ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes nprocs valid entries (or NULL).
    let procs = unsafe { read_procs(procs, nprocs) };
    let reply = OpReply { cbfunc, cbdata };
    if deliver_any(
        &procs,
        Upcall::Connect {
            procs: procs.clone(),
            reply,
        },
    ) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

unsafe extern "C" fn up_disconnect(
    procs: *const pmix_proc_t,
    nprocs: usize,
    _info: *const pmix_info_t,
    _ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes nprocs valid entries (or NULL).
    let procs = unsafe { read_procs(procs, nprocs) };
    let up = Upcall::Collective {
        procs: procs.clone(),
        data: Vec::new(),
        reply: CollectiveReply::Op(OpReply { cbfunc, cbdata }),
    };
    if deliver_any(&procs, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

/// Directives of a group operation Kauri accepts without acting on them itself: the library
/// handles the timeout, local-only groups and the embedded barrier, and passes the rest up.
const GROUP_DIRECTIVES_KNOWN: &[&str] = &[
    GROUP_ASSIGN_CONTEXT_ID,
    GROUP_ENDPT_DATA,
    "pmix.grp.notterm", // PMIX_GROUP_NOTIFY_TERMINATION: every rank's end is told anyway
    "pmix.grp.info",    // PMIX_GROUP_INFO: inside the library's blob
    "pmix.grp.lcl",     // PMIX_GROUP_LOCAL_ONLY: the library's own
    "pmix.grp.opt",     // PMIX_GROUP_OPTIONAL
    "pmix.grp.ftcoll",  // PMIX_GROUP_FT_COLLECTIVE
    "pmix.grp.ldr",     // PMIX_GROUP_LEADER
    "pmix.embed.barrier",
    "pmix.timeout",
    "pmix.sorted.parr", // PMIX_SORTED_PROC_ARRAY, added by the library
    "pmix.loc.col.st",  // PMIX_LOCAL_COLLECTIVE_STATUS, added by the library
];

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_group(
    op: c_int,
    grp: *mut c_char,
    procs: *const pmix_proc_t,
    nprocs: usize,
    directives: *const pmix_info_t,
    ndirs: usize,
    cbfunc: pmix_info_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let (Some(cbfunc), Some(op)) = (cbfunc, GroupOp::from_c(op)) else {
        return PMIX_ERR_BAD_PARAM;
    };
    // SAFETY: the library passes its group id as a C string (or NULL), nprocs valid procs
    // and ndirs valid directives, all for this call; copied.
    let (grpid, procs, dirs) = unsafe {
        (
            read_str(grp).unwrap_or_default(),
            read_procs(procs, nprocs),
            read_infos(directives, ndirs),
        )
    };
    if procs.is_empty() {
        return PMIX_ERR_BAD_PARAM;
    }
    let mut data = Vec::new();
    let mut assign_context_id = false;
    let mut local_only = false;
    for (k, v) in dirs {
        match (k.as_str(), v) {
            (GROUP_ENDPT_DATA, InfoVal::Bytes(b)) => data = b,
            (GROUP_LOCAL_ONLY, InfoVal::Bool(b)) => local_only = b,
            (GROUP_LOCAL_ONLY, _) => local_only = true,
            // PMIX_INFO_TRUE: a bool, or no value at all (PMIX_UNDEF) meaning true.
            (GROUP_ASSIGN_CONTEXT_ID, InfoVal::Bool(b)) => assign_context_id = b,
            (GROUP_ASSIGN_CONTEXT_ID, _) => assign_context_id = true,
            (k, v) if !GROUP_DIRECTIVES_KNOWN.contains(&k) => {
                tracing::debug!(key = k, value = ?v, "PMIx group: directive not acted on");
            }
            _ => {}
        }
    }
    // The library found every member on this host and all of them here: the operation is
    // complete, and it only tells the host. Done at once, as PRRTE does (OpenPMIx 5.0's
    // destruct of a local group then goes on to call the upcall a second time with the same
    // tracker, which it frees at the first completion: answering that one would touch freed
    // memory and hang the library's progress thread).
    if local_only && !(op == GroupOp::Construct && assign_context_id) {
        tracing::debug!(
            grpid,
            op = op.name(),
            "PMIx group operation local to this host: done"
        );
        return PMIX_OPERATION_SUCCEEDED;
    }
    let reply = GroupReply {
        op,
        members: procs.clone(),
        cbfunc,
        cbdata,
    };
    let up = Upcall::Group {
        op,
        grpid,
        procs: procs.clone(),
        data,
        assign_context_id,
        reply,
    };
    if deliver_any(&procs, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

unsafe extern "C" fn up_dmodex(
    proc_: *const pmix_proc_t,
    _info: *const pmix_info_t,
    _ninfo: usize,
    cbfunc: pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    let reply = ModexReply { cbfunc, cbdata };
    let up = Upcall::Dmodex {
        nspace: ns.clone(),
        rank,
        reply,
    };
    if deliver(&ns, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

/// Reads `n` `pmix_info_t`s the library passed in.
///
/// # Safety
/// `info` must be NULL or point to `n` valid entries.
unsafe fn read_infos(info: *const pmix_info_t, n: usize) -> Vec<(String, InfoVal)> {
    if info.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: info points to n valid entries per this function's contract.
    let infos = unsafe { std::slice::from_raw_parts(info, n) };
    infos
        .iter()
        .map(|i| {
            let key: Vec<u8> = i
                .key
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            let d = &i.value.data;
            // SAFETY: each arm reads the union member the value's type says is there.
            let v = unsafe {
                match i.value.type_ {
                    PMIX_STRING if d.string.is_null() => InfoVal::Str(String::new()),
                    PMIX_STRING => {
                        InfoVal::Str(CStr::from_ptr(d.string).to_string_lossy().into_owned())
                    }
                    PMIX_BOOL => InfoVal::Bool(d.flag),
                    PMIX_INT => InfoVal::Int(i64::from(d.integer)),
                    PMIX_INT8 => InfoVal::Int(i64::from(d.int8)),
                    PMIX_INT16 => InfoVal::Int(i64::from(d.int16)),
                    PMIX_INT32 => InfoVal::Int(i64::from(d.int32)),
                    PMIX_INT64 => InfoVal::Int(d.int64),
                    PMIX_UINT | PMIX_UINT32 => InfoVal::Int(i64::from(d.uint32)),
                    PMIX_UINT8 | PMIX_PERSIST | PMIX_DATA_RANGE => InfoVal::Int(i64::from(d.uint8)),
                    PMIX_UINT16 => InfoVal::Int(i64::from(d.uint16)),
                    PMIX_UINT64 => InfoVal::Int(d.uint64 as i64),
                    PMIX_SIZE => InfoVal::Int(d.size as i64),
                    PMIX_BYTE_OBJECT if d.bo.bytes.is_null() => InfoVal::Bytes(Vec::new()),
                    PMIX_BYTE_OBJECT => InfoVal::Bytes(
                        std::slice::from_raw_parts(d.bo.bytes.cast::<u8>(), d.bo.size).to_vec(),
                    ),
                    t => InfoVal::Other(t),
                }
            };
            (String::from_utf8_lossy(&key).into_owned(), v)
        })
        .collect()
}

/// Reads a NULL-terminated array of C strings (`char **keys`).
///
/// # Safety
/// `keys` must be NULL or a NULL-terminated array of valid C strings.
unsafe fn read_keys(keys: *mut *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if keys.is_null() {
        return out;
    }
    let mut i = 0;
    loop {
        // SAFETY: the array is NULL-terminated per this function's contract.
        let k = unsafe { *keys.add(i) };
        if k.is_null() {
            return out;
        }
        // SAFETY: k is a valid C string per this function's contract.
        out.push(unsafe { CStr::from_ptr(k) }.to_string_lossy().into_owned());
        i += 1;
    }
}

unsafe extern "C" fn up_publish(
    proc_: *const pmix_proc_t,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes ninfo valid entries.
    let types = if info.is_null() || ninfo == 0 {
        Vec::new()
    } else {
        // SAFETY: as for read_infos.
        unsafe { std::slice::from_raw_parts(info, ninfo) }
            .iter()
            .map(|i| i.value.type_)
            .collect()
    };
    // SAFETY: the library passes ninfo valid entries.
    let info = unsafe { read_infos(info, ninfo) };
    let reply = OpReply { cbfunc, cbdata };
    let up = Upcall::Publish {
        rank,
        info,
        types,
        reply,
    };
    if deliver(&ns, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

unsafe extern "C" fn up_unpublish(
    proc_: *const pmix_proc_t,
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes a NULL-terminated key array (or NULL) and ninfo entries.
    let (keys, info) = unsafe { (read_keys(keys), read_infos(info, ninfo)) };
    let reply = OpReply { cbfunc, cbdata };
    let up = Upcall::Unpublish {
        rank,
        keys,
        info,
        reply,
    };
    if deliver(&ns, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

unsafe extern "C" fn up_lookup(
    proc_: *const pmix_proc_t,
    keys: *mut *mut c_char,
    info: *const pmix_info_t,
    ninfo: usize,
    cbfunc: pmix_lookup_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    let Some(cbfunc) = cbfunc else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    // SAFETY: the library passes a NULL-terminated key array (or NULL) and ninfo entries.
    let (keys, info) = unsafe { (read_keys(keys), read_infos(info, ninfo)) };
    let reply = LookupReply { cbfunc, cbdata };
    let up = Upcall::Lookup {
        rank,
        keys,
        info,
        reply,
    };
    if deliver(&ns, up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

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
unsafe fn unsupported(upcall: &'static str, proc_: *const pmix_proc_t) -> Status {
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

/// `PMIX_LOG_STDERR`, `PMIX_LOG_STDOUT`: a client's text for the launcher's standard error or
/// output.
const LOG_STDERR: &str = "pmix.log.stderr";
const LOG_STDOUT: &str = "pmix.log.stdout";

/// The text of a `PMIx_Log` request for kauri's standard streams: (to stderr, text) for each
/// `PMIX_LOG_STDERR`/`PMIX_LOG_STDOUT` entry, in order; other channels are not kauri's.
fn log_lines(data: &[(String, InfoVal)]) -> Vec<(bool, String)> {
    data.iter()
        .filter_map(|(k, v)| match (k.as_str(), v) {
            (LOG_STDERR, InfoVal::Str(t)) => Some((true, t.clone())),
            (LOG_STDOUT, InfoVal::Str(t)) => Some((false, t.clone())),
            _ => None,
        })
        .collect()
}

/// `PMIx_Log` from a client, as OpenPMIx 5's server library passes it up: text for the
/// standard streams is written on kauri's (Open MPI 5 sends its error reports so:
/// "An error occurred in MPI_Send … MPI_ERRORS_ARE_FATAL", which mpirun prints and which were
/// lost under kauri); a request with nothing for them is not supported. Answered from a
/// thread of its own: the library may hold its logging lock while it calls this.
unsafe extern "C" fn up_log(
    _client: *const pmix_proc_t,
    data: *const pmix_info_t,
    ndata: usize,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) {
    // SAFETY: the library passes ndata valid entries for this call; copied.
    let lines = log_lines(&unsafe { read_infos(data, ndata) });
    let status = if lines.is_empty() {
        PMIX_ERR_NOT_SUPPORTED
    } else {
        for (to_stderr, text) in lines {
            let mut t = text;
            if !t.ends_with('\n') {
                t.push('\n');
            }
            if to_stderr {
                crate::console::err(&t);
            } else {
                crate::console::out(&t);
            }
        }
        PMIX_SUCCESS
    };
    let Some(cb) = cbfunc else { return };
    struct Answer(pmix_op_cbfunc_t, *mut c_void);
    // SAFETY: cbdata is the library's token, only handed back to it; the library shifts the
    // callback into its own thread.
    unsafe impl Send for Answer {}
    let answer = Answer(Some(cb), cbdata);
    let _ = std::thread::Builder::new()
        .name("pmix-log".into())
        .spawn(move || {
            let a = answer;
            if let Some(cb) = a.0 {
                // SAFETY: cb and its token came from the library for this request, answered once.
                unsafe { cb(status, a.1) };
            }
        });
}

unsafe extern "C" fn up_notify_event(
    _code: Status,
    source: *const pmix_proc_t,
    _range: u8,
    _info: *mut pmix_info_t,
    _ninfo: usize,
    _cbfunc: pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid source (or NULL).
    unsafe { unsupported("notify_event", source) }
}

/// `pmix_query_t`.
#[repr(C)]
struct pmix_query_t {
    keys: *mut *mut c_char,
    qualifiers: *mut pmix_info_t,
    nqual: usize,
}

unsafe extern "C" fn up_query(
    proct: *mut pmix_proc_t,
    queries: *mut c_void,
    nqueries: usize,
    cbfunc: *const c_void,
    cbdata: *mut c_void,
) -> Status {
    // The library passes its own name, not the client's (OpenPMIx 4.2, `request_help`).
    // SAFETY: the library passes a valid proc (or NULL).
    let rank = unsafe { read_proc(proct) }.map_or(PMIX_RANK_WILDCARD, |(_, r)| r);
    if cbfunc.is_null() {
        return PMIX_ERROR;
    }
    let mut list = Vec::with_capacity(nqueries);
    let qs: &[pmix_query_t] = if queries.is_null() || nqueries == 0 {
        &[]
    } else {
        // SAFETY: the library passes nqueries valid queries.
        unsafe { std::slice::from_raw_parts(queries.cast::<pmix_query_t>(), nqueries) }
    };
    for q in qs {
        let mut keys = Vec::new();
        let mut k = q.keys;
        // SAFETY: keys is a NULL-terminated argv of NUL-terminated strings (or NULL).
        while !k.is_null() && !unsafe { *k }.is_null() {
            keys.push(unsafe { CStr::from_ptr(*k) }.to_string_lossy().into_owned());
            k = unsafe { k.add(1) };
        }
        list.push(Query {
            keys,
            // SAFETY: qualifiers holds nqual valid infos (or is NULL).
            qualifiers: unsafe { read_infos(q.qualifiers, q.nqual) },
        });
    }
    // SAFETY: the library's info callback, as pmix_info_cbfunc_t.
    let cbfunc = unsafe {
        std::mem::transmute::<
            *const c_void,
            unsafe extern "C" fn(
                Status,
                *mut pmix_info_t,
                usize,
                *mut c_void,
                pmix_release_cbfunc_t,
                *mut c_void,
            ),
        >(cbfunc)
    };
    let up = Upcall::Query {
        rank,
        queries: list,
        reply: QueryReply { cbfunc, cbdata },
    };
    if deliver_first(up) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_SUPPORTED
    }
}

unsafe extern "C" fn up_allocate(
    client: *const pmix_proc_t,
    _directive: u8,
    _data: *const pmix_info_t,
    _ndata: usize,
    _cbfunc: *const c_void,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    unsafe { unsupported("allocate", client) }
}

unsafe extern "C" fn up_job_control(
    requestor: *const pmix_proc_t,
    _targets: *const pmix_proc_t,
    _ntargets: usize,
    directives: *const pmix_info_t,
    ndirs: usize,
    cbfunc: *const c_void,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes ndirs valid entries.
    let dirs = unsafe { read_infos(directives, ndirs) };
    let status = crate::proto::pmix::control::answer(&dirs);
    if status != PMIX_SUCCESS || cbfunc.is_null() {
        // SAFETY: the library passes a valid proc (or NULL).
        return unsafe { unsupported("job_control", requestor) };
    }
    // SAFETY: the module's job_control slot takes a pmix_info_cbfunc_t, which is what the
    // library passed as this pointer.
    let cbfunc: unsafe extern "C" fn(
        Status,
        *mut pmix_info_t,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ) = unsafe { std::mem::transmute(cbfunc) };
    tracing::debug!(
        ?dirs,
        "a PMIx job-control request that only informs: served"
    );
    // Answered from another thread, after the upcall has returned, as every other reply is:
    // no library version sees its callback run inside its own call to the host.
    let reply = QueryReply { cbfunc, cbdata };
    match std::thread::Builder::new()
        .name("kauri-pmix-jctrl".into())
        .spawn(move || reply.done(PMIX_SUCCESS, &[]))
    {
        Ok(_) => PMIX_SUCCESS,
        Err(_) => PMIX_ERROR,
    }
}

unsafe extern "C" fn up_monitor(
    requestor: *const pmix_proc_t,
    _monitor: *const pmix_info_t,
    _error: Status,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    _cbfunc: *const c_void,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    unsafe { unsupported("monitor", requestor) }
}

unsafe extern "C" fn up_get_credential(
    proc_: *const pmix_proc_t,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    _cbfunc: *const c_void,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    unsafe { unsupported("get_credential", proc_) }
}

unsafe extern "C" fn up_validate_credential(
    proc_: *const pmix_proc_t,
    _cred: *const c_void,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    _cbfunc: *const c_void,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    unsafe { unsupported("validate_credential", proc_) }
}

unsafe extern "C" fn up_iof_pull(
    procs: *const pmix_proc_t,
    nprocs: usize,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    _channels: u16,
    _cbfunc: pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> Status {
    let first = if nprocs > 0 { procs } else { ptr::null() };
    // SAFETY: procs points to nprocs valid entries; the first is read, if any.
    unsafe { unsupported("iof_pull", first) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn up_push_stdin(
    source: *const pmix_proc_t,
    _targets: *const pmix_proc_t,
    _ntargets: usize,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    _bo: *const c_void,
    _cbfunc: pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    unsafe { unsupported("push_stdin", source) }
}

unsafe extern "C" fn up_fabric(
    requestor: *const pmix_proc_t,
    _op: c_int,
    _directives: *const pmix_info_t,
    _ndirs: usize,
    _cbfunc: *const c_void,
    _cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    unsafe { unsupported("fabric", requestor) }
}

static INITIALIZED: Mutex<bool> = Mutex::new(false);
static FINALIZED: AtomicBool = AtomicBool::new(false);

/// The variable that turns the `group` upcall on (`1`) or off (`0`). By default it is on
/// when the server library is OpenPMIx 5 or later, and off with OpenPMIx 4: Open MPI 5's
/// OpenPMIx 5 client cannot read the construct reply that OpenPMIx 4.2's server library packs
/// (`PMIX_ERR_UNPACK_READ_PAST_END_OF_BUFFER`, `MPI_ERR_UNKNOWN`), while with the slot empty
/// it gets a clean `MPI_ERR_UNSUPPORTED_OPERATION` that libraries (mpi4py's tests among them)
/// take as "not supported". Clients of OpenPMIx 4 (its group examples) are served by 4.2
/// with `1`.
pub const GROUPS_VAR: &str = "KAURI_PMIX_GROUPS";

/// Whether the `group` upcall is filled: [`GROUPS_VAR`] when it is `0` or `1`, else whether
/// the library (of major version `major`) is OpenPMIx 5 or later.
fn groups_enabled(major: Option<u32>) -> bool {
    match std::env::var(GROUPS_VAR).as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => major.is_some_and(|m| m >= 5),
    }
}

/// The major version in an OpenPMIx version line (`OpenPMIx 5.0.11rc1 (PMIx Standard: …`).
fn library_major(version: &str) -> Option<u32> {
    let rest = version.trim_start().strip_prefix("OpenPMIx")?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The library's parameter for the loopback TCP port its clients connect to.
pub const PORT_VAR: &str = "PMIX_MCA_ptl_base_ipv4_port";

/// Starts the server library once per process, its rendezvous and shared-memory files under
/// `tmpdir`, the host called `host`, listening on loopback at `port` (else where the library
/// chooses, or where the user's `PMIX_MCA_ptl_base_ipv4_port` says). Later calls return at
/// once.
pub fn init(tmpdir: &str, host: &str, port: Option<u16>) -> Result<(), String> {
    let mut done = INITIALIZED.lock().map_err(|_| "PMIx state poisoned")?;
    if *done {
        return Ok(());
    }
    if FINALIZED.load(Ordering::SeqCst) {
        return Err("the PMIx server was already finalized".into());
    }
    let l = lib()?;
    let version = library_version();
    let major = library_major(&version);
    let groups = groups_enabled(major);
    tracing::debug!(library = %l.path, %version, groups, "PMIx server library");
    let mut module = Box::new(pmix_server_module_t {
        client_connected: Some(up_connected),
        client_finalized: Some(up_finalized),
        abort: Some(up_abort),
        fence_nb: Some(up_fence),
        direct_modex: Some(up_dmodex),
        publish: Some(up_publish),
        lookup: Some(up_lookup),
        unpublish: Some(up_unpublish),
        spawn: Some(up_spawn),
        connect: Some(up_connect),
        disconnect: Some(up_disconnect),
        register_events: ptr::null(),
        deregister_events: ptr::null(),
        listener: ptr::null(),
        notify_event: Some(up_notify_event),
        query: Some(up_query),
        tool_connected: ptr::null(),
        // With OpenPMIx 5, whose own stdout/stderr channel serves only gateways and tools
        // (docs/pmix.md, "The server module").
        log: major.is_some_and(|m| m >= 5).then_some(up_log as LogFn),
        allocate: Some(up_allocate),
        job_control: Some(up_job_control),
        monitor: Some(up_monitor),
        get_credential: Some(up_get_credential),
        validate_credential: Some(up_validate_credential),
        iof_pull: Some(up_iof_pull),
        push_stdin: Some(up_push_stdin),
        group: groups.then_some(up_group as GroupFn),
        fabric: Some(up_fabric),
        client_connected2: Some(up_connected2),
        session_control: ptr::null(),
    });
    let items = vec![
        ("pmix.srvr.tmpdir".into(), Val::Str(tmpdir.into())),
        ("pmix.sys.tmpdir".into(), Val::Str(tmpdir.into())),
        ("pmix.hname".into(), Val::Str(host.into())),
    ];
    // The job data store: `hash` (each client gets its data over its socket), unless the
    // user chose one (PMIX_MCA_gds). OpenPMIx 4.2.2's shared-memory stores (ds12, ds21) fail
    // a second job spawned into the same server ("PMIX ERROR … gds_ds12_lock_pthread.c",
    // NOT_AVAILABLE: its ranks cannot read their peers' data and abort; mpi4py's test_spawn).
    // (The library reads it from the environment when it starts; the process is single
    // threaded until then, and its ranks' environments are made without it.)
    if std::env::var_os("PMIX_MCA_gds").is_none() {
        std::env::set_var("PMIX_MCA_gds", "hash");
    }
    // The port, the same way; taken away again once the library has read it, so that agents
    // this process starts (simulated hosts) do not inherit it.
    let port = port.filter(|_| std::env::var_os(PORT_VAR).is_none());
    if let Some(p) = port {
        std::env::set_var(PORT_VAR, p.to_string());
    }
    let mut info = InfoArray::new(&items);
    // SAFETY: module and info are valid for the call; the library copies the module (it is
    // also leaked below, so it outlives the library either way) and the info values.
    let rc = unsafe { (l.server_init)(&mut *module, info.infos.as_mut_ptr(), info.infos.len()) };
    if port.is_some() {
        std::env::remove_var(PORT_VAR);
    }
    check("PMIx_server_init", rc)?;
    Box::leak(module);
    *done = true;
    Ok(())
}

/// True when [`init`] succeeded and [`finalize`] has not run.
pub fn running() -> bool {
    INITIALIZED.lock().map(|d| *d).unwrap_or(false) && !FINALIZED.load(Ordering::SeqCst)
}

/// Finalizes the server library, if it was started. Callbacks still held are dropped unused.
pub fn finalize() {
    let Ok(mut done) = INITIALIZED.lock() else {
        return;
    };
    if !*done || FINALIZED.swap(true, Ordering::SeqCst) {
        return;
    }
    if let Ok(l) = lib() {
        let finalize = l.server_finalize;
        // SAFETY: the library was initialized by `init` and is finalized once.
        let finished = within(FINALIZE_DEADLINE, move || unsafe { finalize() });
        if !finished {
            say!(
                "kauri: the PMIx server library did not finish within {} s; leaving it",
                FINALIZE_DEADLINE.as_secs()
            );
        }
    }
    *done = false;
}

/// How long [`finalize`] waits for the library. OpenPMIx's finalize waits for its progress
/// thread, which a library bug can leave stuck (OpenPMIx 5.0's double group-destruct upcall
/// did: see `up_group`); kauri then goes on with its teardown and exit instead of hanging.
const FINALIZE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `f` on a thread of its own and waits for it at most `deadline`: true when it
/// returned in time. A late `f` is left running (the process's exit ends it).
fn within<T: Send + 'static>(
    deadline: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> bool {
    let (tx, rx) = std_mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new()
        .name("pmix-finalize".into())
        .spawn(move || {
            let _ = tx.send(f());
        });
    spawned.is_ok() && rx.recv_timeout(deadline).is_ok()
}

fn take_c_string(p: *mut c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a NUL-terminated string malloc'ed by the library and now ours.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    // SAFETY: p was allocated with malloc by the library; freed once.
    unsafe { libc::free(p.cast()) };
    Some(s)
}

/// `PMIx_generate_regex` (a comma-separated list of names) or `PMIx_generate_ppn`
/// (`;`-separated per-node rank lists), when the result is text; `None` otherwise (the
/// caller then passes the plain list, which the library also parses).
pub fn generate(input: &str, ppn: bool) -> Option<String> {
    if !running() {
        return None;
    }
    let l = lib().ok()?;
    let c = c_string(input);
    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: c is a valid C string; out receives a malloc'ed result.
    let rc = unsafe {
        if ppn {
            (l.generate_ppn)(c.as_ptr(), &mut out)
        } else {
            (l.generate_regex)(c.as_ptr(), &mut out)
        }
    };
    let s = take_c_string(out)?;
    (rc == PMIX_SUCCESS && (s.starts_with("pmix[") || s.starts_with("raw:"))).then_some(s)
}

unsafe extern "C" fn op_done(status: Status, cbdata: *mut c_void) {
    if !cbdata.is_null() {
        // SAFETY: cbdata is the Box<SyncSender> leaked by `wait_op`, taken back once.
        let tx = unsafe { Box::from_raw(cbdata.cast::<std_mpsc::SyncSender<Status>>()) };
        let _ = tx.send(status);
    }
}

/// Runs a non-blocking library call with `op_done` as its callback and waits for it.
fn wait_op(
    what: &str,
    call: impl FnOnce(pmix_op_cbfunc_t, *mut c_void) -> Status,
) -> Result<(), String> {
    let (tx, rx) = std_mpsc::sync_channel::<Status>(1);
    let data = Box::into_raw(Box::new(tx)).cast::<c_void>();
    let rc = call(Some(op_done), data);
    if rc == PMIX_SUCCESS {
        let st = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .map_err(|_| format!("{what}: the library never completed"))?;
        return check(what, st);
    }
    // No callback will come: take the sender back.
    // SAFETY: data is the box leaked above and the library did not take it.
    drop(unsafe { Box::from_raw(data.cast::<std_mpsc::SyncSender<Status>>()) });
    check(what, rc)
}

/// Registers namespace `nspace` with `nlocal` local clients and its job information.
pub fn register_nspace(nspace: &str, nlocal: usize, info: &[(String, Val)]) -> Result<(), String> {
    let l = lib()?;
    let mut arr = InfoArray::new(info);
    let ns = nspace_buf(nspace);
    wait_op("PMIx_server_register_nspace", |cb, data| {
        // SAFETY: ns, arr stay alive until this function returns, after the completion
        // callback ran; the library copies what it keeps.
        unsafe {
            (l.register_nspace)(
                ns.as_ptr(),
                nlocal as c_int,
                arr.infos.as_mut_ptr(),
                arr.infos.len(),
                cb,
                data,
            )
        }
    })
}

/// Deregisters a namespace (its clients and data).
pub fn deregister_nspace(nspace: &str) {
    if !running() {
        return;
    }
    let Ok(l) = lib() else {
        return;
    };
    let ns = nspace_buf(nspace);
    let _ = wait_op("PMIx_server_deregister_nspace", |cb, data| {
        // SAFETY: ns lives until the completion callback ran.
        unsafe { (l.deregister_nspace)(ns.as_ptr(), cb, data) };
        PMIX_SUCCESS
    });
}

/// Registers a local client: rank `rank` of `nspace`, run as this process's user.
pub fn register_client(nspace: &str, rank: u32) -> Result<(), String> {
    let l = lib()?;
    let p = proc_t(nspace, rank);
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    wait_op("PMIx_server_register_client", |cb, data| {
        // SAFETY: p lives until the completion callback ran.
        unsafe { (l.register_client)(&p, uid, gid, ptr::null_mut(), cb, data) }
    })
}

/// The environment a local client needs to reach this server (`PMIX_NAMESPACE`,
/// `PMIX_RANK`, `PMIX_SERVER_URI*`, …).
pub fn setup_fork(nspace: &str, rank: u32) -> Result<Vec<(String, String)>, String> {
    let l = lib()?;
    let p = proc_t(nspace, rank);
    let mut env: *mut *mut c_char = ptr::null_mut();
    // SAFETY: p is valid; env starts NULL and the library allocates a NULL-terminated array.
    let rc = unsafe { (l.setup_fork)(&p, &mut env) };
    let mut out = Vec::new();
    if !env.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: env is a NULL-terminated array of malloc'ed strings from the library.
            let s = unsafe { *env.add(i) };
            if s.is_null() {
                break;
            }
            if let Some(kv) = take_c_string(s) {
                if let Some((k, v)) = kv.split_once('=') {
                    out.push((k.to_string(), v.to_string()));
                }
            }
            i += 1;
        }
        // SAFETY: the array itself was malloc'ed by the library; its strings are freed.
        unsafe { libc::free(env.cast()) };
    }
    check("PMIx_server_setup_fork", rc)?;
    Ok(out)
}

type DmodexDone = Box<dyn FnOnce(Status, Vec<u8>) + Send>;

unsafe extern "C" fn dmodex_done(
    status: Status,
    data: *mut c_char,
    sz: usize,
    cbdata: *mut c_void,
) {
    if cbdata.is_null() {
        return;
    }
    // SAFETY: cbdata is the Box<DmodexDone> leaked by `dmodex_request`, taken back once.
    let done = unsafe { Box::from_raw(cbdata.cast::<DmodexDone>()) };
    let blob = if data.is_null() || sz == 0 {
        Vec::new()
    } else {
        // SAFETY: data points to sz bytes the library owns during this call; copied.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), sz) }.to_vec()
    };
    done(status, blob);
}

/// Asks the local library for the data rank `rank` of `nspace` (a local client) posted;
/// `done` gets it, on the library's thread, once it is there.
pub fn dmodex_request(nspace: &str, rank: u32, done: DmodexDone) -> Result<(), String> {
    if !running() {
        return Err("the PMIx server is not running".into());
    }
    let l = lib()?;
    let p = proc_t(nspace, rank);
    let data = Box::into_raw(Box::new(done)).cast::<c_void>();
    // SAFETY: p is valid for the call; data is handed to the library, returned in dmodex_done.
    let rc = unsafe { (l.dmodex_request)(&p, Some(dmodex_done), data) };
    if rc != PMIX_SUCCESS {
        // SAFETY: the library refused the request, so it will not call back with data.
        drop(unsafe { Box::from_raw(data.cast::<DmodexDone>()) });
        return check("PMIx_server_dmodex_request", rc);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Failure events: `PMIx_Notify_event`, kauri telling its local clients that a rank of their
// job ended abnormally or was lost with its host (see docs/pmix.md, "Failure events").

/// A process ended by calling `PMIx_Abort`, or (Open MPI 4.1's and kauri's use) exited with
/// a non-zero status.
pub const PMIX_ERR_PROC_ABORTED: Status = -7;
/// A process exited without calling `PMIx_Finalize` while the others still needed it.
pub const PMIX_ERR_PROC_TERM_WO_SYNC: Status = -200;
/// A process was killed by a signal.
pub const PMIX_ERR_PROC_ABORTED_BY_SIG: Status = -402;
/// The connection to a process was lost (kauri: its host's agent was).
pub const PMIX_ERR_LOST_CONNECTION: Status = -61;

const PMIX_PROC: u16 = 22;
/// `pmix_data_range_t` `PMIX_RANGE_CUSTOM`: the targets are in `PMIX_EVENT_CUSTOM_RANGE`.
const PMIX_RANGE_CUSTOM: u8 = 6;

/// One `pmix_info_t` with key `key`, type `type_` and the bytes `data`.
fn raw_info(key: &str, type_: u16, data: pmix_value_data) -> pmix_info_t {
    let mut info = pmix_info_t {
        key: [0; KEYLEN],
        flags: 0,
        value: pmix_value_t { type_, data },
    };
    fill(&mut info.key, key);
    info
}

/// Tells this server's local clients of namespace `nspace` that its rank `rank` failed with
/// `status` (one of the `PMIX_ERR_*` above), as PRRTE does: the source is that rank, the
/// range every rank of the namespace (`PMIX_RANGE_CUSTOM` with `PMIX_EVENT_CUSTOM_RANGE`
/// `{nspace, PMIX_RANK_WILDCARD}`), `PMIX_EVENT_AFFECTED_PROC` names the rank and
/// `PMIX_EXIT_CODE` carries `exit_code` when there is one. `PMIX_EVENT_NON_DEFAULT` keeps
/// the event from default handlers (Open MPI 4.1's aborts the process). Returns once the
/// library has handed the event to its clients' connections.
pub fn notify_failure(
    nspace: &str,
    rank: u32,
    status: Status,
    exit_code: Option<i32>,
) -> Result<(), String> {
    if !running() {
        return Err("the PMIx server is not running".into());
    }
    let l = lib()?;
    let source = proc_t(nspace, rank);
    let everyone = proc_t(nspace, PMIX_RANK_WILDCARD);
    // A pointer is one u64 on LP64 (the layouts test), so it is written through `_size`.
    let ptr_data = |p: &pmix_proc_t| pmix_value_data {
        _size: [p as *const pmix_proc_t as u64, 0, 0],
    };
    let mut info = vec![
        raw_info("pmix.evproc", PMIX_PROC, ptr_data(&source)),
        raw_info("pmix.evrange", PMIX_PROC, ptr_data(&everyone)),
        raw_info("pmix.evnondef", PMIX_BOOL, pmix_value_data { flag: true }),
    ];
    if let Some(code) = exit_code {
        // A C int and a u32 share their four bytes.
        let data = pmix_value_data {
            uint32: code as u32,
        };
        info.push(raw_info("pmix.exit.code", PMIX_INT, data));
    }
    wait_op("PMIx_Notify_event", |cb, data| {
        // SAFETY: source, everyone and info (whose PMIX_PROC values point at them) stay
        // alive until this function returns, after the completion callback ran.
        unsafe {
            (l.notify_event)(
                status,
                &source,
                PMIX_RANGE_CUSTOM,
                info.as_ptr(),
                info.len(),
                cb,
                data,
            )
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The client side (`kauri pmi --method pmix`): the same library, as a rank uses it.

/// `PMIX_GLOBAL`: a put visible to every process of the job.
const PMIX_SCOPE_GLOBAL: u8 = 3;

/// A PMIx client session of this process (`PMIx_Init` … `PMIx_Finalize`), for `kauri pmi`.
/// Errors are the library's status with its name, as one line.
#[derive(Debug)]
pub struct PmixClient {
    nspace: String,
    rank: u32,
    lib: &'static Lib,
}

fn client_check(what: &str, rc: Status) -> Result<(), String> {
    if rc == PMIX_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {} ({rc})", error_string(rc)))
    }
}

impl PmixClient {
    /// `PMIx_Init`: connects to the PMIx server named by the environment (`PMIX_SERVER_URI*`,
    /// `PMIX_NAMESPACE`, `PMIX_RANK`).
    pub fn init() -> Result<PmixClient, String> {
        let l = lib()?;
        let mut me = proc_t("", 0);
        // SAFETY: `me` is a valid pmix_proc_t the library fills in; no info array.
        let rc = unsafe { (l.client_init)(&mut me, ptr::null_mut(), 0) };
        client_check("PMIx_Init", rc)?;
        // SAFETY: the library NUL-terminates the namespace inside its NSLEN buffer.
        let nspace = unsafe { CStr::from_ptr(me.nspace.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(PmixClient {
            nspace,
            rank: me.rank,
            lib: l,
        })
    }

    /// This process's namespace.
    pub fn nspace(&self) -> &str {
        &self.nspace
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// `PMIx_Put` of a string in the global scope.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        let k = c_string(key);
        let v = c_string(value);
        let mut val = pmix_value_t {
            type_: PMIX_STRING,
            data: pmix_value_data {
                string: v.as_ptr() as *mut c_char,
            },
        };
        // SAFETY: key and value are NUL-terminated and outlive the call; the library copies
        // the value (PMIx_Put does not take ownership of `val`).
        let rc = unsafe { (self.lib.client_put)(PMIX_SCOPE_GLOBAL, k.as_ptr(), &mut val) };
        client_check("PMIx_Put", rc)
    }

    /// `PMIx_Commit`: hands the puts so far to the server.
    pub fn commit(&mut self) -> Result<(), String> {
        // SAFETY: no arguments.
        client_check("PMIx_Commit", unsafe { (self.lib.client_commit)() })
    }

    /// `PMIx_Fence` over the whole namespace; with `collect`, `PMIX_COLLECT_DATA`: the
    /// committed data travels with the fence (otherwise a get fetches it from its owner).
    pub fn fence(&mut self, collect: bool) -> Result<(), String> {
        let all = proc_t(&self.nspace, PMIX_RANK_WILDCARD);
        let info = raw_info("pmix.collect", PMIX_BOOL, pmix_value_data { flag: collect });
        // SAFETY: one valid proc and one valid info, both outliving the blocking call.
        let rc = unsafe { (self.lib.client_fence)(&all, 1, &info, 1) };
        client_check("PMIx_Fence", rc)
    }

    /// `PMIx_Get` of `key` as `rank` of this namespace put it (`None`: the namespace itself,
    /// for job keys such as `pmix.job.size`), as text; `Ok(None)` when not found.
    pub fn get(&mut self, rank: Option<u32>, key: &str) -> Result<Option<String>, String> {
        let who = proc_t(&self.nspace, rank.unwrap_or(PMIX_RANK_WILDCARD));
        let k = c_string(key);
        let mut out: *mut pmix_value_t = ptr::null_mut();
        // SAFETY: a valid proc and NUL-terminated key outlive the call; `out` receives a value
        // the library allocated, released below.
        let rc = unsafe { (self.lib.client_get)(&who, k.as_ptr(), ptr::null(), 0, &mut out) };
        if rc == PMIX_ERR_NOT_FOUND {
            return Ok(None);
        }
        client_check("PMIx_Get", rc)?;
        if out.is_null() {
            return Err("PMIx_Get succeeded without a value".into());
        }
        // SAFETY: `out` is the library's value, valid until released.
        let text = unsafe { value_text(&*out) };
        // SAFETY: PMIX_VALUE_RELEASE: destruct the contents, free the malloc'd struct.
        unsafe {
            (self.lib.value_destruct)(out);
            libc::free(out.cast());
        }
        Ok(Some(text))
    }

    /// The size of this namespace (`pmix.job.size`).
    pub fn size(&mut self) -> Result<u32, String> {
        let v = self
            .get(None, "pmix.job.size")?
            .ok_or("PMIx_Get pmix.job.size: not found")?;
        v.parse()
            .map_err(|_| format!("PMIx_Get pmix.job.size: not a number: {v}"))
    }

    /// `PMIx_Abort` of the whole namespace with `code`.
    pub fn abort(self, code: i32, msg: &str) -> Result<(), String> {
        let m = c_string(msg);
        // SAFETY: NUL-terminated message; no procs means the caller's whole namespace.
        let rc = unsafe { (self.lib.client_abort)(code, m.as_ptr(), ptr::null_mut(), 0) };
        client_check("PMIx_Abort", rc)
    }

    /// `PMIx_Finalize`.
    pub fn finalize(self) -> Result<(), String> {
        // SAFETY: no info array.
        client_check("PMIx_Finalize", unsafe {
            (self.lib.client_finalize)(ptr::null(), 0)
        })
    }
}

/// A value the library returned, as text (numbers in decimal, strings as they are, bytes as
/// lossy UTF-8).
///
/// # Safety
/// `v` must be a value from the library, its pointers valid.
unsafe fn value_text(v: &pmix_value_t) -> String {
    let d = &v.data;
    match v.type_ {
        PMIX_STRING if d.string.is_null() => String::new(),
        PMIX_STRING => CStr::from_ptr(d.string).to_string_lossy().into_owned(),
        PMIX_BOOL => d.flag.to_string(),
        PMIX_SIZE => d.size.to_string(),
        PMIX_INT => d.integer.to_string(),
        PMIX_INT8 => d.int8.to_string(),
        PMIX_INT16 => d.int16.to_string(),
        PMIX_INT32 => d.int32.to_string(),
        PMIX_INT64 => d.int64.to_string(),
        PMIX_UINT => d.uint32.to_string(),
        PMIX_UINT8 => d.uint8.to_string(),
        PMIX_UINT16 => d.uint16.to_string(),
        PMIX_UINT32 | PMIX_PROC_RANK => d.uint32.to_string(),
        PMIX_UINT64 => d.uint64.to_string(),
        PMIX_BYTE_OBJECT if d.bo.bytes.is_null() => String::new(),
        PMIX_BYTE_OBJECT => {
            let b = std::slice::from_raw_parts(d.bo.bytes as *const u8, d.bo.size);
            String::from_utf8_lossy(b).into_owned()
        }
        t => format!("(a value of PMIx type {t})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn rust_layouts() {
        assert_eq!(size_of::<pmix_value_t>(), 32);
        assert_eq!(align_of::<pmix_value_t>(), 8);
        assert_eq!(offset_of!(pmix_value_t, data), 8);
        assert_eq!(size_of::<pmix_info_t>(), 552);
        assert_eq!(offset_of!(pmix_info_t, flags), 512);
        assert_eq!(offset_of!(pmix_info_t, value), 520);
        assert_eq!(size_of::<pmix_proc_t>(), 260);
        assert_eq!(offset_of!(pmix_proc_t, rank), 256);
        assert_eq!(size_of::<pmix_data_array_t>(), 24);
        assert_eq!(offset_of!(pmix_data_array_t, size), 8);
        assert_eq!(offset_of!(pmix_data_array_t, array), 16);
        // 4.x's 28 entries, then 5.0's session_control.
        assert_eq!(offset_of!(pmix_server_module_t, session_control), 224);
        assert_eq!(size_of::<pmix_server_module_t>(), 232);
        assert_eq!(offset_of!(pmix_server_module_t, publish), 40);
        assert_eq!(offset_of!(pmix_server_module_t, fabric), 208);
        assert_eq!(offset_of!(pmix_server_module_t, client_connected2), 216);
        assert_eq!(offset_of!(pmix_server_module_t, spawn), 64);
        assert_eq!(size_of::<pmix_app_t>(), 56);
        assert_eq!(size_of::<pmix_pdata_t>(), 808);
        assert_eq!(offset_of!(pmix_pdata_t, key), 260);
        assert_eq!(offset_of!(pmix_pdata_t, value), 776);
    }

    /// Compiles a probe against the installed headers and compares its numbers with ours.
    #[test]
    fn layouts_match_the_c_headers() {
        let Ok(flags) = std::process::Command::new("pkg-config")
            .args(["--cflags", "pmix"])
            .output()
        else {
            say!("pkg-config not found: skipped");
            return;
        };
        let dir = std::env::temp_dir().join(format!("kauri-pmix-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("probe.c");
        std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <stddef.h>
#include <pmix_server.h>
int main(void) {
  printf("%zu %zu %zu %zu %zu\n", sizeof(pmix_value_t), _Alignof(pmix_value_t), offsetof(pmix_value_t, data), sizeof(pmix_info_t), offsetof(pmix_info_t, value));
  printf("%zu %zu %zu %zu %zu\n", sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank), sizeof(pmix_data_array_t), sizeof(pmix_server_module_t), offsetof(pmix_server_module_t, client_connected2));
  printf("%d %d %d %d %u\n", PMIX_SUCCESS, PMIX_ERROR, PMIX_ERR_NOT_FOUND, PMIX_ERR_NOT_SUPPORTED, PMIX_RANK_WILDCARD);
  printf("%d %d %d %d %d %d %d %d\n", PMIX_OPERATION_SUCCEEDED, PMIX_BOOL, PMIX_STRING, PMIX_UINT16, PMIX_UINT32, PMIX_INFO, PMIX_DATA_ARRAY, PMIX_PROC_RANK);
  printf("%d %d\n", PMIX_MAX_NSLEN, PMIX_MAX_KEYLEN);
  pmix_server_module_t m;
  size_t slots[] = {
    offsetof(pmix_server_module_t, publish), offsetof(pmix_server_module_t, lookup),
    offsetof(pmix_server_module_t, unpublish), offsetof(pmix_server_module_t, spawn),
    offsetof(pmix_server_module_t, connect), offsetof(pmix_server_module_t, disconnect),
    offsetof(pmix_server_module_t, register_events),
    offsetof(pmix_server_module_t, deregister_events), offsetof(pmix_server_module_t, listener),
    offsetof(pmix_server_module_t, notify_event), offsetof(pmix_server_module_t, query),
    offsetof(pmix_server_module_t, tool_connected), offsetof(pmix_server_module_t, log),
    offsetof(pmix_server_module_t, allocate), offsetof(pmix_server_module_t, job_control),
    offsetof(pmix_server_module_t, monitor), offsetof(pmix_server_module_t, get_credential),
    offsetof(pmix_server_module_t, validate_credential),
    offsetof(pmix_server_module_t, iof_pull), offsetof(pmix_server_module_t, push_stdin),
    offsetof(pmix_server_module_t, group), offsetof(pmix_server_module_t, fabric) };
  (void)m;
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) printf("%zu ", slots[i]);
  printf("\n%zu %zu %zu %zu\n", sizeof(pmix_pdata_t), offsetof(pmix_pdata_t, proc), offsetof(pmix_pdata_t, key), offsetof(pmix_pdata_t, value));
  printf("%d %d %d %d %d %u\n", PMIX_ERR_EXISTS, PMIX_ERR_TYPE_MISMATCH, PMIX_ERR_NO_PERMISSIONS, PMIX_ERR_TIMEOUT, PMIX_ERR_BAD_PARAM, PMIX_RANK_UNDEF);
  printf("%d %d %d %d %d %d %d %d %d %d %d %d\n", PMIX_SIZE, PMIX_INT, PMIX_INT8, PMIX_INT16, PMIX_INT32, PMIX_INT64, PMIX_UINT, PMIX_UINT8, PMIX_UINT64, PMIX_PERSIST, PMIX_DATA_RANGE, (int)sizeof(pmix_data_range_t) + 100 * (int)sizeof(pmix_iof_channel_t) + 10000 * (int)sizeof(pmix_alloc_directive_t) + 1000000 * (int)sizeof(pmix_fabric_operation_t));
  printf("%zu %zu %zu %zu %zu %d %d %d\n", sizeof(pmix_app_t), offsetof(pmix_app_t, maxprocs), offsetof(pmix_app_t, ninfo), offsetof(pmix_server_module_t, spawn), offsetof(pmix_server_module_t, disconnect), PMIX_INT, PMIX_ERR_BAD_PARAM, PMIX_ERR_JOB_FAILED_TO_LAUNCH);
  return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("probe");
        let cflags = String::from_utf8_lossy(&flags.stdout).into_owned();
        let built = std::process::Command::new("cc")
            .args(cflags.split_whitespace())
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status();
        if !matches!(built, Ok(s) if s.success()) {
            let _ = std::fs::remove_dir_all(&dir);
            say!("no C compiler or no PMIx headers: skipped");
            return;
        }
        let out = std::process::Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let got = String::from_utf8_lossy(&out.stdout).into_owned();
        let slots = [
            offset_of!(pmix_server_module_t, publish),
            offset_of!(pmix_server_module_t, lookup),
            offset_of!(pmix_server_module_t, unpublish),
            offset_of!(pmix_server_module_t, spawn),
            offset_of!(pmix_server_module_t, connect),
            offset_of!(pmix_server_module_t, disconnect),
            offset_of!(pmix_server_module_t, register_events),
            offset_of!(pmix_server_module_t, deregister_events),
            offset_of!(pmix_server_module_t, listener),
            offset_of!(pmix_server_module_t, notify_event),
            offset_of!(pmix_server_module_t, query),
            offset_of!(pmix_server_module_t, tool_connected),
            offset_of!(pmix_server_module_t, log),
            offset_of!(pmix_server_module_t, allocate),
            offset_of!(pmix_server_module_t, job_control),
            offset_of!(pmix_server_module_t, monitor),
            offset_of!(pmix_server_module_t, get_credential),
            offset_of!(pmix_server_module_t, validate_credential),
            offset_of!(pmix_server_module_t, iof_pull),
            offset_of!(pmix_server_module_t, push_stdin),
            offset_of!(pmix_server_module_t, group),
            offset_of!(pmix_server_module_t, fabric),
        ];
        let slots: String = slots.iter().map(|o| format!("{o} ")).collect();
        // The integer types the "not supported" upcalls take by value: pmix_data_range_t
        // (u8), pmix_iof_channel_t (u16), pmix_alloc_directive_t (u8),
        // pmix_fabric_operation_t (an enum: int).
        let widths = size_of::<u8>()
            + 100 * size_of::<u16>()
            + 10_000 * size_of::<u8>()
            + 1_000_000 * size_of::<c_int>();
        let want = format!(
            "{} {} {} {} {}\n{} {} {} {} {}\n{} {} {} {} {}\n{} {} {} {} {} {} {} {}\n{} {}\n\
             {slots}\n{} {} {} {}\n{} {} {} {} {} {}\n{} {} {} {} {} {} {} {} {} {} {} {widths}\n\
             {} {} {} {} {} {} {} {}\n",
            size_of::<pmix_value_t>(),
            align_of::<pmix_value_t>(),
            offset_of!(pmix_value_t, data),
            size_of::<pmix_info_t>(),
            offset_of!(pmix_info_t, value),
            size_of::<pmix_proc_t>(),
            offset_of!(pmix_proc_t, rank),
            size_of::<pmix_data_array_t>(),
            // The 4.2 headers' structure ends where 5.0's session_control begins.
            offset_of!(pmix_server_module_t, session_control),
            offset_of!(pmix_server_module_t, client_connected2),
            PMIX_SUCCESS,
            PMIX_ERROR,
            PMIX_ERR_NOT_FOUND,
            PMIX_ERR_NOT_SUPPORTED,
            PMIX_RANK_WILDCARD,
            PMIX_OPERATION_SUCCEEDED,
            PMIX_BOOL,
            PMIX_STRING,
            PMIX_UINT16,
            PMIX_UINT32,
            PMIX_INFO,
            PMIX_DATA_ARRAY,
            PMIX_PROC_RANK,
            NSLEN - 1,
            KEYLEN - 1,
            size_of::<pmix_pdata_t>(),
            offset_of!(pmix_pdata_t, proc_),
            offset_of!(pmix_pdata_t, key),
            offset_of!(pmix_pdata_t, value),
            PMIX_ERR_EXISTS,
            PMIX_ERR_TYPE_MISMATCH,
            PMIX_ERR_NO_PERMISSIONS,
            PMIX_ERR_TIMEOUT,
            PMIX_ERR_BAD_PARAM,
            PMIX_RANK_UNDEF,
            PMIX_SIZE,
            PMIX_INT,
            PMIX_INT8,
            PMIX_INT16,
            PMIX_INT32,
            PMIX_INT64,
            PMIX_UINT,
            PMIX_UINT8,
            PMIX_UINT64,
            PMIX_PERSIST,
            PMIX_DATA_RANGE,
            size_of::<pmix_app_t>(),
            offset_of!(pmix_app_t, maxprocs),
            offset_of!(pmix_app_t, ninfo),
            offset_of!(pmix_server_module_t, spawn),
            offset_of!(pmix_server_module_t, disconnect),
            PMIX_INT,
            PMIX_ERR_BAD_PARAM,
            PMIX_ERR_JOB_FAILED_TO_LAUNCH,
        );
        assert_eq!(got, want);
    }

    #[test]
    fn a_log_for_the_standard_streams_is_kauris_and_nothing_else() {
        let data = vec![
            (LOG_STDERR.to_string(), InfoVal::Str("e".into())),
            ("pmix.log.syslog".to_string(), InfoVal::Str("s".into())),
            (LOG_STDOUT.to_string(), InfoVal::Str("o".into())),
            (LOG_STDERR.to_string(), InfoVal::Int(3)),
        ];
        assert_eq!(
            log_lines(&data),
            vec![(true, "e".to_string()), (false, "o".to_string())]
        );
        assert!(log_lines(&data[1..2]).is_empty());
        assert_eq!(
            library_major("OpenPMIx 5.0.11rc1 (PMIx Standard: 5.1)"),
            Some(5)
        );
        assert_eq!(library_major("OpenPMIx 4.2.2"), Some(4));
        assert_eq!(library_major("unknown"), None);
    }

    #[test]
    fn a_stuck_call_is_left_after_its_deadline() {
        use std::time::Duration;
        assert!(within(Duration::from_secs(60), || 7));
        let (tx, rx) = std_mpsc::channel::<()>();
        // Stuck until the test ends (the sender is dropped then).
        assert!(!within(Duration::from_millis(50), move || rx.recv()));
        drop(tx);
    }

    /// A group construct's results: the context id, every server's blob as one byte object
    /// (malloc'ed: the library may take it), the members as a data array of procs; a
    /// destruct's: nothing.
    #[test]
    fn group_results_as_the_library_reads_them() {
        let members = vec![("ns".to_string(), 0), ("ns".to_string(), 2)];
        let r = group_results(GroupOp::Construct, &members, b"ab".to_vec(), Some(7));
        let keys: Vec<&str> = r.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, [GROUP_CONTEXT_ID, GROUP_ENDPT_DATA, GROUP_MEMBERSHIP]);
        assert!(group_results(GroupOp::Destruct, &members, Vec::new(), None).is_empty());
        let none = group_results(GroupOp::Construct, &members, Vec::new(), None);
        assert_eq!(none.len(), 1, "only the members: {none:?}");

        let a = InfoArray::new(&r);
        // SAFETY: a's infos are valid, with everything they point to, while a lives.
        let got = unsafe { read_infos(a.infos.as_ptr(), a.infos.len()) };
        assert_eq!(got[0].1, InfoVal::Int(7));
        assert_eq!(got[1].1, InfoVal::Bytes(b"ab".to_vec()));
        assert_eq!(got[2].1, InfoVal::Other(PMIX_DATA_ARRAY));
        // SAFETY: the membership is a data array of 2 procs built by InfoArray::new.
        let procs = unsafe {
            let d = &*a.infos[2].value.data.darray;
            assert_eq!((d.type_, d.size), (PMIX_PROC, 2));
            read_procs(d.array.cast::<pmix_proc_t>(), d.size)
        };
        assert_eq!(procs, members);
    }

    /// Bytes the library took (it sets the pointer to NULL) are not freed again.
    #[test]
    fn bytes_taken_by_the_library_are_left_to_it() {
        let mut a = InfoArray::new(&[("k".to_string(), Val::Bytes(vec![1, 2, 3]))]);
        // SAFETY: the byte object built above; taken as the library's PMIX_LOAD_BUFFER does.
        unsafe {
            let p = a.infos[0].value.data.bo.bytes;
            a.infos[0].value.data.bo.bytes = ptr::null_mut();
            libc::free(p.cast());
        }
        drop(a);
    }

    /// What a client passes (built here as the library would) reads back as Rust values:
    /// strings, NULL strings, bools, integers of each width, other types by number.
    #[test]
    fn infos_and_keys_read_back() {
        let mut a = InfoArray::new(&[
            ("svc".into(), Val::Str("port 0".into())),
            ("pmix.wait".into(), Val::Bool(true)),
            ("pmix.euid".into(), Val::U32(1000)),
            ("pmix.lrank".into(), Val::U16(7)),
        ]);
        let mut infos = std::mem::take(&mut a.infos);
        let mut extra = |t: u16, d: pmix_value_data| {
            let mut i = pmix_info_t {
                key: [0; KEYLEN],
                flags: 0,
                value: pmix_value_t { type_: t, data: d },
            };
            fill(&mut i.key, "k");
            infos.push(i);
        };
        extra(PMIX_INT, pmix_value_data { integer: -5 });
        extra(PMIX_DATA_RANGE, pmix_value_data { uint8: 2 });
        extra(PMIX_INT64, pmix_value_data { int64: -1 << 40 });
        extra(
            PMIX_STRING,
            pmix_value_data {
                string: ptr::null_mut(),
            },
        );
        extra(PMIX_DATA_ARRAY, pmix_value_data { _size: [0; 3] });
        // SAFETY: infos holds infos.len() entries built above; the strings live in `a`'s
        // other fields, moved nowhere.
        let got = unsafe { read_infos(infos.as_ptr(), infos.len()) };
        let vals: Vec<InfoVal> = got.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(got[0].0, "svc");
        assert_eq!(
            vals,
            [
                InfoVal::Str("port 0".into()),
                InfoVal::Bool(true),
                InfoVal::Int(1000),
                InfoVal::Int(7),
                InfoVal::Int(-5),
                InfoVal::Int(2),
                InfoVal::Int(-1 << 40),
                InfoVal::Str(String::new()),
                InfoVal::Other(PMIX_DATA_ARRAY),
            ]
        );
        // SAFETY: NULL is allowed.
        assert!(unsafe { read_infos(ptr::null(), 3) }.is_empty());
        let k = [c_string("a"), c_string("b c")];
        let mut argv: Vec<*mut c_char> = k.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        argv.push(ptr::null_mut());
        // SAFETY: a NULL-terminated array of the strings in `k`.
        assert_eq!(unsafe { read_keys(argv.as_mut_ptr()) }, ["a", "b c"]);
        // SAFETY: NULL is allowed.
        assert!(unsafe { read_keys(ptr::null_mut()) }.is_empty());
    }

    #[test]
    fn unsupported_upcalls_name_their_caller() {
        assert_eq!(
            unsupported_line("spawn", Some(("kauri_1_x".into(), 3))),
            "kauri: PMIx upcall spawn from kauri_1_x:3 is not supported"
        );
        assert_eq!(
            unsupported_line("query", Some(("ns".into(), PMIX_RANK_WILDCARD))),
            "kauri: PMIx upcall query from ns:* is not supported"
        );
        assert_eq!(
            unsupported_line("iof_pull", None),
            "kauri: PMIx upcall iof_pull from ? is not supported"
        );
    }

    /// The failure events' codes and types, against the installed headers.
    #[test]
    fn failure_codes_match_the_c_headers() {
        let Ok(flags) = std::process::Command::new("pkg-config")
            .args(["--cflags", "pmix"])
            .output()
        else {
            say!("pkg-config not found: skipped");
            return;
        };
        let dir = std::env::temp_dir().join(format!("kauri-pmix-codes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("codes.c");
        std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <pmix_server.h>
int main(void) {
  printf("%d %d %d %d %d %d %d\n", PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_ERR_LOST_CONNECTION, PMIX_INT, PMIX_PROC, PMIX_RANGE_CUSTOM);
  printf("%s %s %s %s\n", PMIX_EVENT_AFFECTED_PROC, PMIX_EVENT_CUSTOM_RANGE, PMIX_EVENT_NON_DEFAULT, PMIX_EXIT_CODE);
  return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.join("codes");
        let cflags = String::from_utf8_lossy(&flags.stdout).into_owned();
        let built = std::process::Command::new("cc")
            .args(cflags.split_whitespace())
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status();
        if !matches!(built, Ok(s) if s.success()) {
            let _ = std::fs::remove_dir_all(&dir);
            say!("no C compiler or no PMIx headers: skipped");
            return;
        }
        let out = std::process::Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let want = format!(
            "{} {} {} {} {} {} {}\npmix.evproc pmix.evrange pmix.evnondef pmix.exit.code\n",
            PMIX_ERR_PROC_ABORTED,
            PMIX_ERR_PROC_TERM_WO_SYNC,
            PMIX_ERR_PROC_ABORTED_BY_SIG,
            PMIX_ERR_LOST_CONNECTION,
            PMIX_INT,
            PMIX_PROC,
            PMIX_RANGE_CUSTOM,
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }

    #[test]
    fn info_arrays_point_at_their_values() {
        let a = InfoArray::new(&[
            ("pmix.jobid".into(), Val::Str("job\0cut".into())),
            ("pmix.job.size".into(), Val::U32(4)),
            (
                "pmix.pdata".into(),
                Val::Infos(vec![("pmix.rank".into(), Val::Rank(3))]),
            ),
        ]);
        assert_eq!(a.infos.len(), 3);
        // SAFETY: the test reads back what InfoArray::new wrote.
        unsafe {
            assert_eq!(a.infos[0].value.type_, PMIX_STRING);
            assert_eq!(
                CStr::from_ptr(a.infos[0].value.data.string)
                    .to_str()
                    .unwrap(),
                "job"
            );
            assert_eq!(a.infos[1].value.data.uint32, 4);
            let d = &*a.infos[2].value.data.darray;
            assert_eq!((d.type_, d.size), (PMIX_INFO, 1));
            let inner = &*(d.array as *const pmix_info_t);
            assert_eq!(inner.value.type_, PMIX_PROC_RANK);
            assert_eq!(inner.value.data.uint32, 3);
            assert_eq!(
                CStr::from_ptr(inner.key.as_ptr()).to_str().unwrap(),
                "pmix.rank"
            );
        }
    }
}
