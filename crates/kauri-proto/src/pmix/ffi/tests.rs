use super::replies::*;
use super::server::*;
use super::trampolines::*;
use super::types::*;
use super::unsupported::*;
use super::values::*;
use std::ffi::{c_char, c_int, CStr};
use std::mem::{align_of, offset_of, size_of};
use std::ptr;
use std::sync::mpsc as std_mpsc;

#[test]
fn rust_layouts() {
    assert_eq!(size_of::<pmix_value_t>(), 32);
    assert_eq!(align_of::<pmix_value_t>(), 8);
    assert_eq!(offset_of!(pmix_value_t, data), 8);
    assert_eq!(size_of::<pmix_info_t>(), 552);
    assert_eq!(offset_of!(pmix_info_t, flags), 512);
    assert_eq!(offset_of!(pmix_info_t, value), 520);
    assert_eq!(size_of::<pmix_proc_t>(), 260);
    assert_eq!(offset_of!(pmix_proc_t, rank), 256);
    assert_eq!(size_of::<pmix_data_array_t>(), 24);
    assert_eq!(offset_of!(pmix_data_array_t, size), 8);
    assert_eq!(offset_of!(pmix_data_array_t, array), 16);
    // 4.x's 28 entries, then 5.0's session_control.
    assert_eq!(offset_of!(pmix_server_module_t, session_control), 224);
    assert_eq!(size_of::<pmix_server_module_t>(), 232);
    assert_eq!(offset_of!(pmix_server_module_t, publish), 40);
    assert_eq!(offset_of!(pmix_server_module_t, fabric), 208);
    assert_eq!(offset_of!(pmix_server_module_t, client_connected2), 216);
    assert_eq!(offset_of!(pmix_server_module_t, spawn), 64);
    assert_eq!(size_of::<pmix_app_t>(), 56);
    assert_eq!(size_of::<pmix_pdata_t>(), 808);
    assert_eq!(offset_of!(pmix_pdata_t, key), 260);
    assert_eq!(offset_of!(pmix_pdata_t, value), 776);
    assert_eq!(size_of::<pmix_device_distance_t>(), 32);
    assert_eq!(offset_of!(pmix_device_distance_t, maxdist), 26);
    assert_eq!(size_of::<pmix_cpuset_t>(), 16);
}

