//! Fuzzes the PMI-1 response parser: `parse` and `decode` never panic, agree with each other,
//! and a parsed message re-encodes to bytes that parse back to the same message.
#![no_main]

#[macro_use]
#[path = "codec_check.rs"]
mod codec_check;

use libfuzzer_sys::fuzz_target;
use pmi_wire::v1::Response;

fuzz_target!(|data: &[u8]| {
    codec_check!(Response, 1, data);
});
