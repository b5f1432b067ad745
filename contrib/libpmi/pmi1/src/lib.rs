//! `libpmi.so`: the PMI-1 C API, spoken over the PMI-1 wire protocol.
//!
//! A program linked with `-lpmi` (declarations in `contrib/libpmi/include/pmi.h`), or Open MPI
//! 4.1 started without `mpirun` (its `flux` component `dlopen`s the library named by
//! `FLUX_PMI_LIBRARY_PATH`), calls `PMI_Init`; the library finds the server through `PMI_FD`,
//! or `PMI_PORT` and `PMI_ID`, exactly as MPICH's own client does, and talks to it with
//! [`pmi_wire::client::Client`]. Without either variable the process is a singleton: rank 0 of
//! 1, with its KVS in memory.
//!
//! Layers: [`session`] holds the one session of the process and implements every call with
//! Rust types (no `unsafe`); `ffi` is the C boundary: it checks and converts arguments and maps
//! results to the `PMI_*` return codes of [`codes`]. Beyond MPICH's client this library has
//! `PMI_Get_clique_size`/`PMI_Get_clique_ranks` (from `PMI_process_mapping`), values with
//! spaces (the encoding of [`kauri_libpmi_common::escape`]), and lines that never exceed 1024
//! bytes, which Slurm's PMI-1 server needs.

#![warn(missing_docs)]

pub mod codes;
mod ffi;
pub mod session;
