//! The C boundary: the exported `PMI_*` functions, declared in `contrib/libpmi/include/pmi.h`.
//!
//! Each function checks and converts its arguments with [`kauri_libpmi_common::ffi`], calls
//! [`crate::session`], and writes results back. Every body runs inside
//! [`kauri_libpmi_common::guard`], so a panic becomes `PMI_FAIL` and never unwinds into C.
//! This module is the only place of the crate with `unsafe` code.

#![allow(non_snake_case)]

use crate::codes::*;
use crate::session::{self, spawn_command, Code};
use kauri_libpmi_common::ffi::{
    opt_str_arg, slice, slice_mut, str_arg, str_array, write_int, write_str, ArgError,
};
use kauri_libpmi_common::guard;
use pmi_wire::Spawn;
use std::os::raw::{c_char, c_int};

/// `PMI_keyval_t`: one key and value of an info or preput vector.
#[repr(C)]
pub struct PmiKeyval {
    /// The key (NUL-terminated).
    pub key: *const c_char,
    /// The value (NUL-terminated).
    pub val: *mut c_char,
}

/// The longest port name `PMI_Lookup_name` writes, NUL included (MPICH's `MPI_MAX_PORT_NAME`).
const PORT_MAX: c_int = 256;

fn arg(e: ArgError) -> Code {
    match e {
        ArgError::Invalid => PMI_ERR_INVALID_ARG,
        ArgError::NotUtf8 => PMI_ERR_INVALID_VAL,
        ArgError::TooSmall => PMI_ERR_INVALID_LENGTH,
    }
}

/// Runs a call: `Ok` is `PMI_SUCCESS`, `Err(code)` is `code`, a panic is `PMI_FAIL`.
fn call(f: impl FnOnce() -> Result<(), Code>) -> c_int {
    guard(PMI_FAIL, || match f() {
        Ok(()) => PMI_SUCCESS,
        Err(c) => c,
    })
}

fn to_int(v: i64) -> Result<c_int, Code> {
    c_int::try_from(v).map_err(|_| PMI_FAIL)
}

/// Initialises PMI: connects to the server named by `PMI_FD` or `PMI_PORT`, or becomes a
/// singleton; `*spawned` is `PMI_TRUE` when the process was started by a spawn.
///
/// # Safety
/// `spawned` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Init(spawned: *mut c_int) -> c_int {
    call(|| {
        let s = session::init()?;
        // SAFETY: the caller's promise for `spawned`.
        unsafe { write_int(spawned, if s { PMI_TRUE } else { PMI_FALSE }) }.map_err(arg)
    })
}

/// `*initialized` is `PMI_TRUE` while PMI is initialised.
///
/// # Safety
/// `initialized` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Initialized(initialized: *mut c_int) -> c_int {
    call(|| {
        let v = if session::initialized() {
            PMI_TRUE
        } else {
            PMI_FALSE
        };
        // SAFETY: the caller's promise for `initialized`.
        unsafe { write_int(initialized, v) }.map_err(arg)
    })
}

/// Ends the session with the server.
#[no_mangle]
pub extern "C" fn PMI_Finalize() -> c_int {
    call(session::finalize)
}

/// Asks the server to end the job with `exit_code`, then exits the process with it.
///
/// # Safety
/// `error_msg` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_Abort(exit_code: c_int, error_msg: *const c_char) -> c_int {
    // SAFETY: the caller's promise for `error_msg`.
    let msg = match unsafe { opt_str_arg(error_msg) } {
        Ok(m) => m.unwrap_or("").to_string(),
        Err(_) => "(message not UTF-8)".to_string(),
    };
    // Exiting is what PMI_Abort does; a panic on the way must not unwind into C either.
    guard(PMI_FAIL, || session::abort(exit_code, &msg));
    std::process::exit(exit_code)
}

/// Writes one integer attribute of the session.
///
/// # Safety
/// `out` is null or points to a writable `int`.
unsafe fn int_out(
    out: *mut c_int,
    get: impl FnOnce(&mut session::Session) -> Result<i64, Code>,
) -> c_int {
    call(|| {
        let v = to_int(session::with(get)?)?;
        // SAFETY: the caller's promise for `out`.
        unsafe { write_int(out, v) }.map_err(arg)
    })
}

/// `*size` is the number of processes in the job.
///
/// # Safety
/// `size` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_size(size: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(size, |s| Ok(s.size())) }
}

/// `*rank` is this process's rank.
///
/// # Safety
/// `rank` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_rank(rank: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(rank, |s| Ok(s.rank())) }
}

