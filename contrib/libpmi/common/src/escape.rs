//! Values with spaces over PMI-1, and `put` lines that fit every server.
//!
//! PMI-1 writes a value raw into a line of space-separated `key=value` tokens, so a value
//! cannot hold a space, a tab or a line break: Hydra 4.0.2 and Slurm cut it at the first space
//! (Open MPI's modex values end in padding spaces). MPICH 4.1's parser also reads `\x` as an
//! escaped `x`. And Slurm reads a PMI-1 request with one `read()` of at most 1024 bytes, so a
//! longer line is split into garbage.
//!
//! **The encoding.** A value is sent as it is unless it is empty, starts with `~`, or holds a
//! space, tab, newline, carriage return or backslash. Otherwise it is sent as `~` followed by
//! the value with each of those characters replaced by two: space `~s`, tab `~t`, newline
//! `~n`, carriage return `~r`, backslash `~b`, and `~` itself `~~`. Decoding undoes this for a
//! value that starts with `~`; a value that starts with `~` but is not a valid encoding (a
//! raw value from another client) is returned as it is. The encoded form never holds a
//! character that PMI-1 tokenisation or MPICH's unescaping would change, and is at most
//! `1 + 2 × len` bytes.
//!
//! **The length.** [`value_length_max`] is the largest value buffer (terminating NUL
//! included, as in MPICH's API) such that the longest value it holds, encoded in the worst
//! case, fits one line of [`LINE_MAX`] bytes together with the kvsname and the longest key.

use std::borrow::Cow;

/// The longest PMI-1 line sent: Slurm's single 1024-byte read, MPICH's `PMIU_MAXLINE`.
pub const LINE_MAX: usize = pmi_wire::limits::V1_CLIENT_LINE_MAX;

/// The bytes of a `put` line other than the kvsname, key and value:
/// `cmd=put kvsname=`, ` key=`, ` value=` and the newline.
pub const PUT_OVERHEAD: usize = "cmd=put kvsname= key= value=\n".len();

/// The first character of an encoded value.
pub const MARKER: char = '~';

fn escaped(c: char) -> Option<char> {
    Some(match c {
        ' ' => 's',
        '\t' => 't',
        '\n' => 'n',
        '\r' => 'r',
        '\\' => 'b',
        '~' => '~',
        _ => return None,
    })
}

fn unescaped(c: char) -> Option<char> {
    Some(match c {
        's' => ' ',
        't' => '\t',
        'n' => '\n',
        'r' => '\r',
        'b' => '\\',
        '~' => '~',
        _ => return None,
    })
}

/// True when `value` cannot go on the wire as it is.
pub fn needs_encoding(value: &str) -> bool {
    value.is_empty()
        || value.starts_with(MARKER)
        || value.chars().any(|c| c != '~' && escaped(c).is_some())
}

/// The wire form of `value` (borrowed when no encoding is needed).
pub fn encode(value: &str) -> Cow<'_, str> {
    if !needs_encoding(value) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(1 + 2 * value.len());
    out.push(MARKER);
    for c in value.chars() {
        match escaped(c) {
            Some(e) => {
                out.push(MARKER);
                out.push(e);
            }
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The value whose wire form is `wire` (see the module documentation).
pub fn decode(wire: &str) -> Cow<'_, str> {
    let Some(body) = wire.strip_prefix(MARKER) else {
        return Cow::Borrowed(wire);
    };
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != MARKER {
            out.push(c);
            continue;
        }
        match chars.next().and_then(unescaped) {
            Some(u) => out.push(u),
            None => return Cow::Borrowed(wire),
        }
    }
    Cow::Owned(out)
}

/// The value buffer size to report to applications (`PMI_KVS_Get_value_length_max`): at most
/// `server_max`, and small enough that a value of one byte less, encoded in the worst case,
/// fits a [`LINE_MAX`] line with a kvsname of `kvsname_len` bytes and a key of
/// `key_length_max - 1` bytes. Never below 2 (room for one byte).
pub fn value_length_max(server_max: usize, kvsname_len: usize, key_length_max: usize) -> usize {
    let room = LINE_MAX
        .saturating_sub(PUT_OVERHEAD)
        .saturating_sub(kvsname_len)
        .saturating_sub(key_length_max.saturating_sub(1));
    // An encoded value of `v - 1` bytes takes at most 2v - 1 bytes.
    room.div_ceil(2).min(server_max).max(2)
}

