//! Reading and writing C arguments: the one place of this crate with `unsafe` code.
//!
//! Every function takes the raw pointers a C caller passed and checks what can be checked (a
//! null pointer, a negative length, text that is not UTF-8, a buffer too small); what cannot
//! be checked (that a non-null pointer points to what the API says) is the caller's promise,
//! stated in each function's `# Safety`.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

/// Why a C argument was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgError {
    /// A null pointer or a negative count.
    Invalid,
    /// Text that is not UTF-8 (the wire carries UTF-8 only).
    NotUtf8,
    /// A buffer too small for the answer and its terminating NUL.
    TooSmall,
}

/// The NUL-terminated string at `p`.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid and unchanged for `'a`.
pub unsafe fn str_arg<'a>(p: *const c_char) -> Result<&'a str, ArgError> {
    if p.is_null() {
        return Err(ArgError::Invalid);
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string valid for 'a.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|_| ArgError::NotUtf8)
}

/// Like [`str_arg`], but a null pointer is `None`.
///
/// # Safety
/// As for [`str_arg`].
pub unsafe fn opt_str_arg<'a>(p: *const c_char) -> Result<Option<&'a str>, ArgError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's promise is str_arg's.
    unsafe { str_arg(p) }.map(Some)
}

/// Copies `s` and a terminating NUL into the buffer `buf` of `len` bytes.
///
/// # Safety
/// `buf` is null or points to at least `len` writable bytes.
pub unsafe fn write_str(buf: *mut c_char, len: c_int, s: &str) -> Result<(), ArgError> {
    if buf.is_null() || len < 0 {
        return Err(ArgError::Invalid);
    }
    let len = len as usize;
    if s.len() + 1 > len {
        return Err(ArgError::TooSmall);
    }
    // SAFETY: buf has room for len >= s.len() + 1 bytes (the caller's promise and the check
    // above); the source is a Rust string, which cannot overlap a C caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
        *buf.add(s.len()) = 0;
    }
    Ok(())
}

/// Copies as much of `s` as fits, and a NUL, into `buf` of `len` bytes (for answers that
/// APIs define as truncated, such as PMI-2's `vallen` convention). Returns the bytes copied.
///
/// # Safety
/// As for [`write_str`].
pub unsafe fn write_str_truncated(
    buf: *mut c_char,
    len: c_int,
    s: &str,
) -> Result<usize, ArgError> {
    if buf.is_null() || len <= 0 {
        return Err(ArgError::Invalid);
    }
    let n = s.len().min(len as usize - 1);
    // SAFETY: n + 1 <= len bytes are written, within the caller's buffer; no overlap as above.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    Ok(n)
}

/// Stores `v` at `p`.
///
/// # Safety
/// `p` is null or points to a writable `c_int`.
pub unsafe fn write_int(p: *mut c_int, v: c_int) -> Result<(), ArgError> {
    if p.is_null() {
        return Err(ArgError::Invalid);
    }
    // SAFETY: non-null, and the caller promises a writable c_int.
    unsafe { p.write(v) };
    Ok(())
}

/// Stores `v` at `p` when `p` is not null (for optional outputs).
///
/// # Safety
/// As for [`write_int`].
pub unsafe fn write_opt_int(p: *mut c_int, v: c_int) {
    if !p.is_null() {
        // SAFETY: non-null, and the caller promises a writable c_int.
        unsafe { p.write(v) };
    }
}

/// The `n` elements at `p` (an empty slice when `n` is 0, whatever `p` is).
///
/// # Safety
/// When `n > 0`, `p` is null or points to `n` initialised elements valid for `'a`.
pub unsafe fn slice<'a, T>(p: *const T, n: c_int) -> Result<&'a [T], ArgError> {
    if n < 0 {
        return Err(ArgError::Invalid);
    }
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(ArgError::Invalid);
    }
    // SAFETY: non-null, n > 0 elements promised by the caller.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
}

/// The `n` writable elements at `p`.
///
/// # Safety
/// When `n > 0`, `p` is null or points to `n` writable elements, not aliased, valid for `'a`.
pub unsafe fn slice_mut<'a, T>(p: *mut T, n: c_int) -> Result<&'a mut [T], ArgError> {
    if n < 0 {
        return Err(ArgError::Invalid);
    }
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(ArgError::Invalid);
    }
    // SAFETY: non-null, n > 0 writable, unaliased elements promised by the caller.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n as usize) })
}

/// The strings of a C array of `n` string pointers.
///
/// # Safety
/// As for [`slice()`] (with `n` pointers), and each pointer as for [`str_arg`].
pub unsafe fn str_array<'a>(p: *const *const c_char, n: c_int) -> Result<Vec<&'a str>, ArgError> {
    // SAFETY: the caller's promise for the array.
    let ptrs = unsafe { slice(p, n) }?;
    ptrs.iter()
        // SAFETY: the caller's promise for each element.
        .map(|&s| unsafe { str_arg(s) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn strings_in_and_out() {
        let s = CString::new("héllo").unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { str_arg(s.as_ptr()) }, Ok("héllo"));
        // SAFETY: null is allowed.
        assert_eq!(unsafe { str_arg(std::ptr::null()) }, Err(ArgError::Invalid));
        // SAFETY: null is allowed.
        assert_eq!(unsafe { opt_str_arg(std::ptr::null()) }, Ok(None));
        let bad = [0xffu8 as c_char, 0];
        // SAFETY: a NUL-terminated array.
        assert_eq!(unsafe { str_arg(bad.as_ptr()) }, Err(ArgError::NotUtf8));

        let mut buf = [1 as c_char; 4];
        // SAFETY: buf has 4 bytes.
        assert_eq!(unsafe { write_str(buf.as_mut_ptr(), 4, "abc") }, Ok(()));
        assert_eq!(buf, [97, 98, 99, 0]);
        // SAFETY: as above.
        assert_eq!(
            unsafe { write_str(buf.as_mut_ptr(), 4, "abcd") },
            Err(ArgError::TooSmall)
        );
        // SAFETY: as above.
        assert_eq!(
            unsafe { write_str_truncated(buf.as_mut_ptr(), 4, "wxyz") },
            Ok(3)
        );
        assert_eq!(buf, [119, 120, 121, 0]);
    }

    #[test]
    fn arrays() {
        let a = CString::new("a").unwrap();
        let b = CString::new("b c").unwrap();
        let ptrs = [a.as_ptr(), b.as_ptr()];
        // SAFETY: two valid C strings.
        assert_eq!(unsafe { str_array(ptrs.as_ptr(), 2) }, Ok(vec!["a", "b c"]));
        // SAFETY: n = 0 reads nothing.
        assert_eq!(unsafe { str_array(std::ptr::null(), 0) }, Ok(vec![]));
        // SAFETY: negative counts are refused before any read.
        assert_eq!(
            unsafe { slice::<c_int>(std::ptr::null(), -1) },
            Err(ArgError::Invalid)
        );
        let mut x = 0;
        // SAFETY: a valid c_int.
        assert_eq!(unsafe { write_int(&mut x, 7) }, Ok(()));
        assert_eq!(x, 7);
    }
}
