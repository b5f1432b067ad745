//! The start of a rank's process, between `clone` and `execve`: what the child is given
//! ([`ChildPlan`]), what it does ([`child_main`]: raw system calls only), the stack it runs
//! on ([`Stack`]), what kauri keeps for it until it is reaped ([`Pinned`]), and the clone
//! itself ([`clone_child`]), which shares kauri's memory unless a debugger traces kauri
//! ([`choose_start`]). [`crate::host::proc::spawn`] prepares the plan and watches the child.

use std::io;
use std::os::fd::RawFd;

/// What the child of [`crate::host::proc::spawn`] needs between `clone` and `execve`, prepared by the parent:
/// pointers into memory that [`Pinned`] keeps, unchanged, until the child is reaped, and
/// plain numbers.
pub(crate) struct ChildPlan {
    pub(crate) prog: *const libc::c_char,
    pub(crate) argv: *const *const libc::c_char,
    pub(crate) sh_argv: *const *const libc::c_char,
    pub(crate) envp: *const *const libc::c_char,
    pub(crate) wdir: *const libc::c_char,
    pub(crate) fd_in: RawFd,
    pub(crate) fd_out: RawFd,
    pub(crate) fd_err: RawFd,
    pub(crate) pmi: Option<RawFd>,
    pub(crate) cpus: Option<libc::cpu_set_t>,
    pub(crate) parent: libc::pid_t,
    pub(crate) fail_msg: *const u8,
    pub(crate) fail_len: usize,
}

/// The highest signal number the kernel knows (`_NSIG`), and the size of its signal mask.
const NSIG: usize = 64;

/// Makes `old` the child's descriptor `new`, open across `execve` (`dup2`, also when the two
/// are the same number, where `dup2` would leave the close-on-exec flag set); raw system
/// calls, as in [`child_main`]. Negative on failure.
///
/// # Safety
/// Only for [`child_main`]: it changes the calling process's descriptor table.
pub(crate) unsafe fn child_dup(old: RawFd, new: RawFd) -> isize {
    use crate::host::syscall::raw;
    // SAFETY: descriptor numbers only.
    unsafe {
        if old == new {
            raw(
                libc::SYS_fcntl,
                [old as usize, libc::F_SETFD as usize, 0, 0, 0, 0],
            )
        } else {
            raw(libc::SYS_dup3, [old as usize, new as usize, 0, 0, 0, 0])
        }
    }
}

/// Resets every caught signal to its default, and `SIGPIPE` too, in a child of
/// [`clone_child`]: raw system calls, as in [`child_main`].
///
/// The parent's signal handlers must not run in the child: signals are blocked (by the
/// parent, around the clone) and every caught one is reset to its default before they are
/// unblocked (as `posix_spawn` does); the table of handlers is the child's own (no
/// `CLONE_SIGHAND`). Rust ignores `SIGPIPE`, and an ignored signal stays ignored across exec:
/// it is reset too.
///
/// # Safety
/// Only for [`child_main`]: it changes the calling process's signal dispositions.
pub(crate) unsafe fn reset_signals() {
    use crate::host::syscall::{raw, KernelSigaction};
    for sig in 1..=NSIG {
        let mut old = KernelSigaction::default();
        let to = &mut old as *mut KernelSigaction as usize;
        // SAFETY: rt_sigaction reads no new action and writes the old one into `old`, whose
        // layout is the kernel's with a NSIG-bit mask.
        let got = unsafe { raw(libc::SYS_rt_sigaction, [sig, 0, to, NSIG / 8, 0, 0]) };
        let caught = old.handler != libc::SIG_DFL && old.handler != libc::SIG_IGN;
        if got == 0 && (caught || sig == libc::SIGPIPE as usize) {
            let dfl = KernelSigaction::default();
            let from = &dfl as *const KernelSigaction as usize;
            // SAFETY: as above, setting the default action.
            unsafe { raw(libc::SYS_rt_sigaction, [sig, from, 0, NSIG / 8, 0, 0]) };
        }
    }
}

