//! Wire limits, as named constants.
//!
//! The advertised limits ([`KVSNAME_MAX`], [`KEY_MAX`], [`VALUE_MAX`]) are what a server tells
//! clients in `maxes`. They match Hydra and Slurm. Do not raise them: MPICH's classic PMI-1
//! client builds each `put` line in a 1024-byte buffer and clamps the value length to what
//! fits, asserting it stays above 256; MPICH and MVAPICH2 are known to crash when a server
//! advertises more. MPICH splits longer blobs into segments, so 1024 is enough.
//!
//! The accepted limits (`*_LINE_MAX`, [`V1_SPAWN_MAX`], [`V2_BODY_MAX`]) bound what a parser
//! buffers before it gives up on a message. They are larger than the advertised ones, because
//! real clients overshoot (Open MPI's `put` lines reach about 1070 bytes).

/// Longest kvsname a server advertises (`kvsname_max`).
pub const KVSNAME_MAX: usize = 256;
/// Longest key a server advertises (`keylen_max`); also the PMI-2 `PMI2_MAX_KEYLEN`.
pub const KEY_MAX: usize = 64;
/// Longest value a server advertises (`vallen_max`); also the PMI-2 `PMI2_MAX_VALLEN`.
pub const VALUE_MAX: usize = 1024;
/// The PMI-1 line length classic clients use for their buffers (`PMIU_MAXLINE`).
///
/// A client that talks to an unknown server keeps each line within this length.
pub const V1_CLIENT_LINE_MAX: usize = 1024;
/// Longest PMI-1 line a parser accepts, newline included.
pub const V1_LINE_MAX: usize = 4096;
/// Longest multi-line PMI-1 `mcmd=spawn … endcmd` message a parser accepts.
pub const V1_SPAWN_MAX: usize = 256 * 1024;
/// Width of the PMI-2 length prefix, in bytes.
pub const V2_LEN_WIDTH: usize = 6;
/// Longest PMI-2 frame body a parser accepts (the largest a 6-digit prefix can declare).
pub const V2_BODY_MAX: usize = 999_999;
