//! Fuzzes the PMI-2 response frame parser: `parse` and `decode` never panic, agree with each
//! other, and a parsed frame re-encodes to bytes that parse back to the same frame.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pmi_wire::v2::{Frame, Response};

fuzz_target!(|data: &[u8]| {
    let parsed = Frame::<Response>::parse(data);
    if let Ok(Some((msg, n))) = &parsed {
        assert!(*n >= 6 && *n <= data.len());
        let mut enc = BytesMut::new();
        msg.encode(&mut enc);
        match Frame::<Response>::parse(&enc) {
            Ok(Some((again, m))) => {
                assert_eq!(&again, msg, "re-parse differs; encoded {:?}", enc);
                assert_eq!(m, enc.len(), "encoding is not one frame: {:?}", enc);
            }
            other => panic!("re-encoded {msg:?} as {enc:?}, which parses to {other:?}"),
        }
    }
    // The body parser on its own never panics either.
    let _ = Frame::<Response>::parse_body(data);
    let mut buf = BytesMut::from(data);
    let mut first = true;
    loop {
        let before = buf.len();
        match Frame::<Response>::decode(&mut buf) {
            Ok(Some(m)) => {
                if first {
                    assert_eq!(
                        Some(&m),
                        parsed.as_ref().ok().and_then(|p| p.as_ref()).map(|p| &p.0)
                    );
                }
            }
            Ok(None) => break,
            Err(e) if e.is_fatal() => break,
            Err(_) => assert!(buf.len() < before, "a non-fatal error consumed nothing"),
        }
        first = false;
    }
});