/// The child's side of [`crate::host::proc::spawn`], on its own stack, sharing the parent's memory (a `clone`
/// with `CLONE_VM`, see [`clone_child`]): raw system calls only ([`crate::host::syscall`]:
/// no C library call, which would write the parent's `errno`), reading the plan's memory and
/// writing nothing but this stack, ending in `execve` or `exit`.
extern "C" fn child_main(plan: *mut libc::c_void) -> libc::c_int {
    use crate::host::syscall::raw;
    const BIND_MSG: &[u8] = b"kauri: cannot bind the rank to its CPUs\n";
    // SAFETY: `plan` points to the parent's ChildPlan, which the parent keeps, unchanged,
    // until this child is reaped (Pinned). Every call below is a system call on memory the
    // plan names or on this stack; nothing allocates (the allocator's locks are the parent's).
    unsafe {
        let p = &*(plan as *const ChildPlan);
        let exit = |code: usize| -> ! {
            loop {
                raw(libc::SYS_exit, [code, 0, 0, 0, 0, 0]);
            }
        };
        let say = |msg: *const u8, len: usize| {
            raw(libc::SYS_write, [2, msg as usize, len, 0, 0, 0]);
        };
        reset_signals();
        // A process group of its own in kauri's session, as mpirun's ranks are (Hydra makes
        // each rank a session leader): with the kernel's autogroup scheduling a session is a
        // scheduling group, and a rank that yields the CPU while it waits (Open MPI's
        // `mpi_yield_when_idle`, MPICH's polls) yields it only to its own group's tasks. Each
        // rank alone in a session of its own yielded to nobody: NWChem on 4 ranks took 41 s
        // beside two busy loops, against 2.8 s under mpirun (`docs/performance.md`).
        raw(libc::SYS_setpgid, [0; 6]);
        raw(
            libc::SYS_prctl,
            [
                libc::PR_SET_PDEATHSIG as usize,
                libc::SIGKILL as usize,
                0,
                0,
                0,
                0,
            ],
        );
        if raw(libc::SYS_getppid, [0; 6]) != p.parent as isize {
            exit(1);
        }
        let none: u64 = 0;
        raw(
            libc::SYS_rt_sigprocmask,
            [
                libc::SIG_SETMASK as usize,
                &none as *const u64 as usize,
                0,
                NSIG / 8,
                0,
                0,
            ],
        );
        if child_dup(p.fd_in, 0) < 0 || child_dup(p.fd_out, 1) < 0 || child_dup(p.fd_err, 2) < 0 {
            exit(126);
        }
        if let Some(fd) = p.pmi {
            raw(
                libc::SYS_fcntl,
                [fd as usize, libc::F_SETFD as usize, 0, 0, 0, 0],
            );
        }
        if let Some(set) = &p.cpus {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let set = set as *const libc::cpu_set_t as usize;
            if raw(libc::SYS_sched_setaffinity, [0, size, set, 0, 0, 0]) < 0 {
                say(BIND_MSG.as_ptr(), BIND_MSG.len());
                exit(126);
            }
        }
        if raw(libc::SYS_chdir, [p.wdir as usize, 0, 0, 0, 0, 0]) < 0 {
            say(p.fail_msg, p.fail_len);
            exit(126);
        }
        let (argv, envp) = (p.argv as usize, p.envp as usize);
        let e = raw(libc::SYS_execve, [p.prog as usize, argv, envp, 0, 0, 0]);
        if e == -(libc::ENOEXEC as isize) {
            // A script without `#!`: run it with /bin/sh, as execvp does.
            let sh = p.sh_argv as usize;
            raw(libc::SYS_execve, [*p.sh_argv as usize, sh, envp, 0, 0, 0]);
        }
        say(p.fail_msg, p.fail_len);
        exit(127)
    }
}

/// A stack for one child of [`clone_child`] to run [`child_main`] on, from a pool: the
/// child shares kauri's memory, so each child still before its `execve` needs a stack of its
/// own, and the stack must not be reused before the child is reaped (see [`Pinned`]). Each
/// is mapped once, with a guard page below it, and never unmapped; a stack back in the pool
/// keeps the few pages its last child wrote.
pub(crate) struct Stack {
    /// The top (the stack grows down), 16-byte aligned.
    top: usize,
}

/// The bytes of a child's stack above its guard page: [`child_main`] makes system calls
/// only, so a little suffices.
const CHILD_STACK: usize = 32 << 10;

/// The stacks of reaped children, ready for the next.
static STACKS: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

