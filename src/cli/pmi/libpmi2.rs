//! `kauri pmi --method libpmi2`: Slurm's `libpmi2.so.0`, loaded at run time with `dlopen`.

use super::log::Log;
use super::{Session, SessionError};
use std::ffi::{c_char, c_int, c_void, CStr, CString};

/// `libpmi2`: Slurm's PMI-2 client library, loaded with `dlopen`.
pub(super) struct Libpmi2 {
    f: Pmi2Fns,
    rank: i64,
    size: i64,
    jobid: CString,
    log: Log,
    // The library stays loaded for the life of the process: its functions are in `f`, and
    // it may have threads or atexit handlers; unloading buys nothing.
    _handle: *mut c_void,
}

/// `PMI2_MAX_VALLEN` of `pmi2.h`.
const PMI2_MAX_VALLEN: usize = 1024;
/// `PMI2_MAX_KEYLEN` … the job id buffer uses `PMI2_MAX_VALLEN` too.
const PMI2_JOBID_LEN: usize = 1024;

type Pmi2Init = unsafe extern "C" fn(*mut c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int;
type Pmi2Void = unsafe extern "C" fn() -> c_int;
type Pmi2Abort = unsafe extern "C" fn(c_int, *const c_char) -> c_int;
type Pmi2JobGetId = unsafe extern "C" fn(*mut c_char, c_int) -> c_int;
type Pmi2Put = unsafe extern "C" fn(*const c_char, *const c_char) -> c_int;
type Pmi2Get = unsafe extern "C" fn(
    *const c_char,
    c_int,
    *const c_char,
    *mut c_char,
    c_int,
    *mut c_int,
) -> c_int;
type Pmi2GetJobAttr = unsafe extern "C" fn(*const c_char, *mut c_char, c_int, *mut c_int) -> c_int;

/// The functions of `pmi2.h` that `kauri pmi` calls.
struct Pmi2Fns {
    init: Pmi2Init,
    finalize: Pmi2Void,
    abort: Pmi2Abort,
    job_getid: Pmi2JobGetId,
    kvs_put: Pmi2Put,
    kvs_fence: Pmi2Void,
    kvs_get: Pmi2Get,
    getjobattr: Pmi2GetJobAttr,
}

/// The functions of `pmi2.h` that `kauri pmi` calls, in the order of [`Pmi2Fns`]'s fields:
/// looked up in this order, so the first one missing is the one an error names.
const SYMBOLS: [&str; 8] = [
    "PMI2_Init",
    "PMI2_Finalize",
    "PMI2_Abort",
    "PMI2_Job_GetId",
    "PMI2_KVS_Put",
    "PMI2_KVS_Fence",
    "PMI2_KVS_Get",
    "PMI2_Info_GetJobAttr",
];

/// Every symbol of [`SYMBOLS`] in `handle`, in that order, or an error naming the first that
/// is missing.
fn lookup_all(handle: *mut c_void, library: &str) -> Result<[*mut c_void; 8], SessionError> {
    let mut found = [std::ptr::null_mut(); 8];
    for (slot, name) in found.iter_mut().zip(SYMBOLS) {
        *slot = symbol(handle, library, name)?;
    }
    Ok(found)
}

/// `dlsym(handle, name)`, or an error naming what is missing.
fn symbol(
    handle: *mut c_void,
    library: &str,
    name: &'static str,
) -> Result<*mut c_void, SessionError> {
    let c = CString::new(name).map_err(|_| SessionError::BadSymbol(name))?;
    // SAFETY: handle is a live dlopen handle and c a NUL-terminated string.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        Err(SessionError::MissingSymbol {
            library: library.to_string(),
            symbol: name,
        })
    } else {
        Ok(p)
    }
}

/// The text of the last `dlerror`.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// The error of `pmi2.h` call `call` (`PMI2_KVS_Put KEY`) that returned `rc`.
fn pmi2_failed(call: String, rc: c_int) -> SessionError {
    SessionError::Pmi2 { call, rc }
}

/// A C string from a buffer the library filled (up to its first NUL).
fn from_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `s` as a C string, or an error naming it as `what` when it holds a NUL byte.
fn c_arg(what: &'static str, s: &str) -> Result<CString, SessionError> {
    CString::new(s).map_err(|_| SessionError::Nul {
        what,
        value: s.to_string(),
    })
}

