//! `libpmi2.so`: the PMI-2 C API, spoken over the PMI-2 wire protocol.
//!
//! A program linked with `-lpmi2` (declarations in `contrib/libpmi/include/pmi2.h`) calls
//! `PMI2_Init`; the library finds the server through `PMI_FD`, or `PMI_PORT` and `PMI_ID`, as
//! MPICH's PMI-2 client does, and talks to it with [`pmi_wire::client::Client`]. Without
//! either variable the process is a singleton: rank 0 of 1, with its KVS and node attributes
//! in memory.
//!
//! Layers: [`session`] holds the one session of the process and implements every call with
//! Rust types (no `unsafe`); `ffi` is the C boundary, which checks and converts arguments and
//! maps results to the `PMI2_*` codes of [`codes`]. PMI-2 frames carry spaces, so values
//! are sent as they are (no encoding, unlike `libpmi.so`).

#![warn(missing_docs)]

pub mod codes;
mod ffi;
pub mod session;
