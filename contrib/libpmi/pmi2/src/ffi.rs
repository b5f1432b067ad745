//! The C boundary: the exported `PMI2_*` functions, declared in `contrib/libpmi/include/pmi2.h`.
//!
//! Each function checks and converts its arguments with [`kauri_libpmi_common::ffi`], calls
//! [`crate::session`], and writes results back. Every body runs inside
//! [`kauri_libpmi_common::guard`], so a panic becomes `PMI2_FAIL` and never unwinds into C.
//! This module is the only place of the crate with `unsafe` code.

#![allow(non_snake_case)]

use crate::codes::*;
use crate::session::{self, int_array, Code};
use kauri_libpmi_common::ffi::{
    opt_str_arg, slice, slice_mut, str_arg, str_array, write_int, write_opt_int, write_str,
    write_str_truncated, ArgError,
};
use kauri_libpmi_common::guard;
use pmi_wire::{Spawn, SpawnCommand};
use std::ffi::c_void;
use std::os::raw::{c_char, c_int};

/// `PMI2_Keyval_t`: one key and value of a spawn's info or preput vector.
#[repr(C)]
pub struct Pmi2Keyval {
    /// The key (NUL-terminated).
    pub key: *const c_char,
    /// The value (NUL-terminated).
    pub val: *const c_char,
}

/// `PMI2_Connect_comm_t`: the connection a job connect may use to copy a KVS. This library
/// never copies one, so it does not call these.
#[repr(C)]
pub struct Pmi2ConnectComm {
    /// Reads from the peer job's leader.
    pub read: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int>,
    /// Writes to the peer job's leader.
    pub write: Option<unsafe extern "C" fn(*const c_void, c_int, *mut c_void) -> c_int>,
    /// Passed to `read` and `write`.
    pub ctx: *mut c_void,
    /// 1: this side is the master, 0: it is not, -1: neither.
    pub is_master: c_int,
}

fn arg(e: ArgError) -> Code {
    match e {
        ArgError::Invalid => PMI2_ERR_INVALID_ARG,
        ArgError::NotUtf8 => PMI2_ERR_INVALID_VAL,
        ArgError::TooSmall => PMI2_ERR_INVALID_LENGTH,
    }
}

fn call(f: impl FnOnce() -> Result<(), Code>) -> c_int {
    guard(PMI2_FAIL, || match f() {
        Ok(()) => PMI2_SUCCESS,
        Err(c) => c,
    })
}

fn to_int(v: i64) -> Result<c_int, Code> {
    c_int::try_from(v).map_err(|_| PMI2_FAIL)
}

/// Initialises PMI-2: connects to the server named by `PMI_FD` or `PMI_PORT`, or becomes a
/// singleton. Each output pointer may be null.
///
/// # Safety
/// Each pointer is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Init(
    spawned: *mut c_int,
    size: *mut c_int,
    rank: *mut c_int,
    appnum: *mut c_int,
) -> c_int {
    call(|| {
        let id = session::init()?;
        let (sz, rk, an) = (to_int(id.size)?, to_int(id.rank)?, to_int(id.appnum)?);
        // SAFETY: the caller's promise for the four outputs.
        unsafe {
            write_opt_int(spawned, c_int::from(id.spawned));
            write_opt_int(size, sz);
            write_opt_int(rank, rk);
            write_opt_int(appnum, an);
        }
        Ok(())
    })
}

/// Ends the session with the server.
#[no_mangle]
pub extern "C" fn PMI2_Finalize() -> c_int {
    call(session::finalize)
}

/// Non-zero while PMI-2 is initialised.
#[no_mangle]
pub extern "C" fn PMI2_Initialized() -> c_int {
    guard(0, || c_int::from(session::initialized()))
}

/// Asks the server to end the job (`flag` non-zero) or this process, then exits with status 1.
///
/// # Safety
/// `msg` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Abort(flag: c_int, msg: *const c_char) -> c_int {
    // SAFETY: the caller's promise for `msg`.
    let msg = match unsafe { opt_str_arg(msg) } {
        Ok(m) => m.unwrap_or("").to_string(),
        Err(_) => "(message not UTF-8)".to_string(),
    };
    guard(PMI2_FAIL, || session::abort(flag != 0, &msg));
    std::process::exit(session::ABORT_STATUS)
}

/// Reads the `n` pairs of a keyval vector.
///
/// # Safety
/// `v` is null or points to `n` pairs whose strings are null or NUL-terminated.
unsafe fn keyvals(v: *const Pmi2Keyval, n: c_int) -> Result<Vec<(String, String)>, Code> {
    // SAFETY: the caller's promise for the vector.
    let pairs = unsafe { slice(v, n) }.map_err(arg)?;
    pairs
        .iter()
        .map(|kv| {
            // SAFETY: the caller's promise for each pair's strings.
            let (k, v) = unsafe { (str_arg(kv.key), str_arg(kv.val)) };
            Ok((k.map_err(arg)?.to_string(), v.map_err(arg)?.to_string()))
        })
        .collect()
}

