//! The library itself, loaded at run time (`dlopen`), and the symbol table of the entry
//! points Kauri calls.

use super::types::*;
use crate::pmix::library::Untrusted;
use crate::pmix::PmixError;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

// ---------------------------------------------------------------------------------------------
// The library itself, loaded at run time (`dlopen`), so that each run can be served by the
// OpenPMIx its programs carry (Open MPI 5's wheel brings OpenPMIx 5 as `libpmix.so.2`, the
// same soname as Debian's 4.2): [`choose_library`], else `KAURI_PMIX_LIBRARY`, else the
// system's.

/// Declares [`Lib`], the library's entry points Kauri calls, each found by its C name.
macro_rules! pmix_entry_points {
    ($( $(#[$doc:meta])* $field:ident = $sym:literal : fn($($arg:ty),*) $(-> $ret:ty)?; )*) => {
        /// The entry points of the loaded OpenPMIx library.
        pub(super) struct Lib {
            /// The file it was loaded from, as given to `dlopen`.
            pub(super) path: String,
            $( $(#[$doc])* pub(super) $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
        }

        impl Lib {
            /// Looks every entry point up in the library `handle` (from `dlopen`).
            ///
            /// # Safety
            /// `handle` is a live handle from `dlopen`, never closed.
            unsafe fn bind(handle: *mut c_void, path: String) -> Result<Lib, LibraryError> {
                Ok(Lib {
                    $( $field: {
                        let name = concat!($sym, "\0");
                        // SAFETY: handle is live; name is NUL-terminated.
                        let p = unsafe { libc::dlsym(handle, name.as_ptr().cast()) };
                        if p.is_null() {
                            return Err(LibraryError::MissingSymbol { path, symbol: $sym });
                        }
                        // SAFETY: the symbol is the library's function of this C signature
                        // (pmix_server.h, pmix.h; the same from 4.0 to 5.0).
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) $(-> $ret)?>(p)
                        }
                    }, )*
                    path,
                })
            }
        }
    };
}

pmix_entry_points! {
    server_init = "PMIx_server_init":
        fn(*mut pmix_server_module_t, *mut pmix_info_t, usize) -> Status;
    server_finalize = "PMIx_server_finalize": fn() -> Status;
    generate_regex = "PMIx_generate_regex": fn(*const c_char, *mut *mut c_char) -> Status;
    generate_ppn = "PMIx_generate_ppn": fn(*const c_char, *mut *mut c_char) -> Status;
    register_nspace = "PMIx_server_register_nspace":
        fn(*const c_char, c_int, *mut pmix_info_t, usize, pmix_op_cbfunc_t, *mut c_void) -> Status;
    deregister_nspace = "PMIx_server_deregister_nspace":
        fn(*const c_char, pmix_op_cbfunc_t, *mut c_void);
    register_client = "PMIx_server_register_client":
        fn(*const pmix_proc_t, libc::uid_t, libc::gid_t, *mut c_void, pmix_op_cbfunc_t, *mut c_void) -> Status;
    setup_fork = "PMIx_server_setup_fork": fn(*const pmix_proc_t, *mut *mut *mut c_char) -> Status;
    dmodex_request = "PMIx_server_dmodex_request":
        fn(*const pmix_proc_t, pmix_dmodex_response_fn_t, *mut c_void) -> Status;
    error_string = "PMIx_Error_string": fn(Status) -> *const c_char;
    get_version = "PMIx_Get_version": fn() -> *const c_char;
    notify_event = "PMIx_Notify_event":
        fn(Status, *const pmix_proc_t, u8, *const pmix_info_t, usize, pmix_op_cbfunc_t, *mut c_void) -> Status;
    client_init = "PMIx_Init": fn(*mut pmix_proc_t, *mut pmix_info_t, usize) -> Status;
    client_finalize = "PMIx_Finalize": fn(*const pmix_info_t, usize) -> Status;
    client_abort = "PMIx_Abort": fn(c_int, *const c_char, *mut pmix_proc_t, usize) -> Status;
    client_put = "PMIx_Put": fn(u8, *const c_char, *mut pmix_value_t) -> Status;
    client_commit = "PMIx_Commit": fn() -> Status;
    client_fence = "PMIx_Fence": fn(*const pmix_proc_t, usize, *const pmix_info_t, usize) -> Status;
    client_get = "PMIx_Get":
        fn(*const pmix_proc_t, *const c_char, *const pmix_info_t, usize, *mut *mut pmix_value_t) -> Status;
    value_destruct = "PMIx_Value_destruct": fn(*mut pmix_value_t);
    parse_cpuset = "PMIx_Parse_cpuset_string": fn(*const c_char, *mut pmix_cpuset_t) -> Status;
    cpuset_destruct = "PMIx_Cpuset_destruct": fn(*mut pmix_cpuset_t);
    locality_string = "PMIx_server_generate_locality_string":
        fn(*const pmix_cpuset_t, *mut *mut c_char) -> Status;
    compute_distances = "PMIx_Compute_distances":
        fn(*mut c_void, *mut pmix_cpuset_t, *mut pmix_info_t, usize, *mut *mut pmix_device_distance_t, *mut usize) -> Status;
}

impl std::fmt::Debug for Lib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lib").field("path", &self.path).finish()
    }
}

