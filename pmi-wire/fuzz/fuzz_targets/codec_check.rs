//! The check every fuzz target runs, over one message type of `pmi_wire`.
//!
//! `codec_check!(T, MIN, data)`, where `T` has the codec's inherent `parse`, `decode` and
//! `encode`, and `MIN` is the fewest bytes one whole message can take:
//! - `T::parse(data)` never panics; a message it returns re-encodes to bytes that parse back
//!   to the same message and are exactly one message;
//! - `T::decode` on a `BytesMut` of `data` never panics, agrees with `parse` on the first
//!   message, and consumes something on every error that is not fatal.

macro_rules! codec_check {
    ($ty:ty, $min_len:expr, $data:expr) => {{
        let data: &[u8] = $data;
        let parsed = <$ty>::parse(data);
        if let Ok(Some((msg, n))) = &parsed {
            assert!(*n >= $min_len && *n <= data.len());
            let mut enc = bytes::BytesMut::new();
            msg.encode(&mut enc);
            match <$ty>::parse(&enc) {
                Ok(Some((again, m))) => {
                    assert_eq!(&again, msg, "re-parse differs; encoded {:?}", enc);
                    assert_eq!(m, enc.len(), "encoding is not one message: {:?}", enc);
                }
                other => panic!("re-encoded {msg:?} as {enc:?}, which parses to {other:?}"),
            }
        }
        let mut buf = bytes::BytesMut::from(data);
        let mut first = true;
        loop {
            let before = buf.len();
            match <$ty>::decode(&mut buf) {
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
    }};
}
