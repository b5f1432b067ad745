//! This machine's names: its host name, and whether a name a user gave means it.

/// True when `name` means this machine.
pub fn is_local(name: &str, me: &str) -> bool {
    name == "localhost"
        || name == me
        || name.starts_with("127.")
        || name == "::1"
        || me.split('.').next() == Some(name)
}

/// This machine's host name.
pub fn local_host() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