/// The variable naming the OpenPMIx library file to load (`libpmix.so.2` of the user's
/// choice), for the server and for `kauri pmi`; it wins over Kauri's own choice.
pub const LIBRARY_VAR: &str = "KAURI_PMIX_LIBRARY";

/// The system's library, by soname (the dynamic linker's search path).
const SYSTEM_LIBRARY: &str = "libpmix.so.2";

/// The file this process should load, set by [`choose_library`] before the first use.
static CHOSEN: Mutex<Option<String>> = Mutex::new(None);
/// The library, loaded at first use.
static LIB: OnceLock<Result<Lib, Arc<NoLibrary>>> = OnceLock::new();

/// Chooses the OpenPMIx library file this process loads at its first PMIx call (`None`: the
/// system's). [`LIBRARY_VAR`] in the environment wins. Has no effect once the library is
/// loaded: then says which one is.
pub fn choose_library(path: Option<&str>) -> Result<(), PmixError> {
    if let Some(Ok(l)) = LIB.get() {
        if path.is_some_and(|p| p != l.path) {
            return Err(PmixError::AlreadyLoaded(l.path.clone()));
        }
        return Ok(());
    }
    if let Ok(mut c) = CHOSEN.lock() {
        *c = path.map(str::to_string);
    }
    Ok(())
}

/// The file the library was loaded from, once it is.
pub fn loaded_library() -> Option<String> {
    match LIB.get() {
        Some(Ok(l)) => Some(l.path.clone()),
        _ => None,
    }
}

/// The library, loaded on first use.
pub(super) fn lib() -> Result<&'static Lib, PmixError> {
    LIB.get_or_init(load)
        .as_ref()
        .map_err(|e| PmixError::NoLibrary(e.clone()))
}

/// Why one library file cannot serve: `dlopen` failed, or an entry point is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LibraryError {
    /// The name holds a NUL byte.
    #[error("{0:?}: a NUL in the name")]
    NulInName(String),
    /// `dlopen` failed without a message.
    #[error("{0}: cannot be loaded")]
    CannotLoad(String),
    /// `dlopen` failed: the dynamic loader's message (`dlerror`).
    #[error("{0}")]
    Loader(String),
    /// The library lacks an entry point kauri calls.
    #[error("{path}: it has no {symbol}")]
    MissingSymbol {
        /// The file.
        path: String,
        /// The entry point's C name.
        symbol: &'static str,
    },
}

/// Why one candidate library was not taken ([`NoLibrary`]).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The chosen file is not one kauri may load into itself.
    #[error("not loading {path}: {why}")]
    Untrusted {
        /// The file.
        path: String,
        /// Why not.
        why: Untrusted,
    },
    /// The file cannot be loaded, or lacks an entry point.
    #[error("cannot use the PMIx library {0}")]
    Unusable(LibraryError),
}