/// Starts `count` commands as one new job. `argvs[i]` holds `argcs[i]` arguments (without the
/// command); `info_keyval_vectors[i]` points to `info_keyval_sizes[i]` pairs;
/// `preput_keyval_vector[k]` points to the k-th preput pair. The new job's id goes into
/// `jobId` (`jobIdSize` bytes, may be null), one error code per process into `errors` (room
/// for the sum of `maxprocs`, may be null).
///
/// # Safety
/// The arrays hold the elements described above; strings are NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_Spawn(
    count: c_int,
    cmds: *const *const c_char,
    argcs: *const c_int,
    argvs: *const *const *const c_char,
    maxprocs: *const c_int,
    info_keyval_sizes: *const c_int,
    info_keyval_vectors: *const *const Pmi2Keyval,
    preput_keyval_size: c_int,
    preput_keyval_vector: *const *const Pmi2Keyval,
    jobId: *mut c_char,
    jobIdSize: c_int,
    errors: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promises for each array of `count` elements.
        let (cmds, argcs, argvs, maxprocs, info_sizes, info_vecs) = unsafe {
            (
                str_array(cmds, count).map_err(arg)?,
                slice(argcs, count).map_err(arg)?,
                slice(argvs, count).map_err(arg)?,
                slice(maxprocs, count).map_err(arg)?,
                slice(info_keyval_sizes, count).map_err(arg)?,
                slice(info_keyval_vectors, count).map_err(arg)?,
            )
        };
        let mut spawn = Spawn::default();
        for i in 0..cmds.len() {
            // SAFETY: argvs[i] holds argcs[i] strings, info_keyval_vectors[i] holds
            // info_keyval_sizes[i] pairs (the caller's promise).
            let (args, info) = unsafe {
                (
                    str_array(argvs[i], argcs[i]).map_err(arg)?,
                    keyvals(info_vecs[i], info_sizes[i])?,
                )
            };
            spawn.commands.push(SpawnCommand {
                execname: cmds[i].to_string(),
                nprocs: u32::try_from(maxprocs[i]).map_err(|_| PMI2_ERR_INVALID_ARG)?,
                args: args.into_iter().map(str::to_string).collect(),
                info,
            });
        }
        // SAFETY: the caller's promise: preput_keyval_size pointers to pairs.
        let preput = unsafe { slice(preput_keyval_vector, preput_keyval_size) }.map_err(arg)?;
        for &p in preput {
            // SAFETY: each pointer points to one pair (the caller's promise).
            spawn.preput.extend(unsafe { keyvals(p, 1) }?);
        }
        let (jobid, codes) = session::with(|s| s.spawn(&spawn))?;
        if !jobId.is_null() {
            // SAFETY: the caller's promise: jobId holds jobIdSize bytes.
            unsafe { write_str(jobId, jobIdSize, &jobid) }.map_err(arg)?;
        }
        if !errors.is_null() {
            let total: i64 = maxprocs.iter().map(|&m| i64::from(m.max(0))).sum();
            // SAFETY: the caller's promise: errors holds sum(maxprocs) ints.
            let out = unsafe { slice_mut(errors, to_int(total)?) }.map_err(arg)?;
            for (i, e) in out.iter_mut().enumerate() {
                *e = codes.get(i).copied().unwrap_or(0);
            }
        }
        Ok(())
    })
}

/// Writes the job id into `jobid` (`jobid_size` bytes).
///
/// # Safety
/// `jobid` is null or points to `jobid_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_GetId(jobid: *mut c_char, jobid_size: c_int) -> c_int {
    call(|| {
        let id = session::with(|s| Ok(s.jobid().to_string()))?;
        // SAFETY: the caller's promise for the buffer.
        unsafe { write_str(jobid, jobid_size, &id) }.map_err(arg)
    })
}

/// `*rank` is this process's rank.
///
/// # Safety
/// `rank` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_GetRank(rank: *mut c_int) -> c_int {
    call(|| {
        let r = to_int(session::with(|s| Ok(s.identity().rank))?)?;
        // SAFETY: the caller's promise for `rank`.
        unsafe { write_int(rank, r) }.map_err(arg)
    })
}

/// `*size` is the number of processes in the job (as MPICH's and Slurm's clients answer).
///
/// # Safety
/// `size` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetSize(size: *mut c_int) -> c_int {
    call(|| {
        let n = to_int(session::with(|s| Ok(s.identity().size))?)?;
        // SAFETY: the caller's promise for `size`.
        unsafe { write_int(size, n) }.map_err(arg)
    })
}

