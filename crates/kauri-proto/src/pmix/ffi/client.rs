//! The client side (`kauri pmi --method pmix`): the same library, as a rank uses it.

use super::loader::*;
use super::types::*;
use super::values::*;
use crate::pmix::PmixError;
use std::ffi::{c_char, CStr};
use std::ptr;

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

/// `Ok` for `PMIX_SUCCESS`, else [`PmixError::ClientCall`] of `call` with the status's name.
fn client_check(call: &'static str, rc: Status) -> Result<(), PmixError> {
    if rc == PMIX_SUCCESS {
        Ok(())
    } else {
        Err(PmixError::ClientCall {
            call,
            status: rc,
            name: error_string(rc),
        })
    }
}

impl PmixClient {
    /// `PMIx_Init`: connects to the PMIx server named by the environment (`PMIX_SERVER_URI*`,
    /// `PMIX_NAMESPACE`, `PMIX_RANK`).
    pub fn init() -> Result<PmixClient, PmixError> {
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
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), PmixError> {
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
    pub fn commit(&mut self) -> Result<(), PmixError> {
        // SAFETY: no arguments.
        client_check("PMIx_Commit", unsafe { (self.lib.client_commit)() })
    }

    /// `PMIx_Fence` over the whole namespace; with `collect`, `PMIX_COLLECT_DATA`: the
    /// committed data travels with the fence (otherwise a get fetches it from its owner).
    pub fn fence(&mut self, collect: bool) -> Result<(), PmixError> {
        let all = proc_t(&self.nspace, PMIX_RANK_WILDCARD);
        let info = raw_info("pmix.collect", PMIX_BOOL, pmix_value_data { flag: collect });
        // SAFETY: one valid proc and one valid info, both outliving the blocking call.
        let rc = unsafe { (self.lib.client_fence)(&all, 1, &info, 1) };
        client_check("PMIx_Fence", rc)
    }

    /// `PMIx_Get` of `key` as `rank` of this namespace put it (`None`: the namespace itself,
    /// for job keys such as `pmix.job.size`), as text; `Ok(None)` when not found.
    pub fn get(&mut self, rank: Option<u32>, key: &str) -> Result<Option<String>, PmixError> {
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
            return Err(PmixError::NoValue);
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
    pub fn size(&mut self) -> Result<u32, PmixError> {
        let v = self
            .get(None, "pmix.job.size")?
            .ok_or(PmixError::NoJobSize)?;
        v.parse().map_err(|_| PmixError::BadJobSize(v))
    }

    /// `PMIx_Abort` of the whole namespace with `code`.
    pub fn abort(self, code: i32, msg: &str) -> Result<(), PmixError> {
        let m = c_string(msg);
        // SAFETY: NUL-terminated message; no procs means the caller's whole namespace.
        let rc = unsafe { (self.lib.client_abort)(code, m.as_ptr(), ptr::null_mut(), 0) };
        client_check("PMIx_Abort", rc)
    }

    /// `PMIx_Finalize`.
    pub fn finalize(self) -> Result<(), PmixError> {
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
