//! Fuzzes the PMI-1 request parser: `parse` and `decode` never panic, agree with each other,
//! and a parsed message re-encodes to bytes that parse back to the same message.
#![no_main]

#[macro_use]
#[path = "codec_check.rs"]
mod codec_check;

use libfuzzer_sys::fuzz_target;
use pmi_wire::v1::Request;

fuzz_target!(|data: &[u8]| {
    codec_check!(Request, 1, data);
});