/// Connects to the job `jobid`. Succeeds when the server shares that job's KVS; `conn` is not
/// used (this library never copies a KVS through it).
///
/// # Safety
/// `jobid` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_Connect(
    jobid: *const c_char,
    _conn: *mut Pmi2ConnectComm,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `jobid`.
        let j = unsafe { str_arg(jobid) }.map_err(arg)?;
        session::with(|s| s.connect(j))
    })
}

/// Ends a connection made by `PMI2_Job_Connect`.
///
/// # Safety
/// `jobid` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Job_Disconnect(jobid: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `jobid`.
        let j = unsafe { str_arg(jobid) }.map_err(arg)?;
        session::with(|s| s.disconnect(j))
    })
}

/// Stores `key` = `value` (visible to the job after `PMI2_KVS_Fence`).
///
/// # Safety
/// Both arguments are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn PMI2_KVS_Put(key: *const c_char, value: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for the two strings.
        let (k, v) = unsafe { (str_arg(key), str_arg(value)) };
        let (k, v) = (
            k.map_err(|_| PMI2_ERR_INVALID_KEY)?,
            v.map_err(|_| PMI2_ERR_INVALID_VAL)?,
        );
        session::with(|s| s.put(k, v))
    })
}

/// The collective commit: afterwards every put before it is visible to every get.
#[no_mangle]
pub extern "C" fn PMI2_KVS_Fence() -> c_int {
    call(|| session::with(|s| s.fence()))
}

/// Reads `key` (from the job `jobid`, null for this job; `src_pmi_id` is the rank that put it,
/// or `PMI2_ID_NULL`) into `value` (`maxvalue` bytes). `*vallen` is the value's length, or its
/// negative when the value did not fit and was truncated. `PMI2_FAIL` when not found.
///
/// # Safety
/// `jobid` and `key` are null or NUL-terminated strings; `value` points to `maxvalue`
/// writable bytes; `vallen` is null or a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_KVS_Get(
    jobid: *const c_char,
    src_pmi_id: c_int,
    key: *const c_char,
    value: *mut c_char,
    maxvalue: c_int,
    vallen: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for the two strings.
        let (j, k) = unsafe { (opt_str_arg(jobid), str_arg(key)) };
        let (j, k) = (j.map_err(arg)?, k.map_err(|_| PMI2_ERR_INVALID_KEY)?);
        let src = (src_pmi_id >= 0).then_some(i64::from(src_pmi_id));
        let v = session::with(|s| s.get(j, src, k))?;
        // SAFETY: the caller's promise for `value` and `maxvalue`.
        let n = unsafe { write_str_truncated(value, maxvalue, &v) }.map_err(arg)?;
        let len = to_int(v.len() as i64)?;
        // SAFETY: the caller's promise for `vallen`.
        unsafe { write_opt_int(vallen, if n < v.len() { -len } else { len }) };
        Ok(())
    })
}

/// Writes an attribute lookup: the value (if found) into `value`, `*found` 1 or 0.
///
/// # Safety
/// `value` points to `valuelen` writable bytes; `found` is null or a writable `int`.
unsafe fn attr_out(
    found_value: Option<String>,
    value: *mut c_char,
    valuelen: c_int,
    found: *mut c_int,
) -> Result<(), Code> {
    if let Some(v) = &found_value {
        // SAFETY: the caller's promise for the buffer.
        unsafe { write_str(value, valuelen, v) }.map_err(arg)?;
    }
    // SAFETY: the caller's promise for `found`.
    unsafe { write_opt_int(found, c_int::from(found_value.is_some())) };
    Ok(())
}

/// Reads the node attribute `name` into `value` (`valuelen` bytes); `*found` says whether it
/// exists. With `waitfor` non-zero, waits until a process of this node puts it.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `value` points to `valuelen` writable bytes;
/// `found` is null or a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetNodeAttr(
    name: *const c_char,
    value: *mut c_char,
    valuelen: c_int,
    found: *mut c_int,
    waitfor: c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `name`.
        let n = unsafe { str_arg(name) }.map_err(|_| PMI2_ERR_INVALID_KEY)?;
        let v = session::with(|s| s.get_node_attr(n, waitfor != 0))?;
        // SAFETY: the caller's promises, passed on.
        unsafe { attr_out(v, value, valuelen, found) }
    })
}

