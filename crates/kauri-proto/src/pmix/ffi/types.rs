//! The C side: `pmix_common.h`/`pmix_server.h` 4.2's status codes, data types and
//! `#[repr(C)]` structures, the callbacks' and upcalls' signatures, and the server module.

use std::ffi::{c_char, c_int, c_void};

/// A PMIx status code (`pmix_status_t`).
pub type Status = c_int;
/// Success.
pub const PMIX_SUCCESS: Status = 0;
/// A generic error.
pub const PMIX_ERROR: Status = -1;
/// The data asked for does not exist.
pub const PMIX_ERR_NOT_FOUND: Status = kauri_core::proto::pmix::ERR_NOT_FOUND;
/// The operation is not supported.
pub const PMIX_ERR_NOT_SUPPORTED: Status = -47;
/// `PMIX_ERR_PARTIAL_SUCCESS`: some of what was asked is answered.
pub const PMIX_ERR_PARTIAL_SUCCESS: Status = -52;
/// A spawn failed.
pub const PMIX_ERR_JOB_FAILED_TO_LAUNCH: Status = -181;
/// The operation completed at once; no callback will follow.
pub const PMIX_OPERATION_SUCCEEDED: Status = -157;
/// The name exists already (a publish of a published name).
pub const PMIX_ERR_EXISTS: Status = -11;
/// A value of the wrong type (a published value that is not a string).
pub const PMIX_ERR_TYPE_MISMATCH: Status = -18;
/// The caller may not do this (an unpublish of someone else's name).
pub const PMIX_ERR_NO_PERMISSIONS: Status = -23;
/// The operation did not complete in the time given (a lookup's `PMIX_TIMEOUT`).
pub const PMIX_ERR_TIMEOUT: Status = -24;
/// A bad argument (a publish with no data, a lookup with no key).
pub const PMIX_ERR_BAD_PARAM: Status = -27;
/// The rank meaning "every rank of the namespace".
pub const PMIX_RANK_WILDCARD: u32 = 0xffff_fffe;
/// The rank meaning "no rank in particular".
pub const PMIX_RANK_UNDEF: u32 = u32::MAX;

pub(super) const PMIX_BOOL: u16 = 1;
pub(super) const PMIX_STRING: u16 = 3;
pub(super) const PMIX_SIZE: u16 = 4;
pub(super) const PMIX_INT: u16 = 6;
pub(super) const PMIX_INT8: u16 = 7;
pub(super) const PMIX_INT16: u16 = 8;
pub(super) const PMIX_INT32: u16 = 9;
pub(super) const PMIX_INT64: u16 = 10;
pub(super) const PMIX_UINT: u16 = 11;
pub(super) const PMIX_UINT8: u16 = 12;
pub(super) const PMIX_UINT16: u16 = 13;
pub(super) const PMIX_UINT32: u16 = 14;
pub(super) const PMIX_UINT64: u16 = 15;
pub(super) const PMIX_PERSIST: u16 = 30;
pub(super) const PMIX_DATA_RANGE: u16 = 33;
pub(super) const PMIX_INFO: u16 = 24;
pub(super) const PMIX_BYTE_OBJECT: u16 = 27;
pub(super) const PMIX_DATA_ARRAY: u16 = 39;
pub(super) const PMIX_PROC_RANK: u16 = 40;
pub(super) const PMIX_PROC: u16 = 22;
pub(super) const PMIX_DEVICE_DIST: u16 = 54;
pub(super) const PMIX_DEVTYPE: u16 = 57;
/// `PMIX_DEVTYPE_GPU`, `_NETWORK` and `_OPENFABRICS`: the devices whose distances a rank
/// is told (PRRTE's default `prte_pmix_generate_distances`: "fabric,gpu,network").
pub(super) const PMIX_DEVTYPES_NEAR: u64 = 0x02 | 0x04 | 0x08;

pub(super) const NSLEN: usize = 256;
pub(super) const KEYLEN: usize = 512;

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_proc_t {
    pub(super) nspace: [c_char; NSLEN],
    pub(super) rank: u32,
}

/// `pmix_cpuset_t`: a binding, as the library keeps it (`source` "hwloc", an hwloc bitmap).
#[repr(C)]
pub(super) struct pmix_cpuset_t {
    pub(super) source: *mut c_char,
    pub(super) bitmap: *mut c_void,
}

/// `pmix_device_distance_t`: how far a device is from a binding.
#[repr(C)]
pub(super) struct pmix_device_distance_t {
    pub(super) uuid: *mut c_char,
    pub(super) osname: *mut c_char,
    pub(super) type_: u64,
    pub(super) mindist: u16,
    pub(super) maxdist: u16,
}

