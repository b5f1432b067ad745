//! The job-key handshake's cryptography: the per-job key ([`new_key`]), the parent's
//! challenge ([`nonce`]), and the child's proof that it holds the key ([`mac`], checked by
//! [`verify`]): HMAC-SHA256 of the nonce and the child's id.
//!
//! Pure functions (and `/dev/urandom`); the exchange itself, over a link, is `hub`'s and
//! `agent`'s.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io;

/// The job key: 32 random bytes, hex-encoded so it can travel in an environment variable or
/// on a line of stdin.
pub fn new_key() -> io::Result<String> {
    let mut b = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A random nonce.
pub fn nonce() -> io::Result<[u8; 32]> {
    // getrandom(2), not /dev/urandom: a nonce must not need a file descriptor, which is
    // exactly what runs out when many agents connect at once.
    let mut b = [0u8; 32];
    let mut got = 0;
    while got < b.len() {
        // SAFETY: writes at most `b.len() - got` bytes into `b[got..]`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), b.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n as usize;
    }
    Ok(b)
}

/// The proof that a child holds `key`.
pub fn mac(key: &str, nonce: &[u8; 32], id: u32) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    m.update(nonce);
    m.update(&id.to_be_bytes());
    m.finalize().into_bytes().to_vec()
}

/// Checks a child's proof in constant time.
pub fn verify(key: &str, nonce: &[u8; 32], id: u32, proof: &[u8]) -> bool {
    let mut m = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key length");
    m.update(nonce);
    m.update(&id.to_be_bytes());
    m.verify_slice(proof).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_key_holder_passes() {
        let n = nonce().unwrap();
        let k = new_key().unwrap();
        assert_eq!(k.len(), 64);
        assert!(verify(&k, &n, 4, &mac(&k, &n, 4)));
        assert!(!verify(&k, &n, 5, &mac(&k, &n, 4)));
        assert!(!verify("other", &n, 4, &mac(&k, &n, 4)));
    }
}
