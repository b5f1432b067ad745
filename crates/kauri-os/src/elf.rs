//! What an ELF program file says about its libraries: the ones it names (`DT_NEEDED`) and
//! where it asks for them to be found (`DT_RPATH`, `DT_RUNPATH`), read from its headers, its
//! dynamic section and its string table only. Anything that is not a 64-bit little-endian ELF
//! file with a dynamic section reads as empty; nothing read here can panic.

/// The shared libraries an ELF program names (`DT_NEEDED`), read from `bytes`; empty for
/// anything that is not a 64-bit little-endian ELF file with a dynamic section (a script, a
/// static binary, a truncated or corrupt file).
pub fn needed_libraries(bytes: &[u8]) -> Vec<String> {
    dynamic_by(&|off, len| {
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(len)?.min(bytes.len());
        bytes.get(start..end).map(<[u8]>::to_vec)
    })
    .needed
}

/// [`needed_libraries`] of the file at `path`, reading only its headers, its dynamic section
/// and its string table (a program of hundreds of megabytes costs a few small reads).
pub fn needed_libraries_of(path: &std::path::Path) -> Vec<String> {
    dynamic_of(path).needed
}

/// What an ELF file's dynamic section says about finding its libraries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dynamic {
    /// `DT_NEEDED`: the libraries it names, in order.
    pub needed: Vec<String>,
    /// `DT_RPATH`, as written (`$ORIGIN` unexpanded).
    pub rpath: Option<String>,
    /// `DT_RUNPATH`, as written.
    pub runpath: Option<String>,
}

/// The [`Dynamic`] section of the file at `path`, reading only its headers, its dynamic
/// section and its string table; empty for anything that is not a 64-bit little-endian ELF
/// file with a dynamic section.
pub fn dynamic_of(path: &std::path::Path) -> Dynamic {
    let Ok(f) = std::fs::File::open(path) else {
        return Dynamic::default();
    };
    dynamic_by(&|off, len| read_at_most(&f, off, len))
}

/// The most bytes of a program's string table [`needed_libraries_of`] reads.
const STRTAB_MAX: u64 = 16 << 20;