impl Stack {
    /// One from the pool, or a new mapping.
    pub(crate) fn take() -> io::Result<Stack> {
        if let Some(top) = STACKS.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(Stack { top });
        }
        let guard = 4096;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; it is
        // never unmapped.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                guard + CHILD_STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the mapping's first page, just made; a child overflowing its stack faults
        // there rather than writing into kauri's memory.
        unsafe { libc::mprotect(base, guard, libc::PROT_NONE) };
        Ok(Stack {
            top: (base as usize + guard + CHILD_STACK) & !15,
        })
    }

    /// Back to the pool, for a child that can no longer be running on it.
    pub(crate) fn give_back(self) {
        STACKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.top);
    }
}

/// What a child started by [`clone_child`] may read (its plan and strings) or write (its
/// stack) until it has called `execve` or exited: kept, unchanged, until the child is
/// reaped, which is after both. Dropped without [`Pinned::release`] (the child never reaped
/// here), it is leaked, never freed, so nothing of it can be reused while the child may
/// still use it.
pub(crate) struct Pinned(Option<(Stack, Box<dyn std::any::Any>)>);

impl Pinned {
    /// Keeps `stack` and `kept` (the plan and the strings it points into) for a child.
    pub(crate) fn new(stack: Stack, kept: Box<dyn std::any::Any>) -> Pinned {
        Pinned(Some((stack, kept)))
    }

    /// Frees it: only once the child has been reaped.
    pub(crate) fn release(&mut self) {
        if let Some((stack, kept)) = self.0.take() {
            drop(kept);
            stack.give_back();
            LIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(kept) = self.0.take() {
            std::mem::forget(kept);
        }
    }
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Pinned"
        } else {
            "Released"
        })
    }
}

/// Whether [`clone_child`] starts children sharing this process's memory: see
/// [`choose_start`].
static SHARE_MEMORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The fewest ranks a host starts at once for them to share kauri's memory: 1, every start.
/// Measured side by side (1,000 interleaved rounds of `-n 1`, 2026-11-27), a shared start of
/// one rank was 0.09-0.13 ms faster than a fork (the fork's page-table copy, and its release
/// at the rank's `execve`, are gone) and the look for a debugger about 10-20 µs. It was 8 for
/// a while: with it at 1, Open MPI 5's `test_spawn` hung once in CI. That hang was the PMIx
/// library's, after kauri deregistered a spawned namespace too early
/// ([`crate::proto::pmix::deregister_later`]); it hung with 8 too.
pub const SHARE_MIN: usize = 1;

/// Chooses how the next `ranks` ranks of this host start: sharing kauri's memory when they
/// are [`SHARE_MIN`] or more and no debugger (no tracer at all: `TracerPid` in
/// `/proc/self/status`) traces this process now; as plain forks otherwise.
///
/// Why a debugger matters: told of a fork, it takes its breakpoints out of the child's memory
/// before it lets the child go, and a child sharing kauri's memory would take them out of
/// kauri's own: gdb then never stopped at `MPIR_Breakpoint` (`tests/mpir.rs`). Chosen at
/// each job's start on a host, so a debugger that attached since (MPIR's attach mode, then a
/// spawn) is seen too.
///
/// Whether kauri waits for each child's `execve` (`CLONE_VFORK`): only when the ranks, with
/// those it started before that still run (a spawn's parents), are fewer than the CPUs this
/// process may run on. A new child is queued on its parent's CPU (the kernel did not move it
/// to the idle one here), so a child that kauri does not wait for waits for kauri instead:
/// with one rank it sat 0.17-0.23 ms in the run queue (its `schedstat`, median of 200
/// starts, against the floor's 0.03 ms) while kauri went on with its own start (the keeper,
/// the status socket, the signals). Waiting, kauri leaves its CPU
/// to the child at once and wakes, on the exec, on an idle CPU, where it goes on beside the
/// rank: `-n 1` went 1.30 → 1.20 of the floor (300 interleaved rounds). With more ranks than
/// CPUs there is no idle CPU to wake on, and kauri's waits only delay the next ranks (16 and
/// 64 ranks: 1.07 → 1.11 and 1.03 → 1.05), as at 1,024 ranks they kept kauri from serving
/// PMI (see [`clone_child`]). `cpus`: how many CPUs this process may run on
/// ([`crate::host::bind::allowed_cpus`]).
pub fn choose_start(ranks: usize, cpus: usize) {
    let share = ranks >= SHARE_MIN && !traced();
    SHARE_MEMORY.store(share, std::sync::atomic::Ordering::Relaxed);
    let running = LIVE.load(std::sync::atomic::Ordering::Relaxed);
    let few = ranks + running < cpus;
    WAIT_FOR_EXEC.store(share && few, std::sync::atomic::Ordering::Relaxed);
}