/// Writes an integer-array attribute: its elements into `array` (room for `arraylen`),
/// `*outlen` their count, `*found` 1 or 0.
///
/// # Safety
/// `array` points to `arraylen` writable `int`s; `outlen` and `found` are null or writable.
unsafe fn int_array_out(
    found_value: Option<String>,
    array: *mut c_int,
    arraylen: c_int,
    outlen: *mut c_int,
    found: *mut c_int,
) -> Result<(), Code> {
    let mut count = 0;
    if let Some(v) = &found_value {
        let ints = int_array(v)?;
        // SAFETY: the caller's promise for the array.
        let out = unsafe { slice_mut(array, arraylen) }.map_err(arg)?;
        count = ints.len().min(out.len());
        out[..count].copy_from_slice(&ints[..count]);
    }
    // SAFETY: the caller's promises for the two outputs.
    unsafe {
        write_opt_int(outlen, to_int(count as i64)?);
        write_opt_int(found, c_int::from(found_value.is_some()));
    }
    Ok(())
}

/// Reads the node attribute `name` as a comma-separated list of integers.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `array` points to `arraylen` writable `int`s;
/// `outlen` and `found` are null or writable `int`s.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetNodeAttrIntArray(
    name: *const c_char,
    array: *mut c_int,
    arraylen: c_int,
    outlen: *mut c_int,
    found: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `name`.
        let n = unsafe { str_arg(name) }.map_err(|_| PMI2_ERR_INVALID_KEY)?;
        let v = session::with(|s| s.get_node_attr(n, false))?;
        // SAFETY: the caller's promises, passed on.
        unsafe { int_array_out(v, array, arraylen, outlen, found) }
    })
}

/// Stores the node attribute `name` = `value`, visible to the processes of this node at once.
///
/// # Safety
/// Both arguments are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_PutNodeAttr(name: *const c_char, value: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for the two strings.
        let (k, v) = unsafe { (str_arg(name), str_arg(value)) };
        let (k, v) = (
            k.map_err(|_| PMI2_ERR_INVALID_KEY)?,
            v.map_err(|_| PMI2_ERR_INVALID_VAL)?,
        );
        session::with(|s| s.put_node_attr(k, v))
    })
}

/// Reads the job attribute `name` (`PMI_process_mapping`, `universeSize`, …) into `value`
/// (`valuelen` bytes); `*found` says whether it exists.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `value` points to `valuelen` writable bytes;
/// `found` is null or a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetJobAttr(
    name: *const c_char,
    value: *mut c_char,
    valuelen: c_int,
    found: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `name`.
        let n = unsafe { str_arg(name) }.map_err(|_| PMI2_ERR_INVALID_KEY)?;
        let v = session::with(|s| s.get_job_attr(n))?;
        // SAFETY: the caller's promises, passed on.
        unsafe { attr_out(v, value, valuelen, found) }
    })
}

/// Reads the job attribute `name` as a comma-separated list of integers.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `array` points to `arraylen` writable `int`s;
/// `outlen` and `found` are null or writable `int`s.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Info_GetJobAttrIntArray(
    name: *const c_char,
    array: *mut c_int,
    arraylen: c_int,
    outlen: *mut c_int,
    found: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `name`.
        let n = unsafe { str_arg(name) }.map_err(|_| PMI2_ERR_INVALID_KEY)?;
        let v = session::with(|s| s.get_job_attr(n))?;
        // SAFETY: the caller's promises, passed on.
        unsafe { int_array_out(v, array, arraylen, outlen, found) }
    })
}

/// Publishes `service_name` with `port`. `info_ptr` (MPI info hints) is ignored.
///
/// # Safety
/// `service_name` and `port` are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Nameserv_publish(
    service_name: *const c_char,
    _info_ptr: *const c_void,
    port: *const c_char,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for the two strings.
        let (n, p) = unsafe { (str_arg(service_name), str_arg(port)) };
        let (n, p) = (n.map_err(arg)?, p.map_err(arg)?);
        session::with(|s| s.publish(n, p))
    })
}

/// Looks `service_name` up; writes its port into `port` (`portLen` bytes); `PMI2_FAIL` when
/// nobody published it. `info_ptr` is ignored.
///
/// # Safety
/// `service_name` is null or a NUL-terminated string; `port` points to `portLen` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Nameserv_lookup(
    service_name: *const c_char,
    _info_ptr: *const c_void,
    port: *mut c_char,
    portLen: c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `service_name`.
        let n = unsafe { str_arg(service_name) }.map_err(arg)?;
        let p = session::with(|s| s.lookup(n))?;
        // SAFETY: the caller's promise for the buffer.
        unsafe { write_str(port, portLen, &p) }.map_err(arg)
    })
}

/// Withdraws a published name. `info_ptr` is ignored.
///
/// # Safety
/// `service_name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI2_Nameserv_unpublish(
    service_name: *const c_char,
    _info_ptr: *const c_void,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `service_name`.
        let n = unsafe { str_arg(service_name) }.map_err(arg)?;
        session::with(|s| s.unpublish(n))
    })
}