/// The length of the `put` line for these fields, newline included.
pub fn put_line_len(kvsname: &str, key: &str, wire_value: &str) -> usize {
    PUT_OVERHEAD + kvsname.len() + key.len() + wire_value.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The `put` line pmi-wire writes, as text.
    fn put_line(kvsname: &str, key: &str, value: &str) -> String {
        let req = pmi_wire::v1::Request::Put {
            kvsname: kvsname.into(),
            key: key.into(),
            value: value.into(),
        };
        let mut buf = Default::default();
        req.encode(&mut buf);
        String::from_utf8(buf.to_vec()).unwrap()
    }

    #[test]
    fn plain_values_pass_unchanged() {
        for v in [
            "abc",
            "a=b",
            "x~y",
            "description#tcp$port#42$",
            "(vector,(0,1,4))",
        ] {
            assert!(matches!(encode(v), Cow::Borrowed(_)), "{v}");
            assert_eq!(decode(v), v);
        }
    }

    #[test]
    fn the_scheme() {
        assert_eq!(encode("a b"), "~a~sb");
        assert_eq!(encode(""), "~");
        assert_eq!(encode("~x"), "~~~x");
        assert_eq!(encode("t\tn\nr\rb\\"), "~t~tn~nr~rb~b");
        assert_eq!(encode("AQ== -"), "~AQ==~s-");
        assert_eq!(decode("~a~sb"), "a b");
        assert_eq!(decode("~"), "");
        // Not an encoding of ours: returned as it is.
        assert_eq!(decode("~a~"), "~a~");
        assert_eq!(decode("~a~q"), "~a~q");
    }

    #[test]
    fn put_overhead_matches_pmi_wire() {
        assert_eq!(
            put_line("kvs_1", "k", "v").len(),
            put_line_len("kvs_1", "k", "v")
        );
    }

    /// The worst value a reported maximum allows (all spaces) still fits one line, for every
    /// kvsname and key length a server can advertise; and one more byte would not.
    #[test]
    fn worst_case_lines_fit() {
        for kvsname_len in [0, 8, 40, 64, 255, 256] {
            for key_max in [1, 2, 32, 64] {
                let v = value_length_max(1024, kvsname_len, key_max);
                let kvsname = "k".repeat(kvsname_len);
                let key = "y".repeat(key_max - 1);
                let value = " ".repeat(v - 1);
                let line = put_line(&kvsname, &key, &encode(&value));
                assert!(
                    line.len() <= LINE_MAX,
                    "kvsname {kvsname_len} key {key_max}: {} bytes",
                    line.len()
                );
                let longer = " ".repeat(v + 1);
                if v < 1024 && v > 2 {
                    assert!(put_line(&kvsname, &key, &encode(&longer)).len() > LINE_MAX);
                }
            }
        }
        // Hydra: kvsname like kvs_12345_0_1234567890_host (about 35 bytes), key 64.
        assert_eq!(value_length_max(1024, 35, 64), 449);
        assert_eq!(value_length_max(300, 0, 1), 300);
    }

    proptest! {
        #[test]
        fn round_trip(v in "[ \\t\\n\\r\\\\~a-zA-Z0-9=+/-]{0,64}") {
            let w = encode(&v);
            prop_assert!(!w.is_empty());
            prop_assert!(!w.contains([' ', '\t', '\n', '\r', '\\']));
            prop_assert!(w.len() <= 1 + 2 * v.len());
            prop_assert_eq!(decode(&w), v.as_str());
        }

        #[test]
        fn round_trip_any_text(v in any::<String>()) {
            let w = encode(&v);
            prop_assert_eq!(decode(&w), v.as_str());
        }
    }
}
