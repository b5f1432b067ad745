//! The server library's life (init, finalize) and the calls Kauri makes into it: namespaces,
//! clients, their environment, direct modex, failure events.

use super::loader::*;
use super::trampolines::*;
use super::types::*;
use super::unsupported::*;
use super::values::*;
use crate::pmix::PmixError;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Mutex};

static INITIALIZED: Mutex<bool> = Mutex::new(false);
pub(super) static FINALIZED: AtomicBool = AtomicBool::new(false);

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
pub(super) fn library_major(version: &str) -> Option<u32> {
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
pub fn init(tmpdir: &str, host: &str, port: Option<u16>) -> Result<(), PmixError> {
    let mut done = INITIALIZED.lock().map_err(|_| PmixError::Poisoned)?;
    if *done {
        return Ok(());
    }
    if FINALIZED.load(Ordering::SeqCst) {
        return Err(PmixError::Finalized);
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
    let items = init_items(tmpdir, host);
    // The job data store: `hash` (each client gets its data over its socket), unless the
    // user chose one (PMIX_MCA_gds). OpenPMIx 4.2.2's shared-memory stores (ds12, ds21) fail
    // a second job spawned into the same server ("PMIX ERROR … gds_ds12_lock_pthread.c",
    // NOT_AVAILABLE: its ranks cannot read their peers' data and abort; mpi4py's test_spawn).
    // (The library reads it from the environment when it starts, and its ranks' environments
    // are made without it. Other threads run by then, one of them perhaps in libhwloc, which
    // reads the environment too: the changes and the start hold the environment's lock.)
    let env = kauri_os::env::lock();
    if std::env::var_os("PMIX_MCA_gds").is_none() {
        std::env::set_var("PMIX_MCA_gds", "hash");
    }
    // The security module, the same way: `native`, which kauri names in the variables it
    // gives clients behind its door (`pmix::door`).
    if std::env::var_os("PMIX_MCA_psec").is_none() {
        std::env::set_var("PMIX_MCA_psec", "native");
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
    drop(env);
    check("PMIx_server_init", rc)?;
    Box::leak(module);
    *done = true;
    Ok(())
}

/// The attributes `PMIx_server_init` gets: the server's namespace and rank (those kauri names
/// in the variables it gives clients behind its door), the server's and the system's temporary
/// directory, the host's name, and `PMIX_SERVER_SHARE_TOPOLOGY` (key `pmix.srvr.share`): the
/// library loads this host's topology once and hands it to its clients (hwloc shared memory
/// in `<tmpdir>/hwloc.sm`, and XML in the job data), as PRRTE's daemons do. Without it every
/// Open MPI 5 rank discovers the topology itself in `MPI_Init`, some 200 reads of /sys each
/// (docs/performance.md, "The topology handed to the ranks").
pub(super) fn init_items(tmpdir: &str, host: &str) -> Vec<(String, Val)> {
    vec![
        (
            "pmix.srv.nspace".into(),
            Val::Str(crate::pmix::door::server_nspace()),
        ),
        ("pmix.srv.rank".into(), Val::Rank(0)),
        ("pmix.srvr.tmpdir".into(), Val::Str(tmpdir.into())),
        ("pmix.sys.tmpdir".into(), Val::Str(tmpdir.into())),
        ("pmix.hname".into(), Val::Str(host.into())),
        ("pmix.srvr.share".into(), Val::Bool(true)),
    ]
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
pub(super) fn within<T: Send + 'static>(
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
    what: &'static str,
    call: impl FnOnce(pmix_op_cbfunc_t, *mut c_void) -> Status,
) -> Result<(), PmixError> {
    let (tx, rx) = std_mpsc::sync_channel::<Status>(1);
    let data = Box::into_raw(Box::new(tx)).cast::<c_void>();
    let rc = call(Some(op_done), data);
    if rc == PMIX_SUCCESS {
        let st = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .map_err(|_| PmixError::NeverCompleted(what))?;
        return check(what, st);
    }
    // No callback will come: take the sender back.
    // SAFETY: data is the box leaked above and the library did not take it.
    drop(unsafe { Box::from_raw(data.cast::<std_mpsc::SyncSender<Status>>()) });
    check(what, rc)
}

/// Registers namespace `nspace` with `nlocal` local clients and its job information.
pub fn register_nspace(
    nspace: &str,
    nlocal: usize,
    info: &[(String, Val)],
) -> Result<(), PmixError> {
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
pub fn register_client(nspace: &str, rank: u32) -> Result<(), PmixError> {
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
pub fn setup_fork(nspace: &str, rank: u32) -> Result<Vec<(String, String)>, PmixError> {
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
pub fn dmodex_request(nspace: &str, rank: u32, done: DmodexDone) -> Result<(), PmixError> {
    if !running() {
        return Err(PmixError::NotRunning);
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

// Failure events: `PMIx_Notify_event`, kauri telling its local clients that a rank of their
// job ended abnormally or was lost with its host (see docs/pmix.md, "Failure events").

/// `pmix_data_range_t` `PMIX_RANGE_CUSTOM`: the targets are in `PMIX_EVENT_CUSTOM_RANGE`.
pub(super) const PMIX_RANGE_CUSTOM: u8 = 6;

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
) -> Result<(), PmixError> {
    if !running() {
        return Err(PmixError::NotRunning);
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