/// Compiles a probe against the installed headers and compares its numbers with ours.
#[test]
fn layouts_match_the_c_headers() {
    let Ok(flags) = std::process::Command::new("pkg-config")
        .args(["--cflags", "pmix"])
        .output()
    else {
        say!("pkg-config not found: skipped");
        return;
    };
    let dir = std::env::temp_dir().join(format!("kauri-pmix-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <stddef.h>
#include <pmix_server.h>
int main(void) {
  printf("%zu %zu %zu %zu %zu\n", sizeof(pmix_value_t), _Alignof(pmix_value_t), offsetof(pmix_value_t, data), sizeof(pmix_info_t), offsetof(pmix_info_t, value));
  printf("%zu %zu %zu %zu %zu\n", sizeof(pmix_proc_t), offsetof(pmix_proc_t, rank), sizeof(pmix_data_array_t), sizeof(pmix_server_module_t), offsetof(pmix_server_module_t, client_connected2));
  printf("%d %d %d %d %u\n", PMIX_SUCCESS, PMIX_ERROR, PMIX_ERR_NOT_FOUND, PMIX_ERR_NOT_SUPPORTED, PMIX_RANK_WILDCARD);
  printf("%d %d %d %d %d %d %d %d\n", PMIX_OPERATION_SUCCEEDED, PMIX_BOOL, PMIX_STRING, PMIX_UINT16, PMIX_UINT32, PMIX_INFO, PMIX_DATA_ARRAY, PMIX_PROC_RANK);
  printf("%d %d\n", PMIX_MAX_NSLEN, PMIX_MAX_KEYLEN);
  pmix_server_module_t m;
  size_t slots[] = {
    offsetof(pmix_server_module_t, publish), offsetof(pmix_server_module_t, lookup),
    offsetof(pmix_server_module_t, unpublish), offsetof(pmix_server_module_t, spawn),
    offsetof(pmix_server_module_t, connect), offsetof(pmix_server_module_t, disconnect),
    offsetof(pmix_server_module_t, register_events),
    offsetof(pmix_server_module_t, deregister_events), offsetof(pmix_server_module_t, listener),
    offsetof(pmix_server_module_t, notify_event), offsetof(pmix_server_module_t, query),
    offsetof(pmix_server_module_t, tool_connected), offsetof(pmix_server_module_t, log),
    offsetof(pmix_server_module_t, allocate), offsetof(pmix_server_module_t, job_control),
    offsetof(pmix_server_module_t, monitor), offsetof(pmix_server_module_t, get_credential),
    offsetof(pmix_server_module_t, validate_credential),
    offsetof(pmix_server_module_t, iof_pull), offsetof(pmix_server_module_t, push_stdin),
    offsetof(pmix_server_module_t, group), offsetof(pmix_server_module_t, fabric) };
  (void)m;
  for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) printf("%zu ", slots[i]);
  printf("\n%zu %zu %zu %zu\n", sizeof(pmix_pdata_t), offsetof(pmix_pdata_t, proc), offsetof(pmix_pdata_t, key), offsetof(pmix_pdata_t, value));
  printf("%d %d %d %d %d %u\n", PMIX_ERR_EXISTS, PMIX_ERR_TYPE_MISMATCH, PMIX_ERR_NO_PERMISSIONS, PMIX_ERR_TIMEOUT, PMIX_ERR_BAD_PARAM, PMIX_RANK_UNDEF);
  printf("%d %d %d %d %d %d %d %d %d %d %d %d\n", PMIX_SIZE, PMIX_INT, PMIX_INT8, PMIX_INT16, PMIX_INT32, PMIX_INT64, PMIX_UINT, PMIX_UINT8, PMIX_UINT64, PMIX_PERSIST, PMIX_DATA_RANGE, (int)sizeof(pmix_data_range_t) + 100 * (int)sizeof(pmix_iof_channel_t) + 10000 * (int)sizeof(pmix_alloc_directive_t) + 1000000 * (int)sizeof(pmix_fabric_operation_t));
  printf("%zu %zu %zu %d %d %llu\n", sizeof(pmix_device_distance_t), offsetof(pmix_device_distance_t, maxdist), sizeof(pmix_cpuset_t), PMIX_DEVICE_DIST, PMIX_DEVTYPE, (unsigned long long)(PMIX_DEVTYPE_GPU | PMIX_DEVTYPE_NETWORK | PMIX_DEVTYPE_OPENFABRICS));
  printf("%zu %zu %zu %zu %zu %d %d %d\n", sizeof(pmix_app_t), offsetof(pmix_app_t, maxprocs), offsetof(pmix_app_t, ninfo), offsetof(pmix_server_module_t, spawn), offsetof(pmix_server_module_t, disconnect), PMIX_INT, PMIX_ERR_BAD_PARAM, PMIX_ERR_JOB_FAILED_TO_LAUNCH);
  return 0;
}
"#,
        )
        .unwrap();
    let exe = dir.join("probe");
    let cflags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let built = std::process::Command::new("cc")
        .args(cflags.split_whitespace())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status();
    if !matches!(built, Ok(s) if s.success()) {
        let _ = std::fs::remove_dir_all(&dir);
        say!("no C compiler or no PMIx headers: skipped");
        return;
    }
    let out = std::process::Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    let slots = [
        offset_of!(pmix_server_module_t, publish),
        offset_of!(pmix_server_module_t, lookup),
        offset_of!(pmix_server_module_t, unpublish),
        offset_of!(pmix_server_module_t, spawn),
        offset_of!(pmix_server_module_t, connect),
        offset_of!(pmix_server_module_t, disconnect),
        offset_of!(pmix_server_module_t, register_events),
        offset_of!(pmix_server_module_t, deregister_events),
        offset_of!(pmix_server_module_t, listener),
        offset_of!(pmix_server_module_t, notify_event),
        offset_of!(pmix_server_module_t, query),
        offset_of!(pmix_server_module_t, tool_connected),
        offset_of!(pmix_server_module_t, log),
        offset_of!(pmix_server_module_t, allocate),
        offset_of!(pmix_server_module_t, job_control),
        offset_of!(pmix_server_module_t, monitor),
        offset_of!(pmix_server_module_t, get_credential),
        offset_of!(pmix_server_module_t, validate_credential),
        offset_of!(pmix_server_module_t, iof_pull),
        offset_of!(pmix_server_module_t, push_stdin),
        offset_of!(pmix_server_module_t, group),
        offset_of!(pmix_server_module_t, fabric),
    ];
    let slots: String = slots.iter().map(|o| format!("{o} ")).collect();
    // The integer types the "not supported" upcalls take by value: pmix_data_range_t
    // (u8), pmix_iof_channel_t (u16), pmix_alloc_directive_t (u8),
    // pmix_fabric_operation_t (an enum: int).
    let widths = size_of::<u8>()
        + 100 * size_of::<u16>()
        + 10_000 * size_of::<u8>()
        + 1_000_000 * size_of::<c_int>();
    let want = format!(
        "{} {} {} {} {}\n{} {} {} {} {}\n{} {} {} {} {}\n{} {} {} {} {} {} {} {}\n{} {}\n\
             {slots}\n{} {} {} {}\n{} {} {} {} {} {}\n{} {} {} {} {} {} {} {} {} {} {} {widths}\n\
             {} {} {} {} {} {}\n{} {} {} {} {} {} {} {}\n",
        size_of::<pmix_value_t>(),
        align_of::<pmix_value_t>(),
        offset_of!(pmix_value_t, data),
        size_of::<pmix_info_t>(),
        offset_of!(pmix_info_t, value),
        size_of::<pmix_proc_t>(),
        offset_of!(pmix_proc_t, rank),
        size_of::<pmix_data_array_t>(),
        // The 4.2 headers' structure ends where 5.0's session_control begins.
        offset_of!(pmix_server_module_t, session_control),
        offset_of!(pmix_server_module_t, client_connected2),
        PMIX_SUCCESS,
        PMIX_ERROR,
        PMIX_ERR_NOT_FOUND,
        PMIX_ERR_NOT_SUPPORTED,
        PMIX_RANK_WILDCARD,
        PMIX_OPERATION_SUCCEEDED,
        PMIX_BOOL,
        PMIX_STRING,
        PMIX_UINT16,
        PMIX_UINT32,
        PMIX_INFO,
        PMIX_DATA_ARRAY,
        PMIX_PROC_RANK,
        NSLEN - 1,
        KEYLEN - 1,
        size_of::<pmix_pdata_t>(),
        offset_of!(pmix_pdata_t, proc_),
        offset_of!(pmix_pdata_t, key),
        offset_of!(pmix_pdata_t, value),
        PMIX_ERR_EXISTS,
        PMIX_ERR_TYPE_MISMATCH,
        PMIX_ERR_NO_PERMISSIONS,
        PMIX_ERR_TIMEOUT,
        PMIX_ERR_BAD_PARAM,
        PMIX_RANK_UNDEF,
        PMIX_SIZE,
        PMIX_INT,
        PMIX_INT8,
        PMIX_INT16,
        PMIX_INT32,
        PMIX_INT64,
        PMIX_UINT,
        PMIX_UINT8,
        PMIX_UINT64,
        PMIX_PERSIST,
        PMIX_DATA_RANGE,
        size_of::<pmix_device_distance_t>(),
        offset_of!(pmix_device_distance_t, maxdist),
        size_of::<pmix_cpuset_t>(),
        PMIX_DEVICE_DIST,
        PMIX_DEVTYPE,
        PMIX_DEVTYPES_NEAR,
        size_of::<pmix_app_t>(),
        offset_of!(pmix_app_t, maxprocs),
        offset_of!(pmix_app_t, ninfo),
        offset_of!(pmix_server_module_t, spawn),
        offset_of!(pmix_server_module_t, disconnect),
        PMIX_INT,
        PMIX_ERR_BAD_PARAM,
        PMIX_ERR_JOB_FAILED_TO_LAUNCH,
    );
    assert_eq!(got, want);
}

