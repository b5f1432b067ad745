//! System calls made without the C library, for a child that shares kauri's memory
//! ([`crate::host::proc`]'s `CLONE_VM` start) between its `clone` and its `execve`.
//!
//! Such a child runs with kauri's thread pointer, so every C library call it made would read
//! and write kauri's thread-local state: `errno` first of all, which the parent's thread may
//! be reading at that very moment. The calls here put the number and arguments in registers
//! and trap into the kernel, nothing more; a failure comes back as a negative `errno` value
//! in the result, never through `errno`.
//!
//! On an architecture without an implementation here, [`SHARES_MEMORY`] is false and the
//! calls go through `libc::syscall`; the child is then started as a fork, with memory of its
//! own, where writing `errno` harms nobody.

/// True when [`raw`] traps into the kernel itself (no C library, no thread-local state):
/// only then may a child share kauri's memory until its `execve`.
pub const SHARES_MEMORY: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// System call `n` with arguments `a`: its result, or `-errno` when it failed.
///
/// # Safety
/// As for the system call itself: every pointer among `a` must be valid for what call `n`
/// does with it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn raw(n: libc::c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the x86-64 Linux system call convention: number in rax, arguments in rdi, rsi,
    // rdx, r10, r8, r9, result in rax; the kernel clobbers rcx and r11 and nothing else. The
    // caller vouches for the arguments.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// System call `n` with arguments `a`: its result, or `-errno` when it failed.
///
/// # Safety
/// As for the system call itself: every pointer among `a` must be valid for what call `n`
/// does with it.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub unsafe fn raw(n: libc::c_long, a: [usize; 6]) -> isize {
    let ret: isize;
    // SAFETY: the AArch64 Linux system call convention: number in x8, arguments in x0 to x5,
    // result in x0; `svc 0` clobbers nothing else. The caller vouches for the arguments.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n as usize,
            inlateout("x0") a[0] => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack),
        );
    }
    ret
}

/// System call `n` with arguments `a`: its result, or `-errno` when it failed (through the
/// C library, which also sets `errno`: see the module's note).
///
/// # Safety
/// As for the system call itself: every pointer among `a` must be valid for what call `n`
/// does with it.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub unsafe fn raw(n: libc::c_long, a: [usize; 6]) -> isize {
    // SAFETY: as the caller vouches.
    let r = unsafe { libc::syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r < 0 {
        // SAFETY: errno is this thread's.
        -(unsafe { *libc::__errno_location() }) as isize
    } else {
        r as isize
    }
}

/// The kernel's `struct sigaction` for `rt_sigaction` (not the C library's, whose mask is
/// 128 bytes): the handler, the flags, the restorer, a 64-signal mask.
#[repr(C)]
#[derive(Default)]
pub struct KernelSigaction {
    /// `SIG_DFL` (0), `SIG_IGN` (1) or a handler's address.
    pub handler: usize,
    /// `SA_*` flags.
    pub flags: libc::c_ulong,
    /// `sa_restorer`.
    pub restorer: usize,
    /// Signals blocked while the handler runs.
    pub mask: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_return_results_and_negative_errors() {
        // SAFETY: getpid takes nothing; close of -1 touches nothing.
        unsafe {
            assert_eq!(raw(libc::SYS_getpid, [0; 6]), std::process::id() as isize);
            assert_eq!(
                raw(libc::SYS_close, [usize::MAX, 0, 0, 0, 0, 0]),
                -(libc::EBADF as isize)
            );
        }
        let mut old = KernelSigaction::default();
        // SAFETY: rt_sigaction reads no new action and writes the old one into `old`, whose
        // layout is the kernel's with an 8-byte mask.
        let r = unsafe {
            raw(
                libc::SYS_rt_sigaction,
                [
                    libc::SIGPIPE as usize,
                    0,
                    &mut old as *mut _ as usize,
                    8,
                    0,
                    0,
                ],
            )
        };
        assert_eq!(r, 0);
        // The Rust runtime ignores SIGPIPE.
        assert_eq!(old.handler, libc::SIG_IGN);
    }
}