/// `*size` is the universe size (the job size when the server does not know one).
///
/// # Safety
/// `size` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_universe_size(size: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(size, |s| s.universe_size()) }
}

/// `*appnum` is the index of this process's MPMD command.
///
/// # Safety
/// `appnum` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_appnum(appnum: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(appnum, |s| Ok(s.appnum())) }
}

/// `*size` is the number of processes on this node (from `PMI_process_mapping`).
///
/// # Safety
/// `size` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_clique_size(size: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(size, |s| Ok(s.clique()?.len() as i64)) }
}

/// Writes the ranks of the processes on this node, ascending, into `ranks` (room for
/// `length`, at least the clique size).
///
/// # Safety
/// `ranks` is null or points to `length` writable `int`s.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_clique_ranks(ranks: *mut c_int, length: c_int) -> c_int {
    call(|| {
        let clique: Vec<c_int> =
            session::with(|s| s.clique()?.iter().map(|&r| to_int(r as i64)).collect())?;
        if (length as i64) < clique.len() as i64 {
            return Err(PMI_ERR_INVALID_LENGTH);
        }
        // SAFETY: the caller's promise for `ranks` and `length`.
        let out = unsafe { slice_mut(ranks, length) }.map_err(arg)?;
        out[..clique.len()].copy_from_slice(&clique);
        Ok(())
    })
}

/// Writes a string attribute of the session into `buf` of `length` bytes.
///
/// # Safety
/// `buf` is null or points to `length` writable bytes.
unsafe fn str_out(
    buf: *mut c_char,
    length: c_int,
    get: impl FnOnce(&mut session::Session) -> Result<String, Code>,
) -> c_int {
    call(|| {
        let v = session::with(get)?;
        // SAFETY: the caller's promise for `buf` and `length`.
        unsafe { write_str(buf, length, &v) }.map_err(arg)
    })
}

/// Writes the job's KVS name into `kvsname` (`length` bytes).
///
/// # Safety
/// `kvsname` is null or points to `length` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_my_name(kvsname: *mut c_char, length: c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { str_out(kvsname, length, |s| Ok(s.kvsname().to_string())) }
}

/// The process group id: the KVS name (PMI-1.0 call kept for old programs).
///
/// # Safety
/// `id_str` is null or points to `length` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_id(id_str: *mut c_char, length: c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { str_out(id_str, length, |s| Ok(s.kvsname().to_string())) }
}

/// The KVS domain id: the KVS name (PMI-1.0 call kept for old programs).
///
/// # Safety
/// `id_str` is null or points to `length` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_kvs_domain_id(id_str: *mut c_char, length: c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { str_out(id_str, length, |s| Ok(s.kvsname().to_string())) }
}

/// `*length` is the buffer size `PMI_Get_id` needs.
///
/// # Safety
/// `length` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_id_length_max(length: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(length, |s| Ok(s.kvsname_max() as i64)) }
}

/// `*length` is the buffer size a KVS name needs, NUL included.
///
/// # Safety
/// `length` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_name_length_max(length: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(length, |s| Ok(s.kvsname_max() as i64)) }
}

/// `*length` is the buffer size a key needs, NUL included.
///
/// # Safety
/// `length` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_key_length_max(length: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(length, |s| Ok(s.key_max() as i64)) }
}

/// `*length` is the buffer size a value needs, NUL included. It is below the server's
/// `vallen_max`: a value that fits, encoded, still keeps the `put` line within 1024 bytes.
///
/// # Safety
/// `length` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get_value_length_max(length: *mut c_int) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { int_out(length, |s| Ok(s.value_max() as i64)) }
}

/// Stores `key` = `value` (visible to others after `PMI_Barrier`). Values may hold spaces.
///
/// # Safety
/// Each argument is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Put(
    kvsname: *const c_char,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for the three strings.
        let (kvsname, key, value) = unsafe { (str_arg(kvsname), str_arg(key), str_arg(value)) };
        let (kvsname, key) = (kvsname.map_err(arg)?, key.map_err(|_| PMI_ERR_INVALID_KEY)?);
        session::with(|s| s.put(kvsname, key, value.map_err(|_| PMI_ERR_INVALID_VAL)?))
    })
}

/// Commits the puts of this process: they are sent as they are made, so nothing is left to do.
///
/// # Safety
/// `kvsname` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Commit(kvsname: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `kvsname`.
        unsafe { str_arg(kvsname) }.map_err(arg)?;
        session::with(|_| Ok(()))
    })
}

