//! The `kauri` binary driven as a user would, with shell programs as ranks: no MPI needed.
//! What these check: the command line, the environment ranks get, output forwarding, exit
//! statuses, teardown, and that bad PMI input over a real socket gets an error, not a hang.
//! (Real MPICH, Slurm libpmi2 and Hydra comparisons are in `compat-tests/`.)

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{kauri, run_under_watchdog, stderr, KAURI};

fn stdout_lines(o: &Output) -> Vec<String> {
    common::lines(o)
}

/// Fails if any process whose command line holds `marker` is still alive (after a moment).
fn assert_no_leftovers(marker: &str) {
    std::thread::sleep(Duration::from_millis(200));
    let found = common::marked(marker);
    assert!(found.is_empty(), "left behind: {found:?}");
}

#[test]
fn ranks_get_rank_size_and_local_ids() {
    let o = kauri(
        &[
            "-n",
            "3",
            "sh",
            "-c",
            "echo $PMI_RANK/$PMI_SIZE/$MPI_LOCALRANKID/$MPI_LOCALNRANKS fd=${PMI_FD:+yes}",
        ],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout_lines(&o),
        vec!["0/3/0/3 fd=yes", "1/3/1/3 fd=yes", "2/3/2/3 fd=yes"]
    );
}

#[test]
fn mpmd_segments_and_labels() {
    let o = kauri(
        &[
            "-l", "-n", "1", "echo", "first", ":", "-n", "2", "echo", "second",
        ],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout_lines(&o),
        vec!["[0] first", "[1] second", "[2] second"]
    );
}

#[test]
fn environment_policies() {
    let env = [("KAURI_T_A", "a"), ("KAURI_T_B", "b")];
    let show = "echo A=$KAURI_T_A B=$KAURI_T_B C=$KAURI_T_C";
    let o = kauri(&["-n", "1", "sh", "-c", show], None, &env);
    assert_eq!(stdout_lines(&o), vec!["A=a B=b C="]);
    let o = kauri(
        &[
            "-genvlist",
            "KAURI_T_B,PATH",
            "-genv",
            "KAURI_T_C",
            "c",
            "-n",
            "1",
            "sh",
            "-c",
            show,
        ],
        None,
        &env,
    );
    assert_eq!(stdout_lines(&o), vec!["A= B=b C=c"]);
    let o = kauri(
        &[
            "-n",
            "1",
            "-envnone",
            "-env",
            "PATH",
            "/usr/bin:/bin",
            "sh",
            "-c",
            show,
            ":",
            "-n",
            "1",
            "sh",
            "-c",
            show,
        ],
        None,
        &env,
    );
    assert_eq!(stdout_lines(&o), vec!["A= B= C=", "A=a B=b C="]);
}

#[test]
fn foreign_pmi_and_pmix_variables_do_not_leak() {
    let env = [
        ("PMIX_RANK", "9"),
        ("PMI_RANK", "9"),
        ("PMI_PORT", "x:1"),
        ("PMI_DEBUG", "0"),
    ];
    let o = kauri(
        &[
            "-n",
            "1",
            "sh",
            "-c",
            "echo r=$PMI_RANK pmix=${PMIX_RANK:-none} port=${PMI_PORT:-none} dbg=$PMI_DEBUG",
        ],
        None,
        &env,
    );
    // kauri's own values, not the foreign ones (every job is offered PMIx too).
    assert_eq!(stdout_lines(&o), vec!["r=0 pmix=0 port=none dbg=0"]);
}