impl Libpmi2 {
    pub(super) fn open(library: &str, log: &Log) -> Result<Libpmi2, SessionError> {
        if ["PMI_FD", "PMI_PORT"]
            .iter()
            .all(|v| std::env::var(v).map_or(true, |x| x.is_empty()))
        {
            // Without them, the library runs as a singleton and "succeeds" alone.
            return Err(SessionError::NoLibpmi2Server);
        }
        let (handle, f) = Libpmi2::load(library, log)?;
        let (mut spawned, mut size, mut rank, mut appnum) = (0, 0, 0, 0);
        // SAFETY: four valid int pointers for the library to fill.
        let rc = unsafe { (f.init)(&mut spawned, &mut size, &mut rank, &mut appnum) };
        log.set_rank(rank.into());
        log.call(
            "PMI2_Init()",
            &format!("{rc} (spawned {spawned}, size {size}, rank {rank}, appnum {appnum})"),
        );
        if rc != 0 {
            return Err(SessionError::Pmi2Init(rc));
        }
        let mut buf = vec![0 as c_char; PMI2_JOBID_LEN];
        // SAFETY: buf holds PMI2_JOBID_LEN chars, the length passed.
        let rc = unsafe { (f.job_getid)(buf.as_mut_ptr(), PMI2_JOBID_LEN as c_int) };
        let jobid = from_buf(&buf);
        log.call("PMI2_Job_GetId()", &format!("{rc} ({jobid:?})"));
        if rc != 0 {
            return Err(pmi2_failed("PMI2_Job_GetId".into(), rc));
        }
        Ok(Libpmi2 {
            f,
            rank: rank.into(),
            size: size.into(),
            jobid: c_arg("job id", &jobid)?,
            log: log.clone(),
            _handle: handle,
        })
    }

    /// `dlopen`s `library` and finds the functions of `pmi2.h` in it.
    fn load(library: &str, log: &Log) -> Result<(*mut c_void, Pmi2Fns), SessionError> {
        let path = c_arg("--library", library)?;
        // SAFETY: path is NUL-terminated; loading runs the library's constructors, which is
        // what a program linked to it does too.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            let e = dl_error();
            log.call(&format!("dlopen({library})"), &e);
            return Err(SessionError::Load {
                library: library.to_string(),
                why: e,
            });
        }
        log.call(&format!("dlopen({library})"), "ok");
        let [init, finalize, abort, job_getid, kvs_put, kvs_fence, kvs_get, getjobattr] =
            lookup_all(handle, library)?;
        // SAFETY: each symbol is the pmi2.h function of that name (in the order of
        // [`SYMBOLS`]), whose C signature the type it is cast to repeats (Slurm's
        // contribs/pmi2/pmi2.h).
        let f = unsafe {
            Pmi2Fns {
                init: std::mem::transmute::<*mut c_void, Pmi2Init>(init),
                finalize: std::mem::transmute::<*mut c_void, Pmi2Void>(finalize),
                abort: std::mem::transmute::<*mut c_void, Pmi2Abort>(abort),
                job_getid: std::mem::transmute::<*mut c_void, Pmi2JobGetId>(job_getid),
                kvs_put: std::mem::transmute::<*mut c_void, Pmi2Put>(kvs_put),
                kvs_fence: std::mem::transmute::<*mut c_void, Pmi2Void>(kvs_fence),
                kvs_get: std::mem::transmute::<*mut c_void, Pmi2Get>(kvs_get),
                getjobattr: std::mem::transmute::<*mut c_void, Pmi2GetJobAttr>(getjobattr),
            }
        };
        Ok((handle, f))
    }
}

