//! Where a bound rank is, as the server library computes it from the rank's CPUs over the
//! host's topology it loaded at its start: its locality string (`PMIX_LOCALITY_STRING`) and
//! its distances to the host's GPUs and network devices (`PMIX_DEVICE_DISTANCES`), what
//! PRRTE registers for each local process it bound.

use super::loader::*;
use super::types::*;
use super::values::{c_string, fill};
use crate::pmix::PmixError;
use std::ffi::{c_char, CStr};
use std::ptr;

/// How far one device is from a rank's CPUs (`pmix_device_distance_t`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distance {
    /// The device's identifier, unique on the host (`fab://…`, `ipv4://…`, `gpu://…`).
    pub uuid: String,
    /// Its operating system's name (`eth0`, `mlx5_0`, `card0`).
    pub osname: String,
    /// Its kind: a `PMIX_DEVTYPE_*` bit.
    pub kind: u64,
    /// The least distance from one of the CPUs to the device.
    pub min: u16,
    /// The greatest.
    pub max: u16,
}

/// Where a rank bound to some CPUs is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Its locality string (`SK0:L30:L20:L10:CR0:HT0:NM0`); `None` when the CPUs are the
    /// whole machine (an unbound rank has no locality).
    pub locality: Option<String>,
    /// Its distances to the host's GPUs, network and fabric devices (none when the library
    /// cannot compute them: a binding only the whole machine covers).
    pub distances: Vec<Distance>,
}

/// Where a rank bound to `cpus` (a list with ranges, `0-3,8`, of the host's CPU numbers) is,
/// asked of the running server library.
pub fn locate(cpus: &str) -> Result<Located, PmixError> {
    let l = lib()?;
    // The library writes into the text it parses (a NUL at the colon, then back): a copy of
    // our own, mutable.
    let mut text = c_string(&format!("hwloc:{cpus}")).into_bytes_with_nul();
    let mut set = pmix_cpuset_t {
        source: ptr::null_mut(),
        bitmap: ptr::null_mut(),
    };
    // SAFETY: text is NUL-terminated and lives across the call; set is ours to fill.
    let rc = unsafe { (l.parse_cpuset)(text.as_mut_ptr().cast(), &mut set) };
    check("PMIx_Parse_cpuset_string", rc)?;
    let locality = locality_of(l, &set);
    let distances = distances_of(l, &mut set);
    // SAFETY: set was filled by the library's parse, and is destructed once.
    unsafe { (l.cpuset_destruct)(&mut set) };
    Ok(Located {
        locality: locality?,
        distances,
    })
}

/// The locality string of `set`, `None` for the whole machine.
fn locality_of(l: &Lib, set: &pmix_cpuset_t) -> Result<Option<String>, PmixError> {
    let mut s: *mut c_char = ptr::null_mut();
    // SAFETY: set is a parsed cpuset; s receives a malloc'ed string or NULL.
    let rc = unsafe { (l.locality_string)(set, &mut s) };
    check("PMIx_server_generate_locality_string", rc)?;
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: s is the library's NUL-terminated string, ours to free.
    let text = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    // SAFETY: malloc'ed by the library, freed once.
    unsafe { libc::free(s.cast()) };
    Ok(Some(text))
}

/// The distances from `set` to the host's GPUs, network and fabric devices: empty when the
/// library computes none (only the whole machine covers the set, or no topology).
fn distances_of(l: &Lib, set: &mut pmix_cpuset_t) -> Vec<Distance> {
    let mut kinds = pmix_info_t {
        key: [0; KEYLEN],
        flags: 0,
        value: pmix_value_t {
            type_: PMIX_DEVTYPE,
            data: pmix_value_data {
                uint64: PMIX_DEVTYPES_NEAR,
            },
        },
    };
    fill(&mut kinds.key, "pmix.dev.type");
    let mut d: *mut pmix_device_distance_t = ptr::null_mut();
    let mut n = 0usize;
    // SAFETY: a NULL topology is the library's own; set, kinds, d and n live across the
    // (blocking) call, which is not made on the library's progress thread.
    let rc = unsafe { (l.compute_distances)(ptr::null_mut(), set, &mut kinds, 1, &mut d, &mut n) };
    if rc != PMIX_SUCCESS || d.is_null() {
        return Vec::new();
    }
    let text = |p: *mut c_char| {
        if p.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string of the library's.
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        // SAFETY: malloc'ed by the library, freed once, here.
        unsafe { libc::free(p.cast()) };
        s
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: d holds n distances, each read once.
        let e = unsafe { &*d.add(i) };
        out.push(Distance {
            uuid: text(e.uuid),
            osname: text(e.osname),
            kind: e.type_,
            min: e.mindist,
            max: e.maxdist,
        });
    }
    // SAFETY: the array was malloc'ed by the library (its strings were freed above).
    unsafe { libc::free(d.cast()) };
    out
}