/// No OpenPMIx library could be loaded: each candidate's refusal, in the order tried.
#[derive(Debug, thiserror::Error)]
#[error(
    "no OpenPMIx library could be loaded ({}); install libpmix2 or set {LIBRARY_VAR}",
    joined(.0)
)]
pub struct NoLibrary(pub Vec<Refused>);

/// The refusals `r` as one clause: `; ` between them.
fn joined(r: &[Refused]) -> String {
    r.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// `dlopen` of `path`, or the loader's message.
fn open(path: &str) -> Result<*mut c_void, LibraryError> {
    let c = CString::new(path).map_err(|_| LibraryError::NulInName(path.to_string()))?;
    // SAFETY: c is NUL-terminated. RTLD_GLOBAL: OpenPMIx 4's components (Debian's
    // pmix2/lib/pmix/*.so) resolve the library's symbols from the global scope.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if !h.is_null() {
        return Ok(h);
    }
    // SAFETY: dlerror returns the last error of this thread, a static string or NULL.
    let e = unsafe { libc::dlerror() };
    Err(if e.is_null() {
        LibraryError::CannotLoad(path.to_string())
    } else {
        // SAFETY: non-NULL, NUL-terminated, valid until the next dl call of this thread.
        LibraryError::Loader(unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned())
    })
}

/// Loads the library: [`LIBRARY_VAR`]'s file (the user's own choice, loaded as named), else
/// the one [`choose_library`] chose when kauri may load it ([`crate::pmix::library::trusted`]:
/// on another host than the one that chose it, the file is another), then the system's.
fn load() -> Result<Lib, Arc<NoLibrary>> {
    let mut errors = Vec::new();
    let wanted = match std::env::var(LIBRARY_VAR).ok().filter(|v| !v.is_empty()) {
        Some(v) => Some(v),
        None => CHOSEN.lock().ok().and_then(|c| c.clone()).and_then(|c| {
            match crate::pmix::library::trusted(std::path::Path::new(&c)) {
                Ok(f) => Some(f.to_string_lossy().into_owned()),
                Err(why) => {
                    errors.push(Refused::Untrusted { path: c, why });
                    None
                }
            }
        }),
    };
    let mut candidates: Vec<String> = wanted.iter().cloned().collect();
    candidates.push(SYSTEM_LIBRARY.into());
    // Where `pkg-config pmix` put it at build time, for a library outside the loader's path.
    if let Some(dir) = option_env!("KAURI_PMIX_LIBDIR") {
        candidates.push(format!("{dir}/{SYSTEM_LIBRARY}"));
    }
    for path in candidates {
        match open(&path) {
            // SAFETY: h is a live handle from dlopen, never closed.
            Ok(h) => match unsafe { Lib::bind(h, path.clone()) } {
                Ok(l) => {
                    if !errors.is_empty() {
                        say!("kauri: {}; serving with {path}", joined(&errors));
                    }
                    return Ok(l);
                }
                Err(e) => errors.push(Refused::Unusable(e)),
            },
            Err(e) => errors.push(Refused::Unusable(e)),
        }
    }
    Err(Arc::new(NoLibrary(errors)))
}

/// The file this process loads its library from (or will, at its first PMIx call), found the
/// way the dynamic linker would: [`LIBRARY_VAR`], else the file [`choose_library`] chose,
/// else the system's `libpmix.so.2` in the directories of `LD_LIBRARY_PATH`, then the
/// system's library directories. `None` when there is none.
pub fn library_file() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(Ok(l)) = LIB.get() {
        return Some(PathBuf::from(&l.path)).filter(|p| p.is_absolute() && p.is_file());
    }
    let wanted = std::env::var(LIBRARY_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| CHOSEN.lock().ok().and_then(|c| c.clone()));
    if let Some(w) = wanted.map(PathBuf::from).filter(|w| w.is_file()) {
        return Some(w);
    }
    let ld_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let dirs: Vec<&str> = ld_path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain([
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib/aarch64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/lib64",
            "/usr/lib64",
            "/lib",
            "/usr/lib",
            "/usr/local/lib",
        ])
        .chain(option_env!("KAURI_PMIX_LIBDIR"))
        .collect();
    dirs.iter()
        .map(|d| PathBuf::from(d).join(SYSTEM_LIBRARY))
        .find(|f| f.is_file())
}