impl Session for Libpmi2 {
    fn rank(&self) -> i64 {
        self.rank
    }
    fn size(&self) -> i64 {
        self.size
    }
    fn max_value(&self) -> Option<usize> {
        // The buffer's size includes the NUL.
        Some(PMI2_MAX_VALLEN - 1)
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), SessionError> {
        let (k, v) = (c_arg("key", key)?, c_arg("value", value)?);
        // SAFETY: two NUL-terminated strings that outlive the call.
        let rc = unsafe { (self.f.kvs_put)(k.as_ptr(), v.as_ptr()) };
        self.log
            .call(&format!("PMI2_KVS_Put({key}, {value:?})"), &rc.to_string());
        match rc {
            0 => Ok(()),
            rc => Err(pmi2_failed(format!("PMI2_KVS_Put {key}"), rc)),
        }
    }
    fn fence(&mut self) -> Result<(), SessionError> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.f.kvs_fence)() };
        self.log.call("PMI2_KVS_Fence()", &rc.to_string());
        match rc {
            0 => Ok(()),
            rc => Err(pmi2_failed("PMI2_KVS_Fence".into(), rc)),
        }
    }
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, SessionError> {
        let k = c_arg("key", key)?;
        let src = c_int::try_from(owner).map_err(|_| SessionError::BadRank(owner))?;
        let mut buf = vec![0 as c_char; PMI2_MAX_VALLEN + 1];
        let mut len: c_int = 0;
        // SAFETY: NUL-terminated job id and key; buf holds PMI2_MAX_VALLEN + 1 chars and the
        // library is told PMI2_MAX_VALLEN, so it always leaves a NUL.
        let rc = unsafe {
            (self.f.kvs_get)(
                self.jobid.as_ptr(),
                src,
                k.as_ptr(),
                buf.as_mut_ptr(),
                PMI2_MAX_VALLEN as c_int,
                &mut len,
            )
        };
        let v = from_buf(&buf);
        self.log.call(
            &format!("PMI2_KVS_Get({:?}, {src}, {key})", self.jobid),
            &format!("{rc} ({len} bytes {v:?})"),
        );
        match rc {
            0 => Ok(Some(v)),
            // Slurm's library returns an error for a key nobody put.
            rc => Err(pmi2_failed(
                format!("PMI2_KVS_Get {key} from rank {owner}"),
                rc,
            )),
        }
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, SessionError> {
        let k = c_arg("key", key)?;
        let mut buf = vec![0 as c_char; PMI2_MAX_VALLEN + 1];
        let mut found: c_int = 0;
        // SAFETY: NUL-terminated name; buf holds one more char than the length passed.
        let rc = unsafe {
            (self.f.getjobattr)(
                k.as_ptr(),
                buf.as_mut_ptr(),
                PMI2_MAX_VALLEN as c_int,
                &mut found,
            )
        };
        let v = from_buf(&buf);
        self.log.call(
            &format!("PMI2_Info_GetJobAttr({key})"),
            &format!("{rc} (found {found}, {v:?})"),
        );
        if rc == 0 && found != 0 {
            return Ok(Some(v));
        }
        match self.get(-1, key) {
            Ok(v) => Ok(v.filter(|v| !v.is_empty())),
            Err(_) if rc == 0 => Ok(None),
            Err(e) => Err(SessionError::Pmi2JobAttr {
                key: key.to_string(),
                rc,
                get: Box::new(e),
            }),
        }
    }
    fn finalize(self: Box<Self>) -> Result<(), SessionError> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.f.finalize)() };
        self.log.call("PMI2_Finalize()", &rc.to_string());
        match rc {
            0 => Ok(()),
            rc => Err(pmi2_failed("PMI2_Finalize".into(), rc)),
        }
    }
    fn abort(self: Box<Self>, _code: i32, msg: &str) {
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: NUL-terminated message; flag 1: the whole job.
        let rc = unsafe { (self.f.abort)(1, m.as_ptr()) };
        self.log
            .call(&format!("PMI2_Abort(1, {msg:?})"), &rc.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_one_line() {
        let e = Libpmi2::load("/nonexistent/libpmi2.so.0", &Log::new(false))
            .err()
            .expect("loaded a library that does not exist");
        assert!(matches!(&e, SessionError::Load { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.starts_with("cannot load /nonexistent/libpmi2.so.0"),
            "{e}"
        );
        let e = Libpmi2::load("libc.so.6", &Log::new(false))
            .err()
            .expect("libc is not a PMI-2 library");
        assert!(
            matches!(
                &e,
                SessionError::MissingSymbol {
                    symbol: "PMI2_Init",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("has no PMI2_Init"), "{e}");
    }
}
