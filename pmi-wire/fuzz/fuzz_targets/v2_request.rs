//! Fuzzes the PMI-2 request frame parser: `parse` and `decode` never panic, agree with
//! each other, and a parsed frame re-encodes to bytes that parse back to the same frame.
#![no_main]

#[macro_use]
#[path = "codec_check.rs"]
mod codec_check;

use libfuzzer_sys::fuzz_target;
use pmi_wire::v2::{Frame, Request};

fuzz_target!(|data: &[u8]| {
    codec_check!(Frame<Request>, 6, data);
    // The body parser on its own never panics either.
    let _ = Frame::<Request>::parse_body(data);
});