/// The OpenPMIx release of the library file `path` (`4.2.2rc2`), read from its version line
/// in the file (`OpenPMIx 4.2.2rc2 (PMIx Standard: …`, what `PMIx_Get_version` returns)
/// without loading it: its `.rodata` section when the section headers say where, else its
/// first 8 MiB.
pub fn release_of(path: &std::path::Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let read = |off: u64, len: usize| kauri_os::elf::read_at_most(&f, off, len);
    let (off, len) = rodata(&read).unwrap_or((0, 8 << 20));
    // In pieces, each overlapping the last by more than a version line: the line sits near
    // the start of Debian's section and near the end of the wheel's, and a whole section read
    // into fresh memory would cost every job's start its page faults.
    const PIECE: usize = 16 << 10;
    const OVERLAP: usize = 128;
    let mut at = 0;
    while at < len {
        let piece = read(off.checked_add(at as u64)?, PIECE.min(len - at))?;
        if let Some(v) = version_in(&piece) {
            return Some(v);
        }
        if piece.len() < PIECE {
            break;
        }
        at += PIECE - OVERLAP;
    }
    None
}

/// The `.rodata` section of an ELF64 little-endian file: (offset, size), from its section
/// headers.
fn rodata(read: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<(u64, usize)> {
    let le64 = |b: &[u8], o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let le32 = |b: &[u8], o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let le16 = |b: &[u8], o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let h = read(0, 64)?;
    if h.get(0..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (shoff, size) = (le64(&h, 0x28)?, usize::from(le16(&h, 0x3a)?));
    let (num, names) = (usize::from(le16(&h, 0x3c)?), usize::from(le16(&h, 0x3e)?));
    if size < 64 || num > 4096 {
        return None;
    }
    let sh = read(shoff, num * size)?;
    let section = |i: usize| {
        Some((
            le32(&sh, i * size)?,
            le64(&sh, i * size + 0x18)?,
            le64(&sh, i * size + 0x20)?,
        ))
    };
    let (_, str_off, str_len) = section(names)?;
    let strtab = read(str_off, usize::try_from(str_len).ok()?.min(1 << 20))?;
    (0..num).find_map(|i| {
        let (name, off, len) = section(i)?;
        let name = strtab.get(usize::try_from(name).ok()?..)?;
        (name.starts_with(b".rodata\0")).then_some((off, usize::try_from(len).ok()?.min(64 << 20)))
    })
}

/// The release in an OpenPMIx version line found in `bytes`: what follows `OpenPMIx ` up to
/// the space before `(PMIx Standard`.
fn version_in(bytes: &[u8]) -> Option<String> {
    let key = b"OpenPMIx ";
    memchr::memmem::find_iter(bytes, key).find_map(|i| {
        let rest = &bytes[i + key.len()..];
        let end = rest.iter().position(|&c| c == b' ' || c == 0)?;
        (rest[end..].starts_with(b" (PMIx Standard") && rest.first()?.is_ascii_digit())
            .then(|| std::str::from_utf8(&rest[..end]).ok().map(str::to_string))
            .flatten()
    })
}

/// The PMIx library's own version line (`OpenPMIx 4.2.2, ...`), as `PMIx_Get_version` gives it.
pub fn library_version() -> String {
    let Ok(l) = lib() else {
        return "unknown (no OpenPMIx library loads)".into();
    };
    // SAFETY: PMIx_Get_version takes nothing and returns a pointer to a static NUL-terminated
    // string (or NULL); it needs no initialised library.
    let p = unsafe { (l.get_version)() };
    if p.is_null() {
        return "unknown".into();
    }
    // SAFETY: p is non-NULL and points to a static C string owned by the library.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The library's name for a status.
pub fn error_string(status: Status) -> String {
    let Ok(l) = lib() else {
        return format!("PMIx status {status}");
    };
    // SAFETY: PMIx_Error_string returns a pointer to a static NUL-terminated string (or NULL).
    let p = unsafe { (l.error_string)(status) };
    if p.is_null() {
        return format!("PMIx status {status}");
    }
    // SAFETY: p is non-NULL and points to a static C string owned by the library.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `Ok` for a status of success, else [`PmixError::Call`] of `call` with the status's name.
pub(super) fn check(call: &'static str, rc: Status) -> Result<(), PmixError> {
    if rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED {
        Ok(())
    } else {
        Err(PmixError::Call {
            call,
            status: rc,
            name: error_string(rc),
        })
    }
}

#[cfg(test)]
mod release_tests {
    use super::*;

    #[test]
    fn the_release_is_read_from_the_version_line() {
        let line = b"..\0OpenPMIx rules\0OpenPMIx 4.2.2rc2 (PMIx Standard: 4.2, Stable ABI: 0.0)\0";
        assert_eq!(version_in(line).as_deref(), Some("4.2.2rc2"));
        assert_eq!(
            version_in(b"OpenPMIx 5.0.11 (PMIx Standard: 5.1)").as_deref(),
            Some("5.0.11")
        );
        assert_eq!(version_in(b"no version here"), None);
        assert_eq!(version_in(b"OpenPMIx 4.2.2rc2"), None);
        assert_eq!(version_in(b"OpenPMIx "), None);
    }

    /// The file is read in pieces: a line across two pieces, or in the last, is found.
    #[test]
    fn a_version_line_across_pieces_is_found() {
        let dir = std::env::temp_dir().join(format!("kauri-release-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = b"OpenPMIx 5.0.11rc1 (PMIx Standard: 5.1, Stable ABI: 0.0)\0";
        for at in [
            0,
            (16 << 10) - 20,
            (16 << 10) - 128,
            40_000,
            70_000 - line.len(),
        ] {
            let mut bytes = vec![b'x'; 70_000];
            bytes[at..at + line.len()].copy_from_slice(line);
            let f = dir.join("libfake.so");
            std::fs::write(&f, &bytes).unwrap();
            assert_eq!(release_of(&f).as_deref(), Some("5.0.11rc1"), "at {at}");
        }
        std::fs::write(dir.join("libfake.so"), vec![b'x'; 70_000]).unwrap();
        assert_eq!(release_of(&dir.join("libfake.so")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The installed libraries (Debian's 4.2, and any other `KAURI_TEST_PMIX_LIBS` names):
    /// the release read from the file is the one the library gives.
    #[test]
    fn the_release_read_from_the_file_is_the_librarys_own() {
        let mut files: Vec<std::path::PathBuf> = std::env::var("KAURI_TEST_PMIX_LIBS")
            .unwrap_or_default()
            .split(':')
            .filter(|f| !f.is_empty())
            .map(Into::into)
            .collect();
        files.extend(library_file());
        for f in files {
            let from_file = release_of(&f).expect("a release in the file");
            let c = std::ffi::CString::new(f.to_string_lossy().as_bytes()).unwrap();
            // SAFETY: c is NUL-terminated; the handle is used for one symbol and kept.
            let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            assert!(!h.is_null(), "{}", f.display());
            // SAFETY: handle live; the name is NUL-terminated.
            let sym = unsafe { libc::dlsym(h, c"PMIx_Get_version".as_ptr()) };
            assert!(!sym.is_null());
            // SAFETY: PMIx_Get_version takes nothing and returns a static C string.
            let v = unsafe {
                let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(sym);
                CStr::from_ptr(f()).to_string_lossy().into_owned()
            };
            assert_eq!(
                version_in(v.as_bytes()).as_deref(),
                Some(from_file.as_str()),
                "{v}"
            );
        }
    }
}