/// Reads `key` into `value` (`length` bytes); `PMI_FAIL` when it is not there.
///
/// # Safety
/// `kvsname` and `key` are null or NUL-terminated strings; `value` is null or points to
/// `length` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_KVS_Get(
    kvsname: *const c_char,
    key: *const c_char,
    value: *mut c_char,
    length: c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for the two strings.
        let (kvsname, key) = unsafe { (str_arg(kvsname), str_arg(key)) };
        let (kvsname, key) = (kvsname.map_err(arg)?, key.map_err(|_| PMI_ERR_INVALID_KEY)?);
        let v = session::with(|s| s.get(kvsname, key))?;
        // SAFETY: the caller's promise for `value` and `length`.
        unsafe { write_str(value, length, &v) }.map_err(arg)
    })
}

/// The job-wide barrier; every put before it is visible to every get after it.
#[no_mangle]
pub extern "C" fn PMI_Barrier() -> c_int {
    call(|| session::with(|s| s.barrier()))
}

/// Publishes `service_name` with `port` in the server's name service.
///
/// # Safety
/// Both arguments are null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn PMI_Publish_name(
    service_name: *const c_char,
    port: *const c_char,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for the two strings.
        let (service, port) = unsafe { (str_arg(service_name), str_arg(port)) };
        let (service, port) = (service.map_err(arg)?, port.map_err(arg)?);
        session::with(|s| s.publish(service, port))
    })
}

/// Withdraws a published name.
///
/// # Safety
/// `service_name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PMI_Unpublish_name(service_name: *const c_char) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `service_name`.
        let service = unsafe { str_arg(service_name) }.map_err(arg)?;
        session::with(|s| s.unpublish(service))
    })
}

/// Looks a published name up; writes its port into `port` (at most 256 bytes, NUL included);
/// `PMI_FAIL` when nobody published it.
///
/// # Safety
/// `service_name` is null or a NUL-terminated string; `port` is null or points to 256
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn PMI_Lookup_name(service_name: *const c_char, port: *mut c_char) -> c_int {
    call(|| {
        // SAFETY: the caller's promise for `service_name`.
        let service = unsafe { str_arg(service_name) }.map_err(arg)?;
        let p = session::with(|s| s.lookup(service))?;
        // SAFETY: the caller's promise: `port` holds PORT_MAX bytes.
        unsafe { write_str(port, PORT_MAX, &p) }.map_err(arg)
    })
}

/// Reads the `n` pairs of a keyval vector.
///
/// # Safety
/// `v` is null or points to `n` `PMI_keyval_t` whose strings are null or NUL-terminated.
unsafe fn keyvals(v: *const PmiKeyval, n: c_int) -> Result<Vec<(String, String)>, Code> {
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

/// Reads a NULL-terminated argument vector.
///
/// # Safety
/// `argv` is null (no arguments) or points to string pointers ending with a null pointer.
unsafe fn argv_list(argv: *const *const c_char) -> Result<Vec<String>, Code> {
    let mut out = Vec::new();
    if argv.is_null() {
        return Ok(out);
    }
    loop {
        // SAFETY: the vector is null-terminated (the caller's promise), and we stop at null.
        let p = unsafe { *argv.add(out.len()) };
        if p.is_null() {
            return Ok(out);
        }
        // SAFETY: a non-null element is a NUL-terminated string (the caller's promise).
        out.push(unsafe { str_arg(p) }.map_err(arg)?.to_string());
    }
}

/// Starts `count` commands as one new job (`MPI_Comm_spawn_multiple`); `errors` receives one
/// code per process (room for the sum of `maxprocs`).
///
/// # Safety
/// `cmds`, `argvs`, `maxprocs`, `info_keyval_sizes` and `info_keyval_vectors` point to `count`
/// elements; each `argvs[i]` is null or a null-terminated vector; each
/// `info_keyval_vectors[i]` points to `info_keyval_sizes[i]` pairs; `preput_keyval_vector`
/// points to `preput_keyval_size` pairs; `errors` is null or points to `sum(maxprocs)`
/// writable `int`s.
#[no_mangle]
pub unsafe extern "C" fn PMI_Spawn_multiple(
    count: c_int,
    cmds: *const *const c_char,
    argvs: *const *const *const c_char,
    maxprocs: *const c_int,
    info_keyval_sizes: *const c_int,
    info_keyval_vectors: *const *const PmiKeyval,
    preput_keyval_size: c_int,
    preput_keyval_vector: *const PmiKeyval,
    errors: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promises for each array of `count` elements.
        let (cmds, argvs, maxprocs, info_sizes, info_vecs) = unsafe {
            (
                str_array(cmds, count).map_err(arg)?,
                slice(argvs, count).map_err(arg)?,
                slice(maxprocs, count).map_err(arg)?,
                slice(info_keyval_sizes, count).map_err(arg)?,
                slice(info_keyval_vectors, count).map_err(arg)?,
            )
        };
        let mut spawn = Spawn::default();
        for i in 0..cmds.len() {
            // SAFETY: argvs[i] and info_keyval_vectors[i] as promised by the caller.
            let (args, info) =
                unsafe { (argv_list(argvs[i])?, keyvals(info_vecs[i], info_sizes[i])?) };
            spawn
                .commands
                .push(spawn_command(cmds[i], maxprocs[i], args, info)?);
        }
        // SAFETY: the caller's promise for the preput vector.
        spawn.preput = unsafe { keyvals(preput_keyval_vector, preput_keyval_size) }?;
        let codes = session::with(|s| s.spawn(&spawn))?;
        let total: i64 = maxprocs.iter().map(|&m| m.max(0) as i64).sum();
        if !errors.is_null() {
            // SAFETY: the caller's promise: `errors` holds sum(maxprocs) ints.
            let out = unsafe { slice_mut(errors, to_int(total)?) }.map_err(arg)?;
            for (i, e) in out.iter_mut().enumerate() {
                *e = codes.get(i).copied().unwrap_or(0);
            }
        }
        Ok(())
    })
}