#[test]
fn a_log_for_the_standard_streams_is_kauris_and_nothing_else() {
    let data = vec![
        (LOG_STDERR.to_string(), InfoVal::Str("e".into())),
        ("pmix.log.syslog".to_string(), InfoVal::Str("s".into())),
        (LOG_STDOUT.to_string(), InfoVal::Str("o".into())),
        (LOG_STDERR.to_string(), InfoVal::Int(3)),
    ];
    assert_eq!(
        log_lines(&data),
        vec![(true, "e".to_string()), (false, "o".to_string())]
    );
    assert!(log_lines(&data[1..2]).is_empty());
    assert_eq!(
        library_major("OpenPMIx 5.0.11rc1 (PMIx Standard: 5.1)"),
        Some(5)
    );
    assert_eq!(library_major("OpenPMIx 4.2.2"), Some(4));
    assert_eq!(library_major("unknown"), None);
}

#[test]
fn a_stuck_call_is_left_after_its_deadline() {
    use std::time::Duration;
    assert!(within(Duration::from_secs(60), || 7));
    let (tx, rx) = std_mpsc::channel::<()>();
    // Stuck until the test ends (the sender is dropped then).
    assert!(!within(Duration::from_millis(50), move || rx.recv()));
    drop(tx);
}

/// A group construct's results: the context id, every server's blob as one byte object
/// (malloc'ed: the library may take it), the members as a data array of procs; a
/// destruct's: nothing.
#[test]
fn group_results_as_the_library_reads_them() {
    let members = vec![("ns".to_string(), 0), ("ns".to_string(), 2)];
    let r = group_results(GroupOp::Construct, &members, b"ab".to_vec(), Some(7));
    let keys: Vec<&str> = r.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, [GROUP_CONTEXT_ID, GROUP_ENDPT_DATA, GROUP_MEMBERSHIP]);
    assert!(group_results(GroupOp::Destruct, &members, Vec::new(), None).is_empty());
    let none = group_results(GroupOp::Construct, &members, Vec::new(), None);
    assert_eq!(none.len(), 1, "only the members: {none:?}");

    let a = InfoArray::new(&r);
    // SAFETY: a's infos are valid, with everything they point to, while a lives.
    let got = unsafe { read_infos(a.infos.as_ptr(), a.infos.len()) };
    assert_eq!(got[0].1, InfoVal::Int(7));
    assert_eq!(got[1].1, InfoVal::Bytes(b"ab".to_vec()));
    assert_eq!(got[2].1, InfoVal::Other(PMIX_DATA_ARRAY));
    // SAFETY: the membership is a data array of 2 procs built by InfoArray::new.
    let procs = unsafe {
        let d = &*a.infos[2].value.data.darray;
        assert_eq!((d.type_, d.size), (PMIX_PROC, 2));
        read_procs(d.array.cast::<pmix_proc_t>(), d.size)
    };
    assert_eq!(procs, members);
}

