//! This host's hardware topology as hwloc XML, made once and handed to the ranks that ask
//! (`PMI_hwloc_xmlfile`), so that they load it instead of each probing the machine.
//!
//! MPICH 4.1 and later ask for the key in `MPI_Init` when more than one of its ranks share a
//! host (PMI-1 `get`, PMI-2 `info-getjobattr`), as Hydra's proxy answers it. Without it
//! every rank runs hwloc's discovery itself, sysfs and PCI devices included: about 10 ms of
//! CPU each on a 2-core machine, all at the same time, where loading the XML takes about 4.
//!
//! The XML is made the first time a rank asks, by the libhwloc the system has (`dlopen` of
//! `libhwloc.so.15`, hwloc 2's ABI), with every I/O object kept, as MPICH's own discovery
//! keeps them (`HWLOC_TYPE_FILTER_KEEP_ALL`); then it is kept for the life of the process,
//! for every later job of the host. It lives in an anonymous file (`memfd_create`), named to
//! the ranks as `/proc/PID/fd/FD`: nothing is ever written to a file system, so nothing is
//! left behind however this process ends, and nobody can plant a file at a guessed name. A
//! host without the library, or whose discovery fails, answers "unavailable", and the ranks
//! probe as before.

use crate::error::HwlocError;
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// The library's file name: hwloc 2.x (its soname has been 15 for every 2.x release).
const LIBRARY: &CStr = c"libhwloc.so.15";

/// The topology's XML, once made: its file, open for the life of the process.
struct Xml {
    _file: OwnedFd,
    path: String,
}

static XML: OnceLock<Option<Xml>> = OnceLock::new();

/// The path of this host's topology XML, made on the first call; `None` when it cannot be
/// made (the reason is logged once, at debug level).
pub fn xml_file() -> Option<String> {
    XML.get_or_init(|| match make() {
        Ok(x) => Some(x),
        Err(e) => {
            tracing::debug!("no hwloc topology for the ranks: {e}");
            None
        }
    })
    .as_ref()
    .map(|x| x.path.clone())
}

/// Starts making the topology XML in a thread of its own, unless it is made or being made:
/// a later [`xml_file`] waits for that thread's result instead of making it again. For a job
/// whose ranks will ask (`kauri_core::plan::JobPlan::topology_ahead`), so that the file is made
/// while they load their libraries rather than while they wait in `MPI_Init`.
pub fn make_ahead() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if XML.get().is_some() {
        return;
    }
    ONCE.call_once(|| {
        let made = std::thread::Builder::new()
            .name("kauri-hwloc".into())
            .spawn(|| {
                xml_file();
            });
        if let Err(e) = made {
            tracing::debug!("no thread to make the hwloc topology ahead: {e}");
        }
    });
}

/// Discovers the topology and writes it into an anonymous file.
fn make() -> Result<Xml, HwlocError> {
    let xml = discover()?;
    // SAFETY: the name is NUL-terminated; the call takes no other pointer.
    let fd = unsafe { libc::memfd_create(c"kauri-hwloc-topology".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(HwlocError::MemFd(std::io::Error::last_os_error()));
    }
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    let file = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = std::fs::File::from(file.try_clone().map_err(HwlocError::Dup)?);
    f.write_all(&xml).map_err(HwlocError::Write)?;
    let path = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd());
    Ok(Xml { _file: file, path })
}

type Topology = *mut c_void;

/// The entry points used, looked up in the library.
struct Hwloc {
    api_version: unsafe extern "C" fn() -> c_uint,
    init: unsafe extern "C" fn(*mut Topology) -> c_int,
    set_io_types_filter: unsafe extern "C" fn(Topology, c_int) -> c_int,
    load: unsafe extern "C" fn(Topology) -> c_int,
    export_xmlbuffer:
        unsafe extern "C" fn(Topology, *mut *mut c_char, *mut c_int, c_ulong) -> c_int,
    free_xmlbuffer: unsafe extern "C" fn(Topology, *mut c_char),
    destroy: unsafe extern "C" fn(Topology),
}

/// `HWLOC_TYPE_FILTER_KEEP_ALL` of `enum hwloc_type_filter_e`.
const KEEP_ALL: c_int = 0;

/// Looks `name` up in `handle` as a function of type `T`.
///
/// # Safety
/// `handle` is a live `dlopen` handle, and `T` is a function pointer type matching the
/// symbol's C declaration.
unsafe fn sym<T: Copy>(handle: *mut c_void, name: &CStr) -> Result<T, HwlocError> {
    // SAFETY: handle is live (the caller's promise) and name NUL-terminated.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(HwlocError::NoSymbol {
            library: LIBRARY.to_string_lossy().into_owned(),
            symbol: name.to_string_lossy().into_owned(),
        });
    }
    // SAFETY: T is a function pointer type (the caller's promise), the size of a pointer.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
}