/// Children of [`clone_child`] not reaped yet ([`Pinned::release`]): the ranks that already
/// run here, when a spawn starts more.
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether [`clone_child`] waits for each child's `execve`: see [`choose_start`].
static WAIT_FOR_EXEC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a debugger (any tracer) traces this process now: `TracerPid` in
/// `/proc/self/status`, within the file's first kilobyte (one read, no allocation).
fn traced() -> bool {
    use std::io::Read;
    let mut buf = [0u8; 1024];
    let Ok(mut f) = std::fs::File::open("/proc/self/status") else {
        return false;
    };
    let n = f.read(&mut buf).unwrap_or(0);
    let Some(at) = buf[..n].windows(10).position(|w| w == b"TracerPid:") else {
        return false;
    };
    let value = buf[at + 10..n]
        .split(|&b| b == b'\n')
        .next()
        .unwrap_or_default();
    value.iter().any(|b| (b'1'..=b'9').contains(b))
}

/// Clones the child that runs [`child_main`] with `plan` on `stack`, every signal blocked
/// around the clone, and returns at once: the child shares this process's memory (and reads
/// `plan`, which must stay as it is until the child is reaped) until its `execve`.
///
/// `CLONE_VM`, so that starting a rank copies none of kauri's page tables, and nothing kauri
/// writes afterwards is copied on write (at 1,024 ranks the page-table copies and the faults
/// after each fork were most of kauri's CPU). `CLONE_VFORK`, as `posix_spawn` does, only for
/// fewer ranks than CPUs ([`choose_start`]): it suspends this thread until the child execs,
/// and the child waits its turn for a CPU among the job's running ranks; 1,024 ranks on a busy 2-core machine kept kauri suspended 3.7 s of a 10 s job,
/// serving no PMI meanwhile. A fork instead where [`crate::host::syscall`] has no system calls
/// of its own, and while a debugger traces kauri ([`choose_start`]).
pub(crate) fn clone_child(plan: &ChildPlan, stack: &Stack) -> io::Result<libc::pid_t> {
    let vm = if shares_memory() { libc::CLONE_VM } else { 0 };
    let arg = plan as *const ChildPlan as *mut libc::c_void;
    let wait = if vm != 0 && WAIT_FOR_EXEC.load(std::sync::atomic::Ordering::Relaxed) {
        libc::CLONE_VFORK
    } else {
        0
    };
    // SAFETY: child_main reads `plan`, which the caller keeps until the child is reaped.
    let pid = unsafe { clone_with(child_main, arg, stack, vm | wait)? };
    LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(pid)
}

/// Whether children started now share this process's memory ([`choose_start`]'s choice, on
/// an architecture with [`crate::host::syscall`]'s own system calls).
pub(crate) fn shares_memory() -> bool {
    crate::host::syscall::SHARES_MEMORY && SHARE_MEMORY.load(std::sync::atomic::Ordering::Relaxed)
}

/// Clones a child that runs `main(arg)` on `stack`, every signal blocked around the clone,
/// and returns its pid: at once, or once the child has called `execve` or exited when
/// `flags` holds `CLONE_VFORK`. With `CLONE_VM` in `flags` the child shares this process's
/// memory.
///
/// # Safety
/// `main` must keep to what a child sharing this memory may do (raw system calls, no C
/// library call, no allocation: see [`child_main`]), and `arg` and `stack` must stay valid
/// for as long as it runs on them.
pub(crate) unsafe fn clone_with(
    main: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    stack: &Stack,
    flags: libc::c_int,
) -> io::Result<libc::pid_t> {
    // SAFETY: sigfillset and pthread_sigmask write only the sets given. Blocking every signal
    // around the clone keeps the parent's handlers from running in the child (see
    // child_main); the parent's mask is restored right after.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        // SAFETY: the child runs `main` on its own stack, reading `arg`, as the caller vouches.
        let pid = libc::clone(
            main,
            stack.top as *mut libc::c_void,
            flags | libc::SIGCHLD,
            arg,
        );
        let e = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(e);
        }
        pid
    };
    Ok(pid)
}
