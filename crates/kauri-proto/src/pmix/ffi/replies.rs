//! The answers to the library's requests: each reply holds the library's callback for one
//! request and is answered once, from any thread.

use super::server::FINALIZED;
use super::types::*;
use super::values::*;
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;
use std::sync::atomic::Ordering;

/// The library's callback for a query, to be called once.
#[derive(Debug)]
pub struct QueryReply {
    pub(super) cbfunc: unsafe extern "C" fn(
        Status,
        *mut pmix_info_t,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
    pub(super) cbdata: *mut c_void,
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

/// The library's callback for a spawn, to be called once.
#[derive(Debug)]
pub struct SpawnReply {
    pub(super) cbfunc: unsafe extern "C" fn(Status, *mut c_char, *mut c_void),
    pub(super) cbdata: *mut c_void,
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
    pub(super) cbfunc: unsafe extern "C" fn(Status, *mut c_void),
    pub(super) cbdata: *mut c_void,
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
    pub(super) op: GroupOp,
    pub(super) members: Vec<(String, u32)>,
    pub(super) cbfunc: unsafe extern "C" fn(
        Status,
        *mut pmix_info_t,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
    pub(super) cbdata: *mut c_void,
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
    pub(super) cbfunc: unsafe extern "C" fn(Status, *mut pmix_pdata_t, usize, *mut c_void),
    pub(super) cbdata: *mut c_void,
}

// SAFETY: as for ModexReply: the library accepts the callback from any thread.
unsafe impl Send for LookupReply {}

impl LookupReply {
    /// Completes the lookup: `found` holds each name and its value as the name table keeps
    /// it (see [`crate::pmix::names`]). A typed value goes back with its type and its
    /// publisher; a string or byte object as published, said to come from `publisher` (a
    /// namespace) and rank `PMIX_RANK_UNDEF` (the table does not keep who published those).
    pub fn done(self, status: Status, found: &[(String, String)], publisher: &str) {
        use crate::pmix::names::{decode_bytes, decode_scalar};
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

/// The library's callback for a fence or a direct-modex request, to be called once.
#[derive(Debug)]
pub struct ModexReply {
    pub(super) cbfunc: unsafe extern "C" fn(
        Status,
        *const c_char,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
    pub(super) cbdata: *mut c_void,
}

// SAFETY: the callback and its data belong to the library, which accepts the call from any
// thread (it shifts the work into its progress thread).
unsafe impl Send for ModexReply {}

unsafe extern "C" fn release_blob(p: *mut c_void) {
    if !p.is_null() {
        // SAFETY: p is the Box<Bytes> leaked in `ModexReply::reply`, released once by the
        // library when it is done with the data.
        drop(unsafe { Box::from_raw(p.cast::<bytes::Bytes>()) });
    }
}

impl ModexReply {
    /// Hands `data` (every host's blob, or one rank's data) to the library. The bytes stay
    /// alive until the library releases them; a fence's blobs are handed as they came in
    /// the tree's frame, shared with it, not copied.
    pub fn reply(self, status: Status, data: impl Into<bytes::Bytes>) {
        if FINALIZED.load(Ordering::SeqCst) {
            return;
        }
        let blob = Box::new(data.into());
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
