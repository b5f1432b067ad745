//! The OpenPMIx 4.2 server library, by hand: the `#[repr(C)]` types and `extern "C"`
//! functions Kauri uses, the upcalls the library makes into Kauri, and the safe wrappers
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
/// The operation completed at once; no callback will follow.
pub const PMIX_OPERATION_SUCCEEDED: Status = -157;
/// The rank meaning "every rank of the namespace".
pub const PMIX_RANK_WILDCARD: u32 = 0xffff_fffe;

const PMIX_BOOL: u16 = 1;
const PMIX_STRING: u16 = 3;
const PMIX_UINT16: u16 = 13;
const PMIX_UINT32: u16 = 14;
const PMIX_INFO: u16 = 24;
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

/// The members of `pmix_value_t`'s union that Kauri writes, padded to the union's size.
#[repr(C)]
#[derive(Clone, Copy)]
union pmix_value_data {
    flag: bool,
    string: *mut c_char,
    uint16: u16,
    uint32: u32,
    darray: *mut pmix_data_array_t,
    _size: [u64; 3],
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

type pmix_op_cbfunc_t = Option<unsafe extern "C" fn(Status, *mut c_void)>;
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

/// `pmix_server_module_t` (the 4.0 layout: 28 function pointers). Kauri fills the first five
/// and `client_connected2`; the others stay NULL ("not supported").
#[repr(C)]
struct pmix_server_module_t {
    client_connected: Option<ConnectedFn>,
    client_finalized: Option<ConnectedFn>,
    abort: Option<AbortFn>,
    fence_nb: Option<FenceFn>,
    direct_modex: Option<DmodexFn>,
    /// publish … fabric: 22 entries Kauri leaves NULL.
    unused: [*const c_void; 22],
    client_connected2: Option<Connected2Fn>,
}

// Linked by build.rs (`-lpmix`).
extern "C" {
    fn PMIx_server_init(
        module: *mut pmix_server_module_t,
        info: *mut pmix_info_t,
        ninfo: usize,
    ) -> Status;
    fn PMIx_server_finalize() -> Status;
    fn PMIx_generate_regex(input: *const c_char, regex: *mut *mut c_char) -> Status;
    fn PMIx_generate_ppn(input: *const c_char, ppn: *mut *mut c_char) -> Status;
    fn PMIx_server_register_nspace(
        nspace: *const c_char,
        nlocalprocs: c_int,
        info: *mut pmix_info_t,
        ninfo: usize,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> Status;
    fn PMIx_server_deregister_nspace(
        nspace: *const c_char,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    );
    fn PMIx_server_register_client(
        proc_: *const pmix_proc_t,
        uid: libc::uid_t,
        gid: libc::gid_t,
        server_object: *mut c_void,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> Status;
    fn PMIx_server_setup_fork(proc_: *const pmix_proc_t, env: *mut *mut *mut c_char) -> Status;
    fn PMIx_server_dmodex_request(
        proc_: *const pmix_proc_t,
        cbfunc: pmix_dmodex_response_fn_t,
        cbdata: *mut c_void,
    ) -> Status;
    fn PMIx_Error_string(status: Status) -> *const c_char;
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

/// The library's name for a status.
pub fn error_string(status: Status) -> String {
    // SAFETY: PMIx_Error_string returns a pointer to a static NUL-terminated string (or NULL).
    let p = unsafe { PMIx_Error_string(status) };
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
    },
    /// Every local client entered a fence over the whole namespace: `data` is this host's
    /// contribution; answer with every host's contributions, concatenated.
    Fence {
        /// This host's blob.
        data: Vec<u8>,
        /// Where the answer goes.
        reply: ModexReply,
    },
    /// A local client wants the data of rank `rank`, which runs on another host.
    Dmodex {
        /// The rank whose data is wanted.
        rank: u32,
        /// Where the answer goes.
        reply: ModexReply,
    },
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
    _procs: *mut pmix_proc_t,
    _nprocs: usize,
    cbfunc: pmix_op_cbfunc_t,
    cbdata: *mut c_void,
) -> Status {
    // SAFETY: the library passes a valid proc (or NULL).
    let Some((ns, rank)) = (unsafe { read_proc(proc_) }) else {
        return PMIX_ERROR;
    };
    let message = if msg.is_null() {
        String::new()
    } else {
        // SAFETY: msg is a NUL-terminated string owned by the library for this call.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    deliver(
        &ns,
        Upcall::Abort {
            rank,
            status,
            message,
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
    if procs.is_null() || nprocs != 1 {
        return PMIX_ERR_NOT_SUPPORTED;
    }
    // SAFETY: procs is non-NULL and points to nprocs (1) valid entries.
    let Some((ns, rank)) = (unsafe { read_proc(procs) }) else {
        return PMIX_ERROR;
    };
    if rank != PMIX_RANK_WILDCARD {
        // Fences over part of a namespace are not supported (Open MPI 4.1 fences the job).
        return PMIX_ERR_NOT_SUPPORTED;
    }
    let blob = if data.is_null() || ndata == 0 {
        Vec::new()
    } else {
        // SAFETY: data points to ndata bytes owned by the library for this call; copied.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), ndata) }.to_vec()
    };
    let reply = ModexReply { cbfunc, cbdata };
    if deliver(&ns, Upcall::Fence { data: blob, reply }) {
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
    if deliver(&ns, Upcall::Dmodex { rank, reply }) {
        PMIX_SUCCESS
    } else {
        PMIX_ERR_NOT_FOUND
    }
}

static INITIALIZED: Mutex<bool> = Mutex::new(false);
static FINALIZED: AtomicBool = AtomicBool::new(false);

/// Starts the server library once per process, its rendezvous and shared-memory files under
/// `tmpdir`, the host called `host`. Later calls return at once.
pub fn init(tmpdir: &str, host: &str) -> Result<(), String> {
    let mut done = INITIALIZED.lock().map_err(|_| "PMIx state poisoned")?;
    if *done {
        return Ok(());
    }
    if FINALIZED.load(Ordering::SeqCst) {
        return Err("the PMIx server was already finalized".into());
    }
    let mut module = Box::new(pmix_server_module_t {
        client_connected: Some(up_connected),
        client_finalized: Some(up_finalized),
        abort: Some(up_abort),
        fence_nb: Some(up_fence),
        direct_modex: Some(up_dmodex),
        unused: [ptr::null(); 22],
        client_connected2: Some(up_connected2),
    });
    let mut info = InfoArray::new(&[
        ("pmix.srvr.tmpdir".into(), Val::Str(tmpdir.into())),
        ("pmix.sys.tmpdir".into(), Val::Str(tmpdir.into())),
        ("pmix.hname".into(), Val::Str(host.into())),
    ]);
    // SAFETY: module and info are valid for the call; the library copies the module (it is
    // also leaked below, so it outlives the library either way) and the info values.
    let rc = unsafe { PMIx_server_init(&mut *module, info.infos.as_mut_ptr(), info.infos.len()) };
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
    // SAFETY: the library was initialized by `init` and is finalized once.
    unsafe { PMIx_server_finalize() };
    *done = false;
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
    let c = c_string(input);
    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: c is a valid C string; out receives a malloc'ed result.
    let rc = unsafe {
        if ppn {
            PMIx_generate_ppn(c.as_ptr(), &mut out)
        } else {
            PMIx_generate_regex(c.as_ptr(), &mut out)
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
    let mut arr = InfoArray::new(info);
    let ns = nspace_buf(nspace);
    wait_op("PMIx_server_register_nspace", |cb, data| {
        // SAFETY: ns, arr stay alive until this function returns, after the completion
        // callback ran; the library copies what it keeps.
        unsafe {
            PMIx_server_register_nspace(
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
    let ns = nspace_buf(nspace);
    let _ = wait_op("PMIx_server_deregister_nspace", |cb, data| {
        // SAFETY: ns lives until the completion callback ran.
        unsafe { PMIx_server_deregister_nspace(ns.as_ptr(), cb, data) };
        PMIX_SUCCESS
    });
}

/// Registers a local client: rank `rank` of `nspace`, run as this process's user.
pub fn register_client(nspace: &str, rank: u32) -> Result<(), String> {
    let p = proc_t(nspace, rank);
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    wait_op("PMIx_server_register_client", |cb, data| {
        // SAFETY: p lives until the completion callback ran.
        unsafe { PMIx_server_register_client(&p, uid, gid, ptr::null_mut(), cb, data) }
    })
}

/// The environment a local client needs to reach this server (`PMIX_NAMESPACE`,
/// `PMIX_RANK`, `PMIX_SERVER_URI*`, …).
pub fn setup_fork(nspace: &str, rank: u32) -> Result<Vec<(String, String)>, String> {
    let p = proc_t(nspace, rank);
    let mut env: *mut *mut c_char = ptr::null_mut();
    // SAFETY: p is valid; env starts NULL and the library allocates a NULL-terminated array.
    let rc = unsafe { PMIx_server_setup_fork(&p, &mut env) };
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
    let p = proc_t(nspace, rank);
    let data = Box::into_raw(Box::new(done)).cast::<c_void>();
    // SAFETY: p is valid for the call; data is handed to the library, returned in dmodex_done.
    let rc = unsafe { PMIx_server_dmodex_request(&p, Some(dmodex_done), data) };
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

const PMIX_INT: u16 = 6;
const PMIX_PROC: u16 = 22;
/// `pmix_data_range_t` `PMIX_RANGE_CUSTOM`: the targets are in `PMIX_EVENT_CUSTOM_RANGE`.
const PMIX_RANGE_CUSTOM: u8 = 6;

extern "C" {
    fn PMIx_Notify_event(
        status: Status,
        source: *const pmix_proc_t,
        range: u8,
        info: *const pmix_info_t,
        ninfo: usize,
        cbfunc: pmix_op_cbfunc_t,
        cbdata: *mut c_void,
    ) -> Status;
}

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
            PMIx_Notify_event(
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

// ---------------------------------------------------------------------------------------

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
        assert_eq!(size_of::<pmix_server_module_t>(), 224);
        assert_eq!(offset_of!(pmix_server_module_t, client_connected2), 216);
    }

    /// Compiles a probe against the installed headers and compares its numbers with ours.
    #[test]
    fn layouts_match_the_c_headers() {
        let Ok(flags) = std::process::Command::new("pkg-config")
            .args(["--cflags", "pmix"])
            .output()
        else {
            eprintln!("pkg-config not found: skipped");
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
            eprintln!("no C compiler or no PMIx headers: skipped");
            return;
        }
        let out = std::process::Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let got = String::from_utf8_lossy(&out.stdout).into_owned();
        let want = format!(
            "{} {} {} {} {}\n{} {} {} {} {}\n{} {} {} {} {}\n{} {} {} {} {} {} {} {}\n{} {}\n",
            size_of::<pmix_value_t>(),
            align_of::<pmix_value_t>(),
            offset_of!(pmix_value_t, data),
            size_of::<pmix_info_t>(),
            offset_of!(pmix_info_t, value),
            size_of::<pmix_proc_t>(),
            offset_of!(pmix_proc_t, rank),
            size_of::<pmix_data_array_t>(),
            size_of::<pmix_server_module_t>(),
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
        );
        assert_eq!(got, want);
    }

    /// The failure events' codes and types, against the installed headers.
    #[test]
    fn failure_codes_match_the_c_headers() {
        let Ok(flags) = std::process::Command::new("pkg-config")
            .args(["--cflags", "pmix"])
            .output()
        else {
            eprintln!("pkg-config not found: skipped");
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
            eprintln!("no C compiler or no PMIx headers: skipped");
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