/// The little-endian `u16` at byte `o` of `b`.
fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(o..o.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The little-endian `u32` at byte `o` of `b`.
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(o..o.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The little-endian `u64` at byte `o` of `b`.
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(o..o.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// One `PT_LOAD` segment of an ELF file: (virtual address, file offset, size in the file).
type Load = (u64, u64, u64);

/// What an ELF64 little-endian file's program headers say: its `PT_LOAD` segments (which
/// map addresses to file offsets) and where its `PT_DYNAMIC` section lies (offset, size).
/// `None` for anything else, or a file without a dynamic section.
fn program_headers(
    read: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> Option<(Vec<Load>, (u64, u64))> {
    // ELF64, little endian.
    let head = read(0, 64)?;
    if head.get(0..4)? != b"\x7fELF" || *head.get(4)? != 2 || *head.get(5)? != 1 {
        return None;
    }
    let phoff = u64_at(&head, 0x20)?;
    let phentsize = usize::from(u16_at(&head, 0x36)?);
    let phnum = usize::from(u16_at(&head, 0x38)?).min(4096);
    if phentsize < 56 {
        return None;
    }
    let phdrs = read(phoff, phnum.checked_mul(phentsize)?)?;
    // Program headers: PT_LOAD (1) maps addresses to file offsets; PT_DYNAMIC (2).
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let h = i.checked_mul(phentsize)?;
        let kind = u32_at(&phdrs, h)?;
        let offset = u64_at(&phdrs, h + 8)?;
        let vaddr = u64_at(&phdrs, h + 16)?;
        let filesz = u64_at(&phdrs, h + 32)?;
        match kind {
            1 => loads.push((vaddr, offset, filesz)),
            2 => dynamic = Some((offset, filesz)),
            _ => {}
        }
    }
    Some((loads, dynamic?))
}

/// The file offset of virtual address `addr`: by the `PT_LOAD` segment that maps it.
fn file_offset(loads: &[Load], addr: u64) -> Option<u64> {
    loads
        .iter()
        .find(|(v, _, sz)| addr >= *v && addr - *v < *sz)
        .and_then(|(v, o, _)| (addr - v).checked_add(*o))
}

/// The dynamic section's entries kauri reads, before their strings are looked up: offsets
/// into the string table, and the table's file offset and size.
#[derive(Debug, Default, PartialEq, Eq)]
struct DynamicTags {
    /// `DT_STRTAB`, as a file offset.
    strtab: Option<u64>,
    /// `DT_STRSZ`.
    strsz: Option<u64>,
    /// `DT_NEEDED`'s names' offsets, in order.
    needed: Vec<u64>,
    /// `DT_RPATH`'s offset.
    rpath: Option<u64>,
    /// `DT_RUNPATH`'s offset.
    runpath: Option<u64>,
}

/// Reads the first `entries` 16-byte entries of a dynamic section (up to `DT_NULL` or the
/// end of `dynamic`); `None` for an entry whose tag is there but not its value.
fn dynamic_tags(dynamic: &[u8], entries: usize, loads: &[Load]) -> Option<DynamicTags> {
    let mut t = DynamicTags::default();
    for i in 0..entries {
        let e = i * 16;
        let Some(tag) = u64_at(dynamic, e) else {
            break;
        };
        let val = u64_at(dynamic, e + 8)?;
        match tag {
            0 => break,
            1 => t.needed.push(val),
            5 => t.strtab = file_offset(loads, val),
            15 => t.rpath = Some(val),
            29 => t.runpath = Some(val),
            10 => t.strsz = Some(val),
            _ => {}
        }
    }
    Some(t)
}

/// How many bytes of the string table to read: `DT_STRSZ`, else (when it is missing) past
/// the furthest name's offset; at most [`STRTAB_MAX`].
fn strings_wanted(t: &DynamicTags) -> u64 {
    // The names' offsets bound what must be read when DT_STRSZ is missing.
    t.strsz
        .or_else(|| {
            t.needed
                .iter()
                .chain(&t.rpath)
                .chain(&t.runpath)
                .max()
                .map(|m| m + 4096)
        })
        .unwrap_or(0)
        .min(STRTAB_MAX)
}

/// [`Dynamic`] over `read(offset, len)`, which returns at most `len` bytes from `offset`
/// (fewer at the end).
fn dynamic_by(read: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Dynamic {
    let parse = || -> Option<Dynamic> {
        let (loads, (doff, dsize)) = program_headers(read)?;
        let entries = usize::try_from(dsize / 16).ok()?.min(1 << 16);
        let dynamic = read(doff, entries * 16)?;
        let tags = dynamic_tags(&dynamic, entries, &loads)?;
        let strtab = tags.strtab?;
        let strings = read(strtab, usize::try_from(strings_wanted(&tags)).ok()?)?;
        let string = |off: u64| -> Option<String> {
            let rest = strings.get(usize::try_from(off).ok()?..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        };
        Some(Dynamic {
            needed: tags.needed.into_iter().filter_map(string).collect(),
            rpath: tags.rpath.and_then(string),
            runpath: tags.runpath.and_then(string),
        })
    };
    parse().unwrap_or_default()
}

/// Up to `len` bytes of `f` from offset `off` (fewer at the file's end); `None` on a read
/// error or an offset past `u64`.
pub fn read_at_most(f: &std::fs::File, off: u64, len: usize) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match f.read_at(&mut b[got..], off.checked_add(got as u64)?) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    b.truncate(got);
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_offsets_come_from_the_load_that_maps_the_address() {
        let loads = [(0x1000, 0x0, 0x800), (0x4000, 0x2000, 0x100)];
        assert_eq!(file_offset(&loads, 0x1010), Some(0x10));
        assert_eq!(file_offset(&loads, 0x40ff), Some(0x20ff));
        assert_eq!(file_offset(&loads, 0x4100), None);
        assert_eq!(file_offset(&loads, 0x0fff), None);
    }

    #[test]
    fn dynamic_tags_stop_at_null_and_map_the_string_table() {
        let entry = |tag: u64, val: u64| [tag.to_le_bytes(), val.to_le_bytes()].concat();
        let loads = [(0x1000, 0x200, 0x1000)];
        let bytes: Vec<u8> = [
            entry(1, 7),
            entry(5, 0x1100),
            entry(1, 20),
            entry(29, 30),
            entry(0, 0),
            entry(1, 99),
        ]
        .concat();
        let t = dynamic_tags(&bytes, 6, &loads).unwrap();
        assert_eq!(t.needed, vec![7, 20]);
        assert_eq!(t.strtab, Some(0x300));
        assert_eq!((t.rpath, t.runpath, t.strsz), (None, Some(30), None));
        // A tag without its value is a truncated section.
        assert_eq!(dynamic_tags(&bytes[..12], 1, &loads), None);
        // Past the bytes read: the entries there are not read.
        assert_eq!(
            dynamic_tags(&bytes[..16], 3, &loads).unwrap().needed,
            vec![7]
        );
    }

    #[test]
    fn the_string_table_is_read_to_its_size_or_past_the_furthest_name() {
        let mut t = DynamicTags {
            needed: vec![10, 500],
            runpath: Some(40),
            ..Default::default()
        };
        assert_eq!(strings_wanted(&t), 500 + 4096);
        t.strsz = Some(123);
        assert_eq!(strings_wanted(&t), 123);
        t.strsz = Some(u64::MAX);
        assert_eq!(strings_wanted(&t), STRTAB_MAX);
        assert_eq!(strings_wanted(&DynamicTags::default()), 0);
    }

    #[test]
    fn needed_libraries_of_a_file_reads_the_same_as_of_its_bytes() {
        let exe = std::env::current_exe().unwrap();
        let me = std::fs::read(&exe).unwrap();
        let libs = needed_libraries_of(&exe);
        assert!(libs.iter().any(|l| l.starts_with("libc.so")), "{libs:?}");
        assert_eq!(libs, needed_libraries(&me));
        assert!(needed_libraries_of(std::path::Path::new("/nonexistent")).is_empty());
        assert!(needed_libraries_of(std::path::Path::new("/etc/hostname")).is_empty());
    }

    #[test]
    fn needed_libraries_of_a_real_program_and_of_garbage() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let libs = needed_libraries(&me);
        assert!(libs.iter().any(|l| l.starts_with("libc.so")), "{libs:?}");
        // Kauri loads libpmix at run time, so that a job can be served by its own.
        assert!(!kauri_core::plan::job::wants_pmix(&libs), "{libs:?}");
        // Truncated at every length up to the program headers, and random bytes: no panic.
        for n in 0..256.min(me.len()) {
            let _ = needed_libraries(&me[..n]);
        }
        let mut junk = me[..4096.min(me.len())].to_vec();
        for (i, b) in junk.iter_mut().enumerate().skip(16) {
            *b = (i * 7919 % 251) as u8;
        }
        let _ = needed_libraries(&junk);
        assert!(needed_libraries(b"#!/bin/sh\necho hi\n").is_empty());
        assert!(kauri_core::plan::job::wants_pmix(&[
            "libmpi.so.40".to_string()
        ]));
        assert!(kauri_core::plan::job::wants_pmi(&[
            "libmpich.so.12".to_string()
        ]));
        assert!(!kauri_core::plan::job::wants_pmi(&[
            "libmpi.so.40".to_string(),
            "libc.so.6".to_string()
        ]));
        assert!(kauri_core::plan::job::wants_pmix(&[
            "libpmix.so.2".to_string()
        ]));
        assert!(!kauri_core::plan::job::wants_pmix(&[
            "libmpi.so.12".to_string()
        ]));
        // Open MPI's Fortran and C++ programs name their bindings, not libmpi.so.40.
        for binding in [
            "libmpi_mpifh.so.40",
            "libmpi_usempif08.so.40",
            "libmpi_usempi_ignore_tkr.so.40",
            "libmpi_cxx.so.40",
        ] {
            assert!(
                kauri_core::plan::job::wants_pmix(&[binding.to_string()]),
                "{binding}"
            );
        }
        assert!(!kauri_core::plan::job::wants_pmix(&[
            "libmpichfort.so.12".to_string()
        ]));
    }
}
