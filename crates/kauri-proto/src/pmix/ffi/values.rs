//! Values across the border: Rust values into `pmix_info_t` arrays ([`InfoArray`]), and
//! what the library passes in (procs, strings, infos) back into Rust values.

use super::locality::Distance;
use super::types::*;
use std::ffi::{c_char, c_int, CStr, CString};
use std::ptr;

/// A value of the job information handed to [`register_nspace`](super::register_nspace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    /// `PMIX_STRING`.
    Str(String),
    /// `PMIX_STRING` with no string (NULL): a value that says "none", as an unbound rank's
    /// `PMIX_LOCALITY_STRING` does, where a missing key would say "not known".
    NoStr,
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
    /// `PMIX_DATA_ARRAY` of `PMIX_DEVICE_DIST`: a rank's distances to devices.
    Distances(Vec<Distance>),
}

/// A `pmix_info_t` array built from Rust values, with everything it points to. It must
/// outlive every call it is passed to (the library copies what it keeps).
pub(super) struct InfoArray {
    pub(super) infos: Vec<pmix_info_t>,
    _strings: Vec<CString>,
    // Boxed: the infos point at each array, which must not move when the Vec grows.
    #[allow(clippy::vec_box)]
    _arrays: Vec<Box<pmix_data_array_t>>,
    _nested: Vec<InfoArray>,
    // Boxed for the same reason.
    #[allow(clippy::vec_box)]
    _procs: Vec<Box<pmix_proc_t>>,
    _proc_arrays: Vec<Vec<pmix_proc_t>>,
    _dist_arrays: Vec<Vec<pmix_device_distance_t>>,
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

pub(super) fn c_string(s: &str) -> CString {
    // Interior NULs cannot be carried; cut the string there.
    let end = s.find('\0').unwrap_or(s.len());
    CString::new(&s[..end]).unwrap_or_default()
}

pub(super) fn fill<const N: usize>(dst: &mut [c_char; N], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
}

impl InfoArray {
    /// The `pmix_info_t`s of `items`, with everything their values point to.
    pub(super) fn new(items: &[(String, Val)]) -> InfoArray {
        let mut a = InfoArray {
            infos: Vec::with_capacity(items.len()),
            _strings: Vec::new(),
            _arrays: Vec::new(),
            _nested: Vec::new(),
            _procs: Vec::new(),
            _proc_arrays: Vec::new(),
            _dist_arrays: Vec::new(),
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
            let (t, d) = a.keep(v);
            info.value.type_ = t;
            info.value.data = d;
            a.infos.push(info);
        }
        a
    }

    /// The type and union member of `v`'s `pmix_value_t`, keeping in this array what the
    /// member points to (a string, a nested array, processes; bytes are `malloc`ed).
    fn keep(&mut self, v: &Val) -> (u16, pmix_value_data) {
        match v {
            Val::Str(s) => {
                let c = c_string(s);
                let p = c.as_ptr() as *mut c_char;
                self._strings.push(c);
                (PMIX_STRING, pmix_value_data { string: p })
            }
            Val::NoStr => (
                PMIX_STRING,
                pmix_value_data {
                    string: ptr::null_mut(),
                },
            ),
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
                self._arrays.push(arr);
                self._nested.push(nested);
                (PMIX_DATA_ARRAY, pmix_value_data { darray: p })
            }
            Val::Size(x) => (PMIX_SIZE, pmix_value_data { size: *x }),
            Val::Proc(ns, r) => {
                let p = Box::new(proc_t(ns, *r));
                let ptr = &*p as *const pmix_proc_t as u64;
                self._procs.push(p);
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
                self._arrays.push(arr);
                self._proc_arrays.push(procs);
                (PMIX_DATA_ARRAY, pmix_value_data { darray: p })
            }
            Val::Distances(list) => {
                let mut dists = Vec::with_capacity(list.len());
                for d in list {
                    let (uuid, osname) = (c_string(&d.uuid), c_string(&d.osname));
                    dists.push(pmix_device_distance_t {
                        uuid: uuid.as_ptr() as *mut c_char,
                        osname: osname.as_ptr() as *mut c_char,
                        type_: d.kind,
                        mindist: d.min,
                        maxdist: d.max,
                    });
                    self._strings.extend([uuid, osname]);
                }
                let mut arr = Box::new(pmix_data_array_t {
                    type_: PMIX_DEVICE_DIST,
                    size: dists.len(),
                    array: dists.as_mut_ptr().cast(),
                });
                let p: *mut pmix_data_array_t = &mut *arr;
                self._arrays.push(arr);
                self._dist_arrays.push(dists);
                (PMIX_DATA_ARRAY, pmix_value_data { darray: p })
            }
        }
    }
}

pub(super) fn proc_t(nspace: &str, rank: u32) -> pmix_proc_t {
    let mut p = pmix_proc_t {
        nspace: [0; NSLEN],
        rank,
    };
    fill(&mut p.nspace, nspace);
    p
}

pub(super) fn nspace_buf(nspace: &str) -> [c_char; NSLEN] {
    let mut b = [0; NSLEN];
    fill(&mut b, nspace);
    b
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

/// A boolean or integer value of type `t` (as [`read_infos`] read it into an `i64`) back in
/// the union member its type names.
pub(super) fn scalar_value(t: u16, x: i64) -> pmix_value_t {
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

/// Reads a `pmix_proc_t` the library passed in.
///
/// # Safety
/// `p` must be NULL or point to a valid `pmix_proc_t`.
pub(super) unsafe fn read_proc(p: *const pmix_proc_t) -> Option<(String, u32)> {
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

/// Reads `n` `pmix_proc_t`s the library passed in.
///
/// # Safety
/// `p` must be NULL or point to `n` valid `pmix_proc_t`s.
pub(super) unsafe fn read_procs(p: *const pmix_proc_t, n: usize) -> Vec<(String, u32)> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: p points to n valid entries per this function's contract.
    (0..n)
        .filter_map(|i| unsafe { read_proc(p.add(i)) })
        .collect()
}

/// Reads a C string the library passed in (`None` for NULL).
///
/// # Safety
/// `p` must be NULL or a valid NUL-terminated string.
pub(super) unsafe fn read_str(p: *const c_char) -> Option<String> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Reads a NULL-terminated array of C strings.
///
/// # Safety
/// `p` must be NULL or a valid NULL-terminated array of valid C strings.
pub(super) unsafe fn read_argv(p: *const *mut c_char) -> Vec<String> {
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
pub(super) fn infos_text(infos: Vec<(String, InfoVal)>) -> Vec<(String, String)> {
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

/// Reads `n` `pmix_info_t`s the library passed in.
///
/// # Safety
/// `info` must be NULL or point to `n` valid entries.
pub(super) unsafe fn read_infos(info: *const pmix_info_t, n: usize) -> Vec<(String, InfoVal)> {
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
pub(super) unsafe fn read_keys(keys: *mut *mut c_char) -> Vec<String> {
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

/// One `pmix_info_t` with key `key`, type `type_` and the bytes `data`.
pub(super) fn raw_info(key: &str, type_: u16, data: pmix_value_data) -> pmix_info_t {
    let mut info = pmix_info_t {
        key: [0; KEYLEN],
        flags: 0,
        value: pmix_value_t { type_, data },
    };
    fill(&mut info.key, key);
    info
}