/// Bytes the library took (it sets the pointer to NULL) are not freed again.
#[test]
fn bytes_taken_by_the_library_are_left_to_it() {
    let mut a = InfoArray::new(&[("k".to_string(), Val::Bytes(vec![1, 2, 3]))]);
    // SAFETY: the byte object built above; taken as the library's PMIX_LOAD_BUFFER does.
    unsafe {
        let p = a.infos[0].value.data.bo.bytes;
        a.infos[0].value.data.bo.bytes = ptr::null_mut();
        libc::free(p.cast());
    }
    drop(a);
}

/// What a client passes (built here as the library would) reads back as Rust values:
/// strings, NULL strings, bools, integers of each width, other types by number.
#[test]
fn infos_and_keys_read_back() {
    let mut a = InfoArray::new(&[
        ("svc".into(), Val::Str("port 0".into())),
        ("pmix.wait".into(), Val::Bool(true)),
        ("pmix.euid".into(), Val::U32(1000)),
        ("pmix.lrank".into(), Val::U16(7)),
    ]);
    let mut infos = std::mem::take(&mut a.infos);
    let mut extra = |t: u16, d: pmix_value_data| {
        let mut i = pmix_info_t {
            key: [0; KEYLEN],
            flags: 0,
            value: pmix_value_t { type_: t, data: d },
        };
        fill(&mut i.key, "k");
        infos.push(i);
    };
    extra(PMIX_INT, pmix_value_data { integer: -5 });
    extra(PMIX_DATA_RANGE, pmix_value_data { uint8: 2 });
    extra(PMIX_INT64, pmix_value_data { int64: -1 << 40 });
    extra(
        PMIX_STRING,
        pmix_value_data {
            string: ptr::null_mut(),
        },
    );
    extra(PMIX_DATA_ARRAY, pmix_value_data { _size: [0; 3] });
    // SAFETY: infos holds infos.len() entries built above; the strings live in `a`'s
    // other fields, moved nowhere.
    let got = unsafe { read_infos(infos.as_ptr(), infos.len()) };
    let vals: Vec<InfoVal> = got.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(got[0].0, "svc");
    assert_eq!(
        vals,
        [
            InfoVal::Str("port 0".into()),
            InfoVal::Bool(true),
            InfoVal::Int(1000),
            InfoVal::Int(7),
            InfoVal::Int(-5),
            InfoVal::Int(2),
            InfoVal::Int(-1 << 40),
            InfoVal::Str(String::new()),
            InfoVal::Other(PMIX_DATA_ARRAY),
        ]
    );
    // SAFETY: NULL is allowed.
    assert!(unsafe { read_infos(ptr::null(), 3) }.is_empty());
    let k = [c_string("a"), c_string("b c")];
    let mut argv: Vec<*mut c_char> = k.iter().map(|c| c.as_ptr() as *mut c_char).collect();
    argv.push(ptr::null_mut());
    // SAFETY: a NULL-terminated array of the strings in `k`.
    assert_eq!(unsafe { read_keys(argv.as_mut_ptr()) }, ["a", "b c"]);
    // SAFETY: NULL is allowed.
    assert!(unsafe { read_keys(ptr::null_mut()) }.is_empty());
}

