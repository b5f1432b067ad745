//! The server module's upcalls: the functions the library calls on its progress thread,
//! each turning its arguments into an [`Upcall`] for the namespace's channel.

use super::replies::*;
use super::types::*;
use super::unsupported::unsupported;
use super::upcall::*;
use super::values::*;
use std::ffi::{c_char, c_int, c_void, CStr};

pub(super) unsafe extern "C" fn up_connected(
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

pub(super) unsafe extern "C" fn up_connected2(
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

pub(super) unsafe extern "C" fn up_finalized(
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
pub(super) unsafe extern "C" fn up_abort(
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
pub(super) unsafe extern "C" fn up_fence(
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
    delivered(deliver_any(&procs, up))
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn up_spawn(
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
    delivered(deliver(&ns, up))
}

pub(super) unsafe extern "C" fn up_connect(
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

pub(super) unsafe extern "C" fn up_disconnect(
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
    delivered(deliver_any(&procs, up))
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
pub(super) unsafe extern "C" fn up_group(
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
    delivered(deliver_any(&procs, up))
}

pub(super) unsafe extern "C" fn up_dmodex(
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
    delivered(deliver(&ns, up))
}

pub(super) unsafe extern "C" fn up_publish(
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
    delivered(deliver(&ns, up))
}

pub(super) unsafe extern "C" fn up_unpublish(
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
    delivered(deliver(&ns, up))
}

pub(super) unsafe extern "C" fn up_lookup(
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
    delivered(deliver(&ns, up))
}

/// `PMIX_LOG_STDERR`, `PMIX_LOG_STDOUT`: a client's text for the launcher's standard error or
/// output.
pub(super) const LOG_STDERR: &str = "pmix.log.stderr";
pub(super) const LOG_STDOUT: &str = "pmix.log.stdout";

/// The text of a `PMIx_Log` request for kauri's standard streams: (to stderr, text) for each
/// `PMIX_LOG_STDERR`/`PMIX_LOG_STDOUT` entry, in order; other channels are not kauri's.
pub(super) fn log_lines(data: &[(String, InfoVal)]) -> Vec<(bool, String)> {
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
pub(super) unsafe extern "C" fn up_log(
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
                kauri_os::console::err(&t);
            } else {
                kauri_os::console::out(&t);
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

pub(super) unsafe extern "C" fn up_query(
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

pub(super) unsafe extern "C" fn up_job_control(
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
    let status = crate::pmix::control::answer(&dirs);
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
