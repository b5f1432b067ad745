//! Fuzzes the PMI-1 response parser: `parse` and `decode` never panic, agree with each other,
//! and a parsed message re-encodes to bytes that parse back to the same message.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pmi_wire::v1::Response;

fuzz_target!(|data: &[u8]| {
    let parsed = Response::parse(data);
    if let Ok(Some((msg, n))) = &parsed {
        assert!(*n > 0 && *n <= data.len());
        let mut enc = BytesMut::new();
        msg.encode(&mut enc);
        match Response::parse(&enc) {
            Ok(Some((again, m))) => {
                assert_eq!(&again, msg, "re-parse differs; encoded {:?}", enc);
                assert_eq!(m, enc.len(), "encoding is not one message: {:?}", enc);
            }
            other => panic!("re-encoded {msg:?} as {enc:?}, which parses to {other:?}"),
        }
    }
    // decode on a BytesMut: never panics, and consumes whole messages until it stops.
    let mut buf = BytesMut::from(data);
    let mut first = true;
    loop {
        let before = buf.len();
        match Response::decode(&mut buf) {
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