#[test]
fn unsupported_upcalls_name_their_caller() {
    assert_eq!(
        unsupported_line("spawn", Some(("kauri_1_x".into(), 3))),
        "kauri: PMIx upcall spawn from kauri_1_x:3 is not supported"
    );
    assert_eq!(
        unsupported_line("query", Some(("ns".into(), PMIX_RANK_WILDCARD))),
        "kauri: PMIx upcall query from ns:* is not supported"
    );
    assert_eq!(
        unsupported_line("iof_pull", None),
        "kauri: PMIx upcall iof_pull from ? is not supported"
    );
}

/// The failure events' codes and types, against the installed headers.
#[test]
fn failure_codes_match_the_c_headers() {
    let Ok(flags) = std::process::Command::new("pkg-config")
        .args(["--cflags", "pmix"])
        .output()
    else {
        say!("pkg-config not found: skipped");
        return;
    };
    let dir = std::env::temp_dir().join(format!("kauri-pmix-codes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("codes.c");
    std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <pmix_server.h>
int main(void) {
  printf("%d %d %d %d %d %d %d\n", PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_ERR_LOST_CONNECTION, PMIX_INT, PMIX_PROC, PMIX_RANGE_CUSTOM);
  printf("%s %s %s %s\n", PMIX_EVENT_AFFECTED_PROC, PMIX_EVENT_CUSTOM_RANGE, PMIX_EVENT_NON_DEFAULT, PMIX_EXIT_CODE);
  return 0;
}
"#,
        )
        .unwrap();
    let exe = dir.join("codes");
    let cflags = String::from_utf8_lossy(&flags.stdout).into_owned();
    let built = std::process::Command::new("cc")
        .args(cflags.split_whitespace())
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status();
    if !matches!(built, Ok(s) if s.success()) {
        let _ = std::fs::remove_dir_all(&dir);
        say!("no C compiler or no PMIx headers: skipped");
        return;
    }
    let out = std::process::Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let want = format!(
        "{} {} {} {} {} {} {}\npmix.evproc pmix.evrange pmix.evnondef pmix.exit.code\n",
        PMIX_ERR_PROC_ABORTED,
        PMIX_ERR_PROC_TERM_WO_SYNC,
        PMIX_ERR_PROC_ABORTED_BY_SIG,
        PMIX_ERR_LOST_CONNECTION,
        PMIX_INT,
        PMIX_PROC,
        PMIX_RANGE_CUSTOM,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}

#[test]
fn info_arrays_point_at_their_values() {
    let a = InfoArray::new(&[
        ("pmix.jobid".into(), Val::Str("job\0cut".into())),
        ("pmix.job.size".into(), Val::U32(4)),
        (
            "pmix.pdata".into(),
            Val::Infos(vec![("pmix.rank".into(), Val::Rank(3))]),
        ),
    ]);
    assert_eq!(a.infos.len(), 3);
    // SAFETY: the test reads back what InfoArray::new wrote.
    unsafe {
        assert_eq!(a.infos[0].value.type_, PMIX_STRING);
        assert_eq!(
            CStr::from_ptr(a.infos[0].value.data.string)
                .to_str()
                .unwrap(),
            "job"
        );
        assert_eq!(a.infos[1].value.data.uint32, 4);
        let d = &*a.infos[2].value.data.darray;
        assert_eq!((d.type_, d.size), (PMIX_INFO, 1));
        let inner = &*(d.array as *const pmix_info_t);
        assert_eq!(inner.value.type_, PMIX_PROC_RANK);
        assert_eq!(inner.value.data.uint32, 3);
        assert_eq!(
            CStr::from_ptr(inner.key.as_ptr()).to_str().unwrap(),
            "pmix.rank"
        );
    }
}

/// The server shares the host's topology with its clients (`PMIX_SERVER_SHARE_TOPOLOGY`,
/// whose key is `pmix.srvr.share`), as PRRTE's daemons do: without it every Open MPI 5 rank
/// discovers the topology itself in `MPI_Init` (docs/performance.md, "The topology handed to the
/// ranks").
#[test]
fn the_server_shares_the_topology() {
    let items = init_items("/tmp/x", "h");
    assert!(
        items.contains(&("pmix.srvr.share".to_string(), Val::Bool(true))),
        "{items:?}"
    );
    assert!(items.contains(&("pmix.hname".to_string(), Val::Str("h".into()))));
}

/// A rank's distances go to the library as a `PMIX_DATA_ARRAY` of `PMIX_DEVICE_DIST`, and an
/// unbound rank's locality as a `PMIX_STRING` with no string.
#[test]
fn distances_and_a_null_string_as_the_library_reads_them() {
    let d = super::Distance {
        uuid: "ipv4://52:54:00:12:34:56".into(),
        osname: "eth0".into(),
        kind: 0x04,
        min: 9,
        max: 13,
    };
    let a = InfoArray::new(&[
        ("pmix.dev.dist".into(), Val::Distances(vec![d])),
        ("pmix.locstr".into(), Val::NoStr),
    ]);
    // SAFETY: the array was built by InfoArray::new and lives across the reads.
    unsafe {
        assert_eq!(a.infos[0].value.type_, PMIX_DATA_ARRAY);
        let arr = &*a.infos[0].value.data.darray;
        assert_eq!((arr.type_, arr.size), (PMIX_DEVICE_DIST, 1));
        let e = &*arr.array.cast::<pmix_device_distance_t>();
        assert_eq!(CStr::from_ptr(e.osname).to_str().unwrap(), "eth0");
        assert_eq!(
            CStr::from_ptr(e.uuid).to_str().unwrap(),
            "ipv4://52:54:00:12:34:56"
        );
        assert_eq!((e.type_, e.mindist, e.maxdist), (0x04, 9, 13));
        assert_eq!(a.infos[1].value.type_, PMIX_STRING);
        assert!(a.infos[1].value.data.string.is_null());
    }
}