/// `pmix_data_array_t`.
#[repr(C)]
pub(super) struct pmix_data_array_t {
    pub(super) type_: u16,
    pub(super) size: usize,
    pub(super) array: *mut c_void,
}

/// The members of `pmix_value_t`'s union that Kauri writes or reads, padded to the union's
/// size.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) union pmix_value_data {
    pub(super) flag: bool,
    pub(super) string: *mut c_char,
    pub(super) size: usize,
    pub(super) integer: c_int,
    pub(super) int8: i8,
    pub(super) int16: i16,
    pub(super) int32: i32,
    pub(super) int64: i64,
    pub(super) uint8: u8,
    pub(super) uint16: u16,
    pub(super) uint32: u32,
    pub(super) uint64: u64,
    pub(super) darray: *mut pmix_data_array_t,
    pub(super) bo: pmix_byte_object_t,
    pub(super) _size: [u64; 3],
}

/// `pmix_byte_object_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct pmix_byte_object_t {
    pub(super) bytes: *mut c_char,
    pub(super) size: usize,
}

/// `pmix_value_t`.
#[repr(C)]
pub(super) struct pmix_value_t {
    pub(super) type_: u16,
    pub(super) data: pmix_value_data,
}

/// `pmix_info_t`.
#[repr(C)]
pub(super) struct pmix_info_t {
    pub(super) key: [c_char; KEYLEN],
    pub(super) flags: u32,
    pub(super) value: pmix_value_t,
}

/// `pmix_pdata_t`: one answer of a lookup (who published, the key, the value).
#[repr(C)]
pub(super) struct pmix_pdata_t {
    pub(super) proc_: pmix_proc_t,
    pub(super) key: [c_char; KEYLEN],
    pub(super) value: pmix_value_t,
}

pub(super) type pmix_op_cbfunc_t = Option<unsafe extern "C" fn(Status, *mut c_void)>;
pub(super) type pmix_lookup_cbfunc_t =
    Option<unsafe extern "C" fn(Status, *mut pmix_pdata_t, usize, *mut c_void)>;
pub(super) type pmix_release_cbfunc_t = Option<unsafe extern "C" fn(*mut c_void)>;
pub(super) type pmix_modex_cbfunc_t = Option<
    unsafe extern "C" fn(
        Status,
        *const c_char,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
>;
pub(super) type pmix_dmodex_response_fn_t =
    Option<unsafe extern "C" fn(Status, *mut c_char, usize, *mut c_void)>;

/// `pmix_app_t`: one application of a spawn.
#[repr(C)]
pub(super) struct pmix_app_t {
    pub(super) cmd: *mut c_char,
    pub(super) argv: *mut *mut c_char,
    pub(super) env: *mut *mut c_char,
    pub(super) cwd: *mut c_char,
    pub(super) maxprocs: c_int,
    pub(super) info: *mut pmix_info_t,
    pub(super) ninfo: usize,
}

pub(super) type pmix_spawn_cbfunc_t =
    Option<unsafe extern "C" fn(Status, *mut c_char, *mut c_void)>;
type SpawnFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    *const pmix_app_t,
    usize,
    pmix_spawn_cbfunc_t,
    *mut c_void,
) -> Status;
/// `connect` and `disconnect`.
type ConnectFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;

type ConnectedFn =
    unsafe extern "C" fn(*const pmix_proc_t, *mut c_void, pmix_op_cbfunc_t, *mut c_void) -> Status;
type Connected2Fn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut c_void,
    *mut pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type AbortFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut c_void,
    c_int,
    *const c_char,
    *mut pmix_proc_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type FenceFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    *mut c_char,
    usize,
    pmix_modex_cbfunc_t,
    *mut c_void,
) -> Status;
type DmodexFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    pmix_modex_cbfunc_t,
    *mut c_void,
) -> Status;

type PublishFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type LookupFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut *mut c_char,
    *const pmix_info_t,
    usize,
    pmix_lookup_cbfunc_t,
    *mut c_void,
) -> Status;
type UnpublishFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *mut *mut c_char,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
// The upcalls Kauri answers "not supported": only the arguments it reads are typed; the
// others are pointers (`*const c_void`) or integers of their C width.
type NotifyFn = unsafe extern "C" fn(
    Status,
    *const pmix_proc_t,
    u8,
    *mut pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type QueryFn = unsafe extern "C" fn(
    *mut pmix_proc_t,
    *mut c_void,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type AllocFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    u8,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type JobControlFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type MonitorFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    Status,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type GetCredFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type ValidateCredFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const c_void,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;
type IofPullFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    u16,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type StdinFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    *const c_void,
    pmix_op_cbfunc_t,
    *mut c_void,
) -> Status;
type FabricFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    c_int,
    *const pmix_info_t,
    usize,
    *const c_void,
    *mut c_void,
) -> Status;