fn open() -> Result<Hwloc, HwlocError> {
    // SAFETY: LIBRARY is NUL-terminated. RTLD_LOCAL: its symbols are ours alone.
    let h = unsafe { libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(HwlocError::NotLoaded(
            LIBRARY.to_string_lossy().into_owned(),
        ));
    }
    // SAFETY: h is live (never closed: the library stays for the process's life), and each
    // type below is the declaration of hwloc 2's `hwloc.h`.
    unsafe {
        Ok(Hwloc {
            api_version: sym(h, c"hwloc_get_api_version")?,
            init: sym(h, c"hwloc_topology_init")?,
            set_io_types_filter: sym(h, c"hwloc_topology_set_io_types_filter")?,
            load: sym(h, c"hwloc_topology_load")?,
            export_xmlbuffer: sym(h, c"hwloc_topology_export_xmlbuffer")?,
            free_xmlbuffer: sym(h, c"hwloc_free_xmlbuffer")?,
            destroy: sym(h, c"hwloc_topology_destroy")?,
        })
    }
}

/// This machine's topology as hwloc 2 XML, I/O objects included.
fn discover() -> Result<Vec<u8>, HwlocError> {
    // hwloc reads its variables (`getenv`) as it loads: not while the environment changes.
    let _env = kauri_os::env::lock();
    let l = open()?;
    // SAFETY: takes nothing.
    let v = unsafe { (l.api_version)() };
    if v >> 16 != 2 {
        return Err(HwlocError::Api(v));
    }
    let mut t: Topology = std::ptr::null_mut();
    // SAFETY: t is a valid place for the new topology.
    if unsafe { (l.init)(&mut t) } != 0 || t.is_null() {
        return Err(HwlocError::Call("hwloc_topology_init"));
    }
    // SAFETY: t is a live topology from init, destroyed exactly once below whatever happens.
    unsafe {
        let mut r = Err(HwlocError::Call("hwloc_topology_load"));
        (l.set_io_types_filter)(t, KEEP_ALL);
        if (l.load)(t) == 0 {
            let mut buf: *mut c_char = std::ptr::null_mut();
            let mut len: c_int = 0;
            r = if (l.export_xmlbuffer)(t, &mut buf, &mut len, 0) == 0 && !buf.is_null() {
                // The length counts the terminating NUL, which is no part of the document.
                let n = usize::try_from(len).unwrap_or(0).saturating_sub(1);
                let xml = std::slice::from_raw_parts(buf.cast::<u8>(), n).to_vec();
                (l.free_xmlbuffer)(t, buf);
                Ok(xml)
            } else {
                Err(HwlocError::Call("hwloc_topology_export_xmlbuffer"))
            };
        }
        (l.destroy)(t);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file is made ahead, by a thread of its own, without anyone asking; the file a
    /// rank is named then holds this machine's topology, as hwloc XML with its root object,
    /// and stays the same file for every later asker. (The only test here that makes it:
    /// nothing in this binary asks before `make_ahead`.)
    #[test]
    fn the_file_is_made_ahead_holds_the_topology_and_is_made_once() {
        assert!(XML.get().is_none(), "made before this test asked");
        // While the environment is being changed (the lock held), hwloc does not read it.
        let env = kauri_os::env::lock();
        make_ahead();
        make_ahead();
        std::thread::sleep(std::time::Duration::from_secs(2));
        assert!(
            XML.get().is_none(),
            "the topology was made while the environment's lock was held"
        );
        drop(env);
        let t = std::time::Instant::now();
        while XML.get().is_none() {
            assert!(
                t.elapsed().as_secs() < 120,
                "nothing made ahead in 2 minutes"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let Some(path) = xml_file() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "libhwloc.so.15 is installed under CI (libhwloc-dev): the topology must be made"
            );
            return;
        };
        assert!(path.starts_with(&format!("/proc/{}/fd/", std::process::id())));
        let xml = std::fs::read_to_string(&path).unwrap();
        assert!(xml.contains("<topology"), "{xml}");
        assert!(xml.contains("type=\"Machine\""), "{xml}");
        assert!(!xml.ends_with('\0'));
        // Another process (a rank) reads the same through the path.
        let cat = std::process::Command::new("cat")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&cat.stdout), xml);
        assert_eq!(xml_file().as_deref(), Some(path.as_str()));
    }
}