/// Recognises PMI-specific command-line options: this library has none, so nothing is
/// parsed (`*num_parsed` = 0, `*keyvalp` = NULL, `*size` = 0).
///
/// # Safety
/// The output pointers are null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Parse_option(
    num_args: c_int,
    _args: *mut *mut c_char,
    num_parsed: *mut c_int,
    keyvalp: *mut *mut PmiKeyval,
    size: *mut c_int,
) -> c_int {
    call(|| {
        if num_args < 1 {
            return Err(PMI_ERR_INVALID_NUM_ARGS);
        }
        // SAFETY: the caller's promises for the outputs.
        unsafe {
            write_int(num_parsed, 0).map_err(|_| PMI_ERR_INVALID_NUM_PARSED)?;
            write_int(size, 0).map_err(|_| PMI_ERR_INVALID_SIZE)?;
            if keyvalp.is_null() {
                return Err(PMI_ERR_INVALID_KEYVALP);
            }
            keyvalp.write(std::ptr::null_mut());
        }
        Ok(())
    })
}

/// Turns PMI-specific arguments into key-value pairs: this library has none, so the result is
/// empty (`*keyvalp` = NULL, `*size` = 0) and `argv` is left as it is.
///
/// # Safety
/// The output pointers are null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Args_to_keyval(
    _argcp: *mut c_int,
    _argvp: *mut *mut *mut c_char,
    keyvalp: *mut *mut PmiKeyval,
    size: *mut c_int,
) -> c_int {
    call(|| {
        // SAFETY: the caller's promises for the outputs.
        unsafe {
            write_int(size, 0).map_err(|_| PMI_ERR_INVALID_SIZE)?;
            if keyvalp.is_null() {
                return Err(PMI_ERR_INVALID_KEYVALP);
            }
            keyvalp.write(std::ptr::null_mut());
        }
        Ok(())
    })
}

/// Frees pairs made by `PMI_Args_to_keyval`, which makes none: accepts only an empty vector.
#[no_mangle]
pub extern "C" fn PMI_Free_keyvals(keyvalp: *mut PmiKeyval, size: c_int) -> c_int {
    call(|| {
        if size == 0 || keyvalp.is_null() {
            Ok(())
        } else {
            Err(PMI_ERR_INVALID_ARG)
        }
    })
}

/// The options string to pass to spawned processes: empty for this library.
///
/// # Safety
/// `str_` is null or points to `*length` writable bytes; `length` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn PMI_Get_options(str_: *mut c_char, length: *mut c_int) -> c_int {
    call(|| {
        if length.is_null() {
            return Err(PMI_ERR_INVALID_LENGTH);
        }
        // SAFETY: non-null, the caller promises a readable int.
        let len = unsafe { length.read() };
        // SAFETY: the caller's promise: `str_` holds `len` bytes.
        unsafe { write_str(str_, len, "") }.map_err(arg)?;
        // SAFETY: as above, writable.
        unsafe { write_int(length, 0) }.map_err(arg)
    })
}