/// `group` (`pmix_server_grp_fn_t`): the operation (`pmix_group_operation_t`, an enum), the
/// group's id, its members, the directives, and an info callback (`pmix_info_cbfunc_t`).
pub(super) type LogFn = unsafe extern "C" fn(
    *const pmix_proc_t,
    *const pmix_info_t,
    usize,
    *const pmix_info_t,
    usize,
    pmix_op_cbfunc_t,
    *mut c_void,
);
pub(super) type GroupFn = unsafe extern "C" fn(
    c_int,
    *mut c_char,
    *const pmix_proc_t,
    usize,
    *const pmix_info_t,
    usize,
    pmix_info_cbfunc_t,
    *mut c_void,
) -> Status;
pub(super) type pmix_info_cbfunc_t = Option<
    unsafe extern "C" fn(
        Status,
        *mut pmix_info_t,
        usize,
        *mut c_void,
        pmix_release_cbfunc_t,
        *mut c_void,
    ),
>;

/// `pmix_server_module_t` (the 4.0 layout: 28 function pointers; and 5.0's 29th, NULL).
/// Every entry is Kauri's except five it leaves NULL on purpose, because OpenPMIx 4.2 does better without them (see
/// `docs/pmix.md`, "The server module"): `register_events`, `deregister_events`, `listener`,
/// `tool_connected` and `log`, typed here as plain pointers.
#[repr(C)]
pub(super) struct pmix_server_module_t {
    pub(super) client_connected: Option<ConnectedFn>,
    pub(super) client_finalized: Option<ConnectedFn>,
    pub(super) abort: Option<AbortFn>,
    pub(super) fence_nb: Option<FenceFn>,
    pub(super) direct_modex: Option<DmodexFn>,
    pub(super) publish: Option<PublishFn>,
    pub(super) lookup: Option<LookupFn>,
    pub(super) unpublish: Option<UnpublishFn>,
    pub(super) spawn: Option<SpawnFn>,
    pub(super) connect: Option<ConnectFn>,
    pub(super) disconnect: Option<ConnectFn>,
    pub(super) register_events: *const c_void,
    pub(super) deregister_events: *const c_void,
    pub(super) listener: *const c_void,
    pub(super) notify_event: Option<NotifyFn>,
    pub(super) query: Option<QueryFn>,
    pub(super) tool_connected: *const c_void,
    pub(super) log: Option<LogFn>,
    pub(super) allocate: Option<AllocFn>,
    pub(super) job_control: Option<JobControlFn>,
    pub(super) monitor: Option<MonitorFn>,
    pub(super) get_credential: Option<GetCredFn>,
    pub(super) validate_credential: Option<ValidateCredFn>,
    pub(super) iof_pull: Option<IofPullFn>,
    pub(super) push_stdin: Option<StdinFn>,
    pub(super) group: Option<GroupFn>,
    pub(super) fabric: Option<FabricFn>,
    pub(super) client_connected2: Option<Connected2Fn>,
    /// 5.0's `session_control`: never filled, but there so that OpenPMIx 5, which copies the
    /// whole structure, reads Kauri's NULL and not what lies beyond the 4.x structure.
    pub(super) session_control: *const c_void,
}

/// `pmix_query_t`.
#[repr(C)]
pub(super) struct pmix_query_t {
    pub(super) keys: *mut *mut c_char,
    pub(super) qualifiers: *mut pmix_info_t,
    pub(super) nqual: usize,
}

// The codes of the failure events (`notify_failure`: `PMIx_Notify_event`), kauri telling its
// local clients that a rank of their job ended abnormally or was lost with its host (see
// docs/pmix.md, "Failure events").

/// A process ended by calling `PMIx_Abort`, or (Open MPI 4.1's and kauri's use) exited with
/// a non-zero status.
pub const PMIX_ERR_PROC_ABORTED: Status = -7;
/// A process exited without calling `PMIx_Finalize` while the others still needed it.
pub const PMIX_ERR_PROC_TERM_WO_SYNC: Status = -200;
/// A process was killed by a signal.
pub const PMIX_ERR_PROC_ABORTED_BY_SIG: Status = -402;
/// The connection to a process was lost (kauri: its host's agent was).
pub const PMIX_ERR_LOST_CONNECTION: Status = -61;
