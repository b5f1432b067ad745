//! kauri's own words on its standard output and standard error: every message, help text
//! and report kauri itself prints goes through here, so that a stream the reader closed
//! (`kauri … 2>&1 | head -1`) is not a panic. Rust's `println!` and `eprintln!` panic when
//! the write fails ("failed printing to stderr"); these drop what cannot be written, and the
//! job goes on to end with its own status. What the ranks write is forwarded elsewhere
//! (`frontend::print_output`), where a closed stdout ends the job with 141.
//!
//! Use [`say!`](crate::say) where `eprintln!` would be, [`show!`](crate::show) where
//! `println!` would be, and [`out`]/[`err`] for text that brings its own line ends.

use std::fmt;
use std::io::Write;

/// Writes `text` to standard output as it is; a failed write (a closed pipe) is dropped.
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// Writes `text` to standard error as it is; a failed write (a closed pipe) is dropped.
pub fn err(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// One line on standard error (what [`say!`](crate::say) expands to).
pub fn say(args: fmt::Arguments) {
    err(&line(args));
}

/// One line on standard output (what [`show!`](crate::show) expands to).
pub fn show(args: fmt::Arguments) {
    out(&line(args));
}

/// `args` formatted, with a line end: written with one call, so that lines of several
/// threads do not mix.
fn line(args: fmt::Arguments) -> String {
    let mut s = fmt::format(args);
    s.push('\n');
    s
}

/// How many characters of a string the user gave an error line echoes ([`clip`]).
pub const ECHO_MAX: usize = 64;

/// `text`, as an error line echoes something the user gave (a host name, an option, a
/// hostfile's word): whole when it is short, else its first [`ECHO_MAX`] characters, `…` and
/// its length, so that a megabyte of it makes a short line.
pub fn clip(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(ECHO_MAX) {
        None => text.into(),
        Some((end, _)) => format!("{}… ({} bytes)", &text[..end], text.len()).into(),
    }
}

/// `text` quoted as `{:?}` quotes it, [`clip`]ped the same way: `"first 64 characters"… (N
/// bytes)`.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(ECHO_MAX) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &text[..end], text.len()),
    }
}

/// `eprintln!` that does not panic: one line on kauri's standard error, dropped when the
/// stream is closed.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::say(format_args!($($arg)*))
    };
}

/// `println!` that does not panic: one line on kauri's standard output, dropped when the
/// stream is closed.
#[macro_export]
macro_rules! show {
    ($($arg:tt)*) => {
        $crate::console::show(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    #[test]
    fn long_echoes_are_clipped() {
        assert_eq!(super::clip("-frobnicate"), "-frobnicate");
        assert_eq!(super::quoted("a:3:4"), "\"a:3:4\"");
        let long = "é".repeat(100);
        let c = super::clip(&long);
        assert_eq!(c, format!("{}… (200 bytes)", "é".repeat(64)));
        assert_eq!(
            super::quoted(&long),
            format!("\"{}\"… (200 bytes)", "é".repeat(64))
        );
        assert_eq!(super::clip(&"x".repeat(64)), "x".repeat(64), "64 is whole");
    }

    /// With the reading end of its standard error closed, kauri's writes neither panic nor
    /// kill it (SIGPIPE is ignored by Rust programs; the write is an EPIPE).
    #[test]
    fn a_closed_stream_is_not_a_panic() {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fds[0] is ours; closing it makes writes to fds[1] fail with EPIPE.
        unsafe { libc::close(fds[0]) };
        let saved = std::io::stderr().as_raw_fd();
        // SAFETY: dup/dup2 on descriptors this test owns; stderr is put back below.
        let keep = unsafe { libc::dup(saved) };
        unsafe { libc::dup2(fds[1], saved) };
        crate::say!("lost {}", 1);
        super::err("lost too\n");
        // SAFETY: as above.
        unsafe {
            libc::dup2(keep, saved);
            libc::close(keep);
            libc::close(fds[1]);
        }
    }
}