#[test]
fn wdir_and_configfile() {
    let dir = std::env::temp_dir().join(format!("kauri-wdir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("segments");
    std::fs::write(&cfg, "-n 2 pwd\n# a comment\n-n 1 echo last\n").unwrap();
    let o = kauri(
        &[
            "-wdir",
            dir.to_str().unwrap(),
            "-configfile",
            cfg.to_str().unwrap(),
        ],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let d = dir.display().to_string();
    assert_eq!(stdout_lines(&o), vec![d.clone(), d, "last".to_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Started in a directory that was deleted, kauri refuses with one line and starts nothing:
/// the ranks once ran in `/` instead, without a word, and wrote their files there.
#[test]
fn a_deleted_current_directory_is_refused() {
    let dir = std::env::temp_dir().join(format!("kauri-gone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = Command::new("sh")
        .arg("-c")
        .arg(r#"cd "$1" && rmdir "$1" && exec "$2" -n 1 sh -c 'echo ran in $(pwd)'"#)
        .args(["sh", dir.to_str().unwrap(), KAURI])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(255), "{err}");
    assert!(
        stdout_lines(&o).is_empty(),
        "a rank ran: {:?}",
        stdout_lines(&o)
    );
    assert!(
        err.contains("current directory") && err.contains("deleted"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A start that fails after some ranks were forked kills and reaps them first: here the second
/// segment's argument holds a NUL byte (read from a configfile), which only the fork of its
/// rank refuses. The first segment's ranks each start a helper that would outlive kauri if
/// the rank were left running. Repeated: before the fix, whether a rank escaped depended on
/// whether it had made its process group yet when it was signalled.
#[test]
fn a_start_that_fails_after_forking_leaves_nothing() {
    let dir = std::env::temp_dir().join(format!("kauri-halfstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // `sleep` under a name of our own, so its command line holds the marker.
    let helper = dir.join("sleep");
    let _ = std::fs::remove_file(&helper);
    std::os::unix::fs::symlink("/bin/sleep", &helper).unwrap();
    let rank = dir.join("rank.sh");
    std::fs::write(&rank, format!("{} 300 &\nwait\n", helper.display())).unwrap();
    let cfg = dir.join("segments");
    std::fs::write(
        &cfg,
        format!("-n 3 sh {}\n-n 1 true a\0b\n", rank.display()),
    )
    .unwrap();
    let marker = helper.display().to_string();
    let mut left = Vec::new();
    for _ in 0..8 {
        let start = Instant::now();
        let o = kauri(&["-configfile", cfg.to_str().unwrap()], None, &[]);
        assert!(start.elapsed() < Duration::from_secs(20), "{}", stderr(&o));
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains("cannot start rank 3 (true)"),
            "{}",
            stderr(&o)
        );
        std::thread::sleep(Duration::from_millis(300));
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&marker) {
                left.push(format!("{pid}: {cmd}"));
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn stdin_goes_to_rank_zero_only() {
    let data = vec![b'z'; 300_000];
    let o = kauri(
        &["-n", "3", "sh", "-c", "echo $PMI_RANK:$(wc -c)"],
        Some(&data),
        &[],
    );
    assert_eq!(stdout_lines(&o), vec!["0:300000", "1:0", "2:0"]);
}

#[test]
fn lines_of_different_ranks_never_interleave() {
    let o = kauri(&["-n", "4", "sh", "-c", "i=0; while [ $i -lt 300 ]; do echo rank$PMI_RANK-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-$i; i=$((i+1)); done"], None, &[]);
    let lines = stdout_lines(&o);
    assert_eq!(lines.len(), 1200);
    for l in &lines {
        assert!(
            l.starts_with("rank") && l.contains("-aaaaaaaa") && l.matches("rank").count() == 1,
            "{l:?}"
        );
    }
}

#[test]
fn usage_errors_are_one_line_and_start_nothing() {
    for (args, want) in [
        (vec!["-n", "0", "true"], "at least one process"),
        (vec!["-bogus", "true"], "unknown option -bogus"),
        (vec!["-n", "2"], "no program"),
        (
            vec!["-n", "2", "kauri-no-such-program-x"],
            "not found in PATH",
        ),
        (vec!["-hosts", "a:x", "true"], "bad slot count"),
    ] {
        let o = kauri(&args, None, &[]);
        assert_eq!(o.status.code(), Some(255), "{args:?}");
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
    }
    let o = kauri(&["--help"], None, &[]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("-genvlist"));
}

#[test]
fn failing_rank_ends_the_job_with_its_status_and_one_line() {
    let marker = "kauri-marker-failing-rank";
    let script = format!("if [ $PMI_RANK = 1 ]; then exit 3; fi; sleep 60 # {marker}");
    let o = kauri(
        &["-n", "3", "sh", "-c", &script],
        None,
        &[("KAURI_KILL_GRACE", "1")],
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("rank 1 (pid ") && e.contains("exited with code 3"),
        "{e}"
    );
    assert_eq!(
        e.matches("exited with code").count(),
        1,
        "only the cause is reported: {e}"
    );
    assert_no_leftovers(marker);
}

/// A parent that ignores `SIGCHLD` (some CI runners and wrappers do, and an ignored signal
/// stays ignored across `execve`) would have the kernel reap kauri's children before kauri
/// reads their statuses: kauri takes `SIGCHLD` back to its default, so the failing rank's
/// code is still the job's, on one host and through agents.
#[test]
fn an_ignored_sigchld_loses_no_rank_status() {
    use std::os::unix::process::CommandExt;
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"]] {
        let mut cmd = Command::new(KAURI);
        cmd.args(hosts)
            .args(["-n", "2", "sh", "-c", "exit 3"])
            .env("KAURI_KILL_GRACE", "1");
        // SAFETY: signal() is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
                Ok(())
            });
        }
        let o = run_under_watchdog(&mut cmd);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "{hosts:?}: {e}");
        assert!(e.contains("exited with code 3"), "{hosts:?}: {e}");
    }
}

#[test]
fn signalled_rank_reports_the_signal() {
    let o = kauri(
        &[
            "-n",
            "2",
            "sh",
            "-c",
            "if [ $PMI_RANK = 0 ]; then kill -SEGV $$; fi; sleep 60",
        ],
        None,
        &[],
    );
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    assert!(stderr(&o).contains("rank 0 (pid "), "{}", stderr(&o));
    assert!(stderr(&o).contains("killed by signal 11 (SIGSEGV)"));
}

#[test]
fn disable_auto_cleanup_keeps_the_others_running() {
    let o = kauri(
        &[
            "-disable-auto-cleanup",
            "-n",
            "2",
            "sh",
            "-c",
            "if [ $PMI_RANK = 1 ]; then exit 2; fi; sleep 1; echo survived",
        ],
        None,
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stdout_lines(&o), vec!["survived"]);
}

#[test]
fn timeout_kills_everything() {
    let marker = "kauri-marker-timeout";
    let o = kauri(
        &["-n", "2", "sh", "-c", &format!("sleep 300 # {marker}")],
        None,
        &[("MPIEXEC_TIMEOUT", "2")],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out"));
    assert_no_leftovers(marker);
}

#[test]
fn background_children_of_ranks_are_cleaned_up() {
    let marker = "kauri-marker-bg";
    let o = kauri(
        &[
            "-n",
            "2",
            "sh",
            "-c",
            &format!("(sleep 300 # {marker}\n) >/dev/null 2>&1 & echo started"),
        ],
        None,
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_no_leftovers(marker);
}

/// A daemon a rank starts with `setsid` leaves the rank's session and process group; kauri
/// (and each agent) is the subreaper of its ranks' descendants, so the daemon comes back to
/// it when its parent ends, and is killed and reaped with the job, on one host and on
/// agents. (It used to outlive the job; Hydra's too.)
#[test]
fn descendants_that_escape_with_setsid_are_ended_too() {
    let marker = "kauri-marker-setsid";
    let prog = format!(
        "setsid sh -c 'sleep 300; true {marker}' >/dev/null 2>&1 </dev/null & echo started"
    );
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"][..]] {
        let mut args = hosts.to_vec();
        args.extend(["-n", "2", "sh", "-c", &prog]);
        let o = kauri(&args, None, &[]);
        assert!(o.status.success(), "{hosts:?}: {}", stderr(&o));
        assert_eq!(stdout_lines(&o), vec!["started", "started"]);
        assert_no_leftovers(marker);
    }
}

/// Every rank leads a process group of its own in the session of the kauri (or agent) that
/// started it, as mpirun's ranks do. With the kernel's autogroup scheduling a session is a
/// scheduling group, and a rank that yields the CPU while it waits (Open MPI's
/// `mpi_yield_when_idle`, set when a host is oversubscribed) yields it only to its own
/// group's tasks: when each rank led a session of its own (as Hydra's do), NWChem on 4 ranks
/// of 2 cores took 41 s beside two busy loops, against 2.8 s under mpirun.
#[test]
fn ranks_share_the_session_of_the_process_that_started_them() {
    let prog = "echo $$ $(ps -o pgid= -p $$) $(ps -o sid= -p $$) $(ps -o sid= -p $PPID)";
    for hosts in [&[][..], &["-launcher", "fork", "-hosts", "a,b"][..]] {
        let mut args = hosts.to_vec();
        args.extend(["-n", "2", "sh", "-c", prog]);
        let o = kauri(&args, None, &[]);
        assert!(o.status.success(), "{hosts:?}: {}", stderr(&o));
        let lines = stdout_lines(&o);
        assert_eq!(lines.len(), 2, "{hosts:?}: {lines:?}");
        for l in &lines {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "{hosts:?}: {l}");
            assert_eq!(
                f[0], f[1],
                "{hosts:?}: a rank leads its own process group: {l}"
            );
            assert_eq!(
                f[2], f[3],
                "{hosts:?}: a rank is in its starter's session: {l}"
            );
        }
    }
}

#[test]
fn sigint_is_forwarded_and_ends_the_job() {
    let marker = "kauri-marker-sigint";
    let child = Command::new(KAURI)
        .args(["-n", "2", "sh", "-c", &format!("sleep 300 # {marker}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert_no_leftovers(marker);
}

#[test]
fn closed_stdout_ends_the_job() {
    let mut child = Command::new(KAURI)
        .args(["-n", "2", "yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 4096];
    use std::io::Read;
    let _ = out.read(&mut buf).unwrap();
    drop(out);
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert_eq!(st.code(), Some(141));
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "kauri kept running after its stdout closed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A rank that speaks raw PMI through its inherited socket with the shell.
fn raw_pmi(script: &str) -> Output {
    kauri(&["-n", "1", "bash", "-c", script], None, &[])
}

#[test]
fn unknown_command_gets_an_error_reply_naming_the_rank() {
    let o = raw_pmi("printf 'cmd=init pmi_version=1 pmi_subversion=1\\ncmd=frobnicate\\n' >&$PMI_FD; read -r a <&$PMI_FD; read -r b <&$PMI_FD; echo \"$b\"");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("cmd=frobnicate_result rc=-1"),
        "{:?}",
        o
    );
    assert!(
        stderr(&o).contains("rank 0 sent a bad PMI message: unknown command"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn over_long_values_are_refused_not_truncated() {
    let v = "x".repeat(1100);
    let o = raw_pmi(&format!(
        "printf 'cmd=put kvsname=k key=a value={v}\\n' >&$PMI_FD; read -r a <&$PMI_FD; echo \"$a\""
    ));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("cmd=put_result rc=-1") && out.contains("value_of_1100_bytes_exceeds_1024"),
        "{out}"
    );
}

#[test]
fn an_endless_line_closes_the_connection_and_the_job_goes_on() {
    let o = raw_pmi("head -c 20000 /dev/zero | tr '\\0' x >&$PMI_FD; if read -r a <&$PMI_FD; then echo got-reply; else echo eof; fi");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "eof");
    assert!(
        stderr(&o).contains("rank 0 sent a bad PMI message: message longer than"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_bad_pmi2_length_prefix_is_reported() {
    let o = raw_pmi("printf 'cmd=init pmi_version=2 pmi_subversion=0\\nabcdefcmd=x;' >&$PMI_FD; read -r a <&$PMI_FD; echo \"$a\"; if read -r b <&$PMI_FD; then echo more; else echo eof; fi");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0"),
        "{out}"
    );
    assert!(out.contains("eof"), "{out}");
    assert!(
        stderr(&o).contains("bad PMI-2 length prefix"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn exit_before_pmi_init_while_others_wait_fails_the_job() {
    let script = "if [ $PMI_RANK = 1 ]; then exit 0; fi; printf 'cmd=init pmi_version=1 pmi_subversion=1\\ncmd=barrier_in\\n' >&$PMI_FD; read -r a <&$PMI_FD; read -r b <&$PMI_FD; echo \"released: $b\"";
    let o = kauri(
        &["-n", "2", "bash", "-c", script],
        None,
        &[("KAURI_KILL_GRACE", "1")],
    );
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    // Which check fires first depends on whether rank 0 initialised before rank 1 ended:
    // "... while 1 rank(s) wait in a fence" (its host's engine) or "... while other ranks use
    // PMI" (the front end). Either way one line names rank 1 and says what it did.
    let e = stderr(&o);
    assert!(
        e.lines()
            .any(|l| l.starts_with("kauri: rank 1 ") && l.contains("exited before PMI init")),
        "{e}"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("released"));
}

#[test]
fn pmi_port_mode_serves_initack() {
    let script = "exec 3<>/dev/tcp/${PMI_PORT%:*}/${PMI_PORT##*:}; printf \"cmd=initack pmiid=$PMI_ID\\n\" >&3; for i in 1 2 3 4; do read -r l <&3; echo \"$l\"; done";
    let o = kauri(&["-pmi-port", "-n", "2", "bash", "-c", script], None, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = stdout_lines(&o);
    assert!(lines.contains(&"cmd=set rank=1".to_string()), "{lines:?}");
    assert_eq!(
        lines.iter().filter(|l| *l == "cmd=set size=2").count(),
        2,
        "{lines:?}"
    );
}

#[test]
fn a_slow_reader_of_kauri_output_loses_nothing() {
    // 400 KB of output, far more than a pipe holds, read only after the ranks are done.
    let child = Command::new(KAURI)
        .args([
            "-n",
            "2",
            "sh",
            "-c",
            "head -c 200000 /dev/zero | tr '\\0' x | fold -w 99; echo",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(7));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.bytes().filter(|&b| b == b'x').count(), 400_000);
    assert!(text.lines().all(|l| l.len() <= 99));
}

/// A pipe whose reading end is already closed: every write to the other end is an EPIPE.
fn closed_pipe() -> std::fs::File {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is ours and nothing else uses it.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is ours; the File owns it from here.
    unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) }
}

/// kauri's own messages on a closed stderr (or stdout) are dropped, not a panic (exit 101,
/// "failed printing to stderr"): the job ends with its own status. (The ranks write nothing
/// here: a rank's line on a closed stream ends the job with 141, see
/// `an_endless_writer_on_a_closed_stream_ends_the_job_with_141`.)
#[test]
fn closed_stderr_is_not_a_panic() {
    let st = Command::new(KAURI)
        .args(["-n", "2", "sh", "-c", "exit 3"])
        .stdout(Stdio::null())
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3), "the job's status, not a panic's 101");
    // Help, version and info on closed streams.
    for args in [&["-h"][..], &["--version"], &["-info"], &["--help-env"]] {
        let st = Command::new(KAURI)
            .args(args)
            .stdout(closed_pipe())
            .stderr(closed_pipe())
            .status()
            .unwrap();
        assert_eq!(st.code(), Some(0), "kauri {args:?}");
    }
    // A bad command line on a closed stderr: its usual status.
    let st = Command::new(KAURI)
        .args(["-frobnicate"])
        .stderr(closed_pipe())
        .status()
        .unwrap();
    assert_ne!(st.code(), Some(101), "a panic");
}

/// The form a user reported: `| head -1` on both streams together and on stderr alone. Rank 0
/// writes the one line `head` reads and waits, so that `head` has left when kauri writes its
/// own: those are dropped, and the job keeps its status. (A rank's line written after `head`
/// left would end the job with 141, as Hydra's SIGPIPE does.)
#[test]
fn head_on_both_streams_keeps_the_jobs_status() {
    for redirect in ["2>&1", "2>&1 >/dev/null"] {
        let line = format!(
            "'{KAURI}' -n 2 sh -c '[ $PMI_RANK = 1 ] || echo x >&2; sleep 1; exit 3' {redirect} \
             | head -1; \
             echo status=${{PIPESTATUS[0]}}"
        );
        let o = run_under_watchdog(Command::new("bash").args(["-c", &line]));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("status=3\n"),
            "{redirect}: {out}{}",
            stderr(&o)
        );
    }
}

/// A rank that writes without end to a stream whose reader has gone (`| head -1`) ends the
/// job at once with SIGPIPE's status, 141, whichever stream it is: stdout alone, stderr alone
/// (`2>&1 >/dev/null`), on one host and over two fork hosts. Before, a closed stderr was
/// ignored, and kauri read and dropped `yes`'s output for ever at about 90 % CPU. A run
/// still going after 120 s is killed (status 137), which is the failure; no time is measured.
#[test]
fn an_endless_writer_on_a_closed_stream_ends_the_job_with_141() {
    let marker = "endless-writer-marker";
    for hosts in [None, Some("a,b")] {
        for (prog, redirect) in [("yes", ""), ("yes >&2", "2>&1 >/dev/null")] {
            let prog = format!("{prog}; : {marker}");
            let launch = match hosts {
                None => String::new(),
                Some(h) => format!("-launcher fork -hosts {h}"),
            };
            let line = format!(
                "timeout -s KILL 120 '{KAURI}' {launch} -n 2 sh -c '{prog}' {redirect} \
                 | head -1 >/dev/null; echo status=${{PIPESTATUS[0]}}"
            );
            let o = run_under_watchdog(Command::new("bash").args(["-c", &line]));
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                out.contains("status=141\n"),
                "{hosts:?} {redirect:?}: {out}{}",
                stderr(&o)
            );
            assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
            assert_no_leftovers(marker);
        }
    }
}

/// SIGHUP and SIGINT to kauri are forwarded to the ranks and end the job with 128+N, and the
/// ranks the forwarded signal kills are not reported as failures (`rank R … killed by signal
/// 1 (SIGHUP)`), over fork hosts as on one host. Over agents it was a race, seen in about one
/// run in five with 8 ranks on 4 hosts: an agent could see its rank die of the signal before
/// the teardown that follows it, and the front end took that for a failure. Ten runs here.
#[test]
fn a_forwarded_signal_is_not_a_rank_failure() {
    use std::io::{BufRead, Read};
    let marker = "kauri-marker-forwarded";
    let prog = format!("echo up; sleep 300; : {marker}");
    for round in 0..10 {
        let sig = if round % 2 == 0 {
            libc::SIGHUP
        } else {
            libc::SIGINT
        };
        let mut args = vec!["-n", "8", "sh", "-c", &prog];
        if round < 8 {
            args.splice(0..0, ["-launcher", "fork", "-hosts", "a,b,c,d"]);
        }
        let mut child = Command::new(KAURI)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let (done, watch) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if watch.recv_timeout(Duration::from_secs(120)).is_err() {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        });
        // Every rank runs before the signal is sent.
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut up = 0;
        let mut line = String::new();
        while up < 8 && out.read_line(&mut line).unwrap_or(0) > 0 {
            up += usize::from(line.trim() == "up");
            line.clear();
        }
        assert_eq!(up, 8, "round {round}: the ranks started");
        // SAFETY: as above.
        unsafe { libc::kill(pid, sig) };
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let st = child.wait().unwrap();
        let _ = done.send(());
        watchdog.join().unwrap();
        assert_eq!(st.code(), Some(128 + sig), "round {round}: {err}");
        assert!(
            !err.contains("killed by signal"),
            "round {round} (signal {sig}): a forwarded signal reported as a failure: {err}"
        );
        assert_no_leftovers(marker);
    }
}

/// Session directories that Open MPI 5 singletons left in the temporary directory, for every
/// job id there is (an id keeps 16 bits of a hash of the singleton's pid, so a stale one
/// matches pids of later processes): they are no trace of this job's ranks, which do not
/// speak PMI here and are looked at for a singleton's trace. Before, a rank whose pid hashed
/// like a stale directory ended its job: `rank R on H runs alone as an Open MPI singleton`,
/// status 255 (seen in about one run in fifty with the 14 directories other tests had left).
#[test]
fn stale_open_mpi_session_directories_are_no_singletons() {
    let tmp = std::env::temp_dir().join(format!("kauri-stale-ompi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let mut host = [0u8; 256];
    // SAFETY: gethostname writes at most host.len() bytes into host.
    assert_eq!(
        unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) },
        0
    );
    let host = String::from_utf8_lossy(&host[..host.iter().position(|&b| b == 0).unwrap()]);
    // SAFETY: geteuid has no preconditions.
    let jf = tmp.join(format!("ompi.{host}.{}/jf.0", unsafe { libc::geteuid() }));
    std::fs::create_dir_all(&jf).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    for family in 0u32..65536 {
        let dir = jf.join((family << 16).to_string());
        std::fs::create_dir(&dir).unwrap();
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
    }
    let o = kauri(
        &["-n", "2", "sh", "-c", "sleep 2.5; echo done"],
        None,
        &[("TMPDIR", tmp.to_str().unwrap())],
    );
    std::fs::remove_dir_all(&tmp).unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout_lines(&o), ["done", "done"]);
}
