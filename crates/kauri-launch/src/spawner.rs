//! One thread that starts the launcher processes, so that the event loop never waits for a
//! fork.
//!
//! Starting a process returns only once the child has reached `exec` (or failed to): the
//! parent copies its page tables, then waits while the child is scheduled and runs its
//! `pre_exec` and `execve`. On a quiet machine that is a millisecond. On a starved one (300
//! simulated hosts on 2 cores, each with a rank spinning in MPICH's progress loop, and
//! another job's as many beside them) one start took 50 s, and an agent that starts its
//! eight children in its event loop sends no heartbeat for that long: its children took it
//! for gone after `KAURI_HEARTBEAT_TIMEOUT` and killed their ranks. Here the loop hands the
//! command to this thread and goes on.
//!
//! The thread never ends: a launcher process is started with `PR_SET_PDEATHSIG`, which the
//! kernel sends when the *thread* that forked it ends, not the process. A thread of a pool,
//! ended when idle, would kill the agents it started.

use std::io;
use std::sync::mpsc;
use std::sync::OnceLock;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// A command to start, the runtime its child belongs to, and where the result goes.
struct Request {
    cmd: Command,
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The spawner thread's queue, started at the first use; `None` if the thread could not be
/// made (then each command starts on the caller's thread, as before there was a thread).
fn queue() -> Option<&'static mpsc::Sender<Request>> {
    static QUEUE: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("kauri-spawner".into())
                .spawn(move || serve(rx))
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// The spawner thread: starts each command inside its runtime (the child's reaping belongs
/// to that runtime's driver), then lives on until the process ends.
fn serve(rx: mpsc::Receiver<Request>) {
    for Request {
        mut cmd,
        runtime,
        reply,
    } in rx
    {
        let _in_runtime = runtime.enter();
        let _ = reply.send(cmd.spawn());
    }
    loop {
        std::thread::park();
    }
}

/// Starts `cmd` on the spawner thread and waits, without blocking the event loop, for the
/// child (or the error of its start). Called inside a tokio runtime.
pub async fn spawn(mut cmd: Command) -> io::Result<Child> {
    let Some(queue) = queue() else {
        return cmd.spawn();
    };
    let (reply, answer) = oneshot::channel();
    let request = Request {
        cmd,
        runtime: tokio::runtime::Handle::current(),
        reply,
    };
    if let Err(mpsc::SendError(r)) = queue.send(request) {
        let mut cmd = r.cmd;
        return cmd.spawn();
    }
    answer
        .await
        .unwrap_or_else(|_| Err(io::Error::other("the spawner thread is gone")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command started on the spawner thread runs, is reaped by the caller's runtime, and
    /// an error of its start comes back as the error.
    #[test]
    fn a_command_starts_on_the_spawner_thread_and_is_reaped_here() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        rt.block_on(async {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "exit 7"]);
            let mut child = spawn(cmd).await.expect("sh starts");
            let status = child.wait().await.expect("its status");
            assert_eq!(status.code(), Some(7));
            let missing = spawn(Command::new("/nonexistent/kauri-test")).await;
            assert_eq!(
                missing.map(|_| ()).unwrap_err().kind(),
                io::ErrorKind::NotFound
            );
        });
    }

    /// While the spawner thread waits for a child that has not reached `exec`, the caller's
    /// event loop goes on: the child waits (up to 20 s) for a byte that the loop writes only
    /// once one of its own timers has fired. Started on the loop's thread, the start would
    /// return only after those 20 s, before the timer.
    #[test]
    fn the_event_loop_runs_while_a_start_is_under_way() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let (r, w) = (fds[0], fds[1]);
        rt.block_on(async {
            let mut cmd = Command::new("true");
            // SAFETY: poll and read are async-signal-safe; they touch only the child's stack.
            unsafe {
                cmd.pre_exec(move || {
                    let mut p = libc::pollfd {
                        fd: r,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    libc::poll(&mut p, 1, 20_000);
                    Ok(())
                });
            }
            let start = spawn(cmd);
            tokio::pin!(start);
            let ticked = tokio::select! {
                _ = &mut start => false,
                _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => true,
            };
            // SAFETY: a write of one byte from a live buffer to our pipe.
            unsafe { libc::write(w, b"x".as_ptr().cast(), 1) };
            assert!(ticked, "the event loop waited for the child's exec");
            let mut child = start.await.expect("true starts");
            assert!(child.wait().await.expect("its status").success());
        });
        // SAFETY: closing the two descriptors made above, used by nothing else now.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    }
}
