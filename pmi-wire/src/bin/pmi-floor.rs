//! `pmi-floor`: the least a PMI-1 or PMI-2 process manager can cost on one machine, for the
//! benchmarks to measure kauri and Hydra against.
//!
//! ```text
//! pmi-floor [--hosts H] -n N PROG [ARGS...]
//! ```
//!
//! `--hosts H` tells the ranks (`PMI_process_mapping`) that they are on H hosts, N/H
//! consecutive ranks each, as a launcher of H simulated hosts says: an MPI then wires them as
//! it would across hosts, and the floor stays the same job without the agents.
//!
//! It forks N ranks, each with one end of a socketpair as `PMI_FD` (and `PMI_RANK`,
//! `PMI_SIZE`), and serves PMI-1 (or PMI-2, after an `init` asking for version 2) on the other
//! ends from one thread: one `epoll` loop, one
//! `read` per readiness, every complete request of that read answered, the replies of one
//! readiness written with one `write`, a plain hash table for the key-value store, and a
//! barrier that answers everyone once the last rank enters. The ranks' output is not
//! forwarded (they inherit its stdout and stderr), nothing is checked beyond what the
//! protocol needs, and a rank that misbehaves is only dropped: it serves `pmi-load` and MPI
//! programs' wire-up, and nothing else (no spawn, no names, no node attributes). Its exit status is the
//! highest of the ranks' (128 + N for a signal).
//!
//! Hand-written parsing, no codec: the floor is what any implementation of the same
//! exchange must pay at least (the system calls, the context switches, the copies).

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::RawFd;

/// One rank's connection.
struct Conn {
    fd: RawFd,
    /// Bytes read and not yet parsed (a partial line).
    inbuf: Vec<u8>,
    /// Replies not yet written (the socket was full).
    outbuf: Vec<u8>,
    open: bool,
    /// Speaks PMI-2 (length-prefixed frames) since its `init` asked for version 2.
    v2: bool,
    /// Registered for `EPOLLOUT` too (while `outbuf` is not empty).
    watching_out: bool,
}

/// Registers for `EPOLLOUT` exactly while `c` has replies waiting.
fn watch(ep: RawFd, c: &mut Conn, r: usize) {
    let want = !c.outbuf.is_empty();
    if !c.open || want == c.watching_out {
        return;
    }
    let mut ev = libc::epoll_event {
        events: (libc::EPOLLIN | if want { libc::EPOLLOUT } else { 0 }) as u32,
        u64: r as u64,
    };
    // SAFETY: modifies the registration of a descriptor this process owns.
    unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_MOD, c.fd, &mut ev) };
    c.watching_out = want;
}

struct Server {
    size: usize,
    /// `PMI_process_mapping`'s value.
    mapping: String,
    conns: Vec<Conn>,
    kvs: HashMap<String, String>,
    /// Ranks in the current barrier.
    in_barrier: Vec<usize>,
    /// Connections still open.
    live: usize,
    /// Connections a barrier wrote to whose replies did not all fit.
    blocked: Vec<usize>,
}

/// Appends one PMI-2 frame: the body's length in six characters, then the body.
fn frame(out: &mut Vec<u8>, body: &str) {
    out.extend_from_slice(format!("{:<6}", body.len()).as_bytes());
    out.extend_from_slice(body.as_bytes());
}

fn die(what: &str) -> ! {
    eprintln!("pmi-floor: {what}: {}", std::io::Error::last_os_error());
    std::process::exit(255)
}

/// The value of `key=` in a PMI-1 line (tokens separated by spaces).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|t| t.strip_prefix(key)?.strip_prefix('='))
}

impl Server {
    /// Answers one request line of rank `r` into its output buffer.
    fn request(&mut self, r: usize, line: &str) {
        let cmd = field(line, "cmd").unwrap_or("");
        let out = &mut self.conns[r].outbuf;
        match cmd {
            "init" if field(line, "pmi_version") == Some("2") => {
                out.extend_from_slice(
                    b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n",
                );
                self.conns[r].v2 = true;
            }
            "init" => {
                out.extend_from_slice(b"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n")
            }
            "get_maxes" => out.extend_from_slice(
                b"cmd=maxes rc=0 kvsname_max=256 keylen_max=256 vallen_max=1024\n",
            ),
            "get_appnum" => out.extend_from_slice(b"cmd=appnum rc=0 appnum=0\n"),
            "get_my_kvsname" => out.extend_from_slice(b"cmd=my_kvsname rc=0 kvsname=floor\n"),
            "get_universe_size" => out.extend_from_slice(
                format!("cmd=universe_size rc=0 size={}\n", self.size).as_bytes(),
            ),
            "put" => {
                if let (Some(k), Some(v)) = (field(line, "key"), field(line, "value")) {
                    self.kvs.insert(k.to_string(), v.to_string());
                }
                out.extend_from_slice(b"cmd=put_result rc=0\n");
            }
            "get" => {
                let key = field(line, "key").unwrap_or("");
                let v = if key == "PMI_process_mapping" {
                    Some(self.mapping.as_str())
                } else {
                    self.kvs.get(key).map(String::as_str)
                };
                match v {
                    Some(v) => {
                        out.extend_from_slice(b"cmd=get_result rc=0 value=");
                        out.extend_from_slice(v.as_bytes());
                        out.push(b'\n');
                    }
                    None => out.extend_from_slice(b"cmd=get_result rc=-1 msg=key_not_found\n"),
                }
            }
            "barrier_in" => self.barrier(r),
            "finalize" => out.extend_from_slice(b"cmd=finalize_ack\n"),
            _ => {}
        }
    }

    /// Rank `r` entered the barrier (PMI-1 `barrier_in`, PMI-2 `kvs-fence`); the last one in
    /// answers everyone.
    fn barrier(&mut self, r: usize) {
        self.in_barrier.push(r);
        if self.in_barrier.len() == self.live {
            for q in std::mem::take(&mut self.in_barrier) {
                if self.conns[q].v2 {
                    frame(&mut self.conns[q].outbuf, "cmd=kvs-fence-response;rc=0;");
                } else {
                    self.conns[q].outbuf.extend_from_slice(b"cmd=barrier_out\n");
                }
                if q != r {
                    self.flush(q);
                    if !self.conns[q].outbuf.is_empty() {
                        self.blocked.push(q);
                    }
                }
            }
        }
    }

    /// Answers one PMI-2 frame body of rank `r` (`cmd=NAME;key=value;...`).
    fn request_v2(&mut self, r: usize, body: &str) {
        let get = |key: &str| {
            body.split(';')
                .find_map(|t| t.strip_prefix(key)?.strip_prefix('='))
        };
        let mut reply = String::new();
        match get("cmd").unwrap_or("") {
            "fullinit" => {
                let rank = get("pmirank").unwrap_or("-1");
                reply = format!(
                    "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};\
                     size={};appnum=0;debugged=FALSE;pmiverbose=FALSE;",
                    self.size
                );
            }
            "job-getid" => reply.push_str("cmd=job-getid-response;rc=0;jobid=floor;"),
            "info-getjobattr" => {
                reply = match get("key") {
                    Some("PMI_process_mapping") => format!(
                        "cmd=info-getjobattr-response;rc=0;found=TRUE;value={};",
                        self.mapping
                    ),
                    Some("universeSize") => format!(
                        "cmd=info-getjobattr-response;rc=0;found=TRUE;value={};",
                        self.size
                    ),
                    _ => "cmd=info-getjobattr-response;rc=0;found=FALSE;".into(),
                }
            }
            "kvs-put" => {
                if let (Some(k), Some(v)) = (get("key"), get("value")) {
                    self.kvs.insert(k.to_string(), v.to_string());
                }
                reply.push_str("cmd=kvs-put-response;rc=0;");
            }
            "kvs-get" => {
                reply = match get("key").and_then(|k| self.kvs.get(k)) {
                    Some(v) => format!("cmd=kvs-get-response;rc=0;found=TRUE;value={v};"),
                    None => "cmd=kvs-get-response;rc=0;found=FALSE;".into(),
                }
            }
            "kvs-fence" => return self.barrier(r),
            "finalize" => reply.push_str("cmd=finalize-response;rc=0;"),
            _ => return,
        }
        frame(&mut self.conns[r].outbuf, &reply);
    }

    /// Writes what rank `r` has queued, as far as its socket takes it.
    fn flush(&mut self, r: usize) {
        let c = &mut self.conns[r];
        while !c.outbuf.is_empty() {
            // SAFETY: writes from a live buffer to a descriptor this process owns.
            let n = unsafe { libc::write(c.fd, c.outbuf.as_ptr().cast(), c.outbuf.len()) };
            if n <= 0 {
                return; // full (EAGAIN: EPOLLOUT will say when) or gone (the read sees it)
            }
            c.outbuf.drain(..n as usize);
        }
    }

    /// Rank `r`'s socket is readable: one read, every complete line answered, one write.
    fn readable(&mut self, r: usize) {
        let mut buf = [0u8; 65536];
        let fd = self.conns[r].fd;
        // SAFETY: reads into a local buffer of the given size.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0
            || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
        {
            self.close(r);
            return;
        }
        if n < 0 {
            return;
        }
        let mut pending = std::mem::take(&mut self.conns[r].inbuf);
        pending.extend_from_slice(&buf[..n as usize]);
        let mut start = 0;
        loop {
            if self.conns[r].v2 {
                // A frame: six characters of length (space-padded), then the body.
                let Some(len) = pending
                    .get(start..start + 6)
                    .and_then(|l| std::str::from_utf8(l).ok())
                    .and_then(|l| l.trim().parse::<usize>().ok())
                else {
                    break;
                };
                if pending.len() < start + 6 + len {
                    break;
                }
                let body =
                    String::from_utf8_lossy(&pending[start + 6..start + 6 + len]).into_owned();
                start += 6 + len;
                self.request_v2(r, &body);
            } else {
                let Some(nl) = pending[start..].iter().position(|&b| b == b'\n') else {
                    break;
                };
                let line = String::from_utf8_lossy(&pending[start..start + nl]).into_owned();
                start += nl + 1;
                self.request(r, line.trim_end());
            }
        }
        pending.drain(..start);
        self.conns[r].inbuf = pending;
        self.flush(r);
    }

    fn close(&mut self, r: usize) {
        let c = &mut self.conns[r];
        if c.open {
            c.open = false;
            // SAFETY: closes a descriptor this process owns, once.
            unsafe { libc::close(c.fd) };
            self.live -= 1;
            self.in_barrier.retain(|&q| q != r);
        }
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut hosts = 1;
    if args.first().map(String::as_str) == Some("--hosts") {
        hosts = match args.get(1).and_then(|h| h.parse::<usize>().ok()) {
            Some(h) if h > 0 => h,
            _ => {
                eprintln!("pmi-floor: --hosts needs a positive number");
                std::process::exit(255)
            }
        };
        args.drain(..2);
    }
    let (n, prog) = match args.as_slice() {
        [flag, n, prog @ ..] if flag == "-n" && !prog.is_empty() => match n.parse::<usize>() {
            Ok(n) if n > 0 => (n, prog.to_vec()),
            _ => {
                eprintln!("pmi-floor: -n needs a positive number");
                std::process::exit(255)
            }
        },
        _ => {
            eprintln!("usage: pmi-floor [--hosts H] -n N PROG [ARGS...]");
            std::process::exit(255)
        }
    };
    if n % hosts != 0 {
        eprintln!("pmi-floor: -n {n} is not a multiple of --hosts {hosts}");
        std::process::exit(255)
    }
    let argv: Vec<CString> = prog
        .iter()
        .map(|a| CString::new(a.as_str()).unwrap_or_default())
        .collect();
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    // SAFETY: epoll_create1 has no memory arguments.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        die("epoll_create1");
    }
    let mut server = Server {
        size: n,
        mapping: format!("(vector,(0,{hosts},{}))", n / hosts),
        conns: Vec::with_capacity(n),
        kvs: HashMap::new(),
        in_barrier: Vec::new(),
        live: n,
        blocked: Vec::new(),
    };
    let mut pids = Vec::with_capacity(n);
    for r in 0..n {
        let mut sv = [0; 2];
        // SAFETY: socketpair writes two descriptors into the array.
        if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) } != 0 {
            die("socketpair");
        }
        let env: Vec<CString> = std::env::vars()
            .filter(|(k, _)| !k.starts_with("PMI_"))
            .chain([
                ("PMI_FD".to_string(), sv[1].to_string()),
                ("PMI_RANK".to_string(), r.to_string()),
                ("PMI_SIZE".to_string(), n.to_string()),
            ])
            .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
            .collect();
        let mut env_p: Vec<*const libc::c_char> = env.iter().map(|c| c.as_ptr()).collect();
        env_p.push(std::ptr::null());
        // SAFETY: the child only closes a descriptor and execs with memory prepared before
        // the fork; it ends in execvpe or _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            die("fork");
        }
        if pid == 0 {
            // SAFETY: see above.
            unsafe {
                libc::close(sv[0]);
                libc::execvpe(argv_p[0], argv_p.as_ptr(), env_p.as_ptr());
                libc::_exit(127);
            }
        }
        pids.push(pid);
        // SAFETY: the parent's copy of the child's end, and flags on its own end.
        unsafe {
            libc::close(sv[1]);
            libc::fcntl(sv[0], libc::F_SETFL, libc::O_NONBLOCK);
            libc::fcntl(sv[0], libc::F_SETFD, libc::FD_CLOEXEC);
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: r as u64,
        };
        // SAFETY: registers a descriptor this process owns.
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, sv[0], &mut ev) } != 0 {
            die("epoll_ctl");
        }
        server.conns.push(Conn {
            fd: sv[0],
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            open: true,
            v2: false,
            watching_out: false,
        });
    }
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    while server.live > 0 {
        // SAFETY: epoll_wait writes at most events.len() entries into the vector.
        let k = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, -1) };
        if k < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            die("epoll_wait");
        }
        for e in &events[..k as usize] {
            let r = e.u64 as usize;
            if !server.conns[r].open {
                continue;
            }
            if e.events & libc::EPOLLOUT as u32 != 0 {
                server.flush(r);
            }
            if e.events & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
                server.readable(r);
            }
            // Ask for writability only while replies wait (rare: the rank is not reading).
            for q in std::mem::take(&mut server.blocked) {
                watch(ep, &mut server.conns[q], q);
            }
            if server.conns[r].open {
                watch(ep, &mut server.conns[r], r);
            }
        }
    }
    let mut worst = 0;
    for pid in pids {
        let mut status = 0;
        // SAFETY: waits for a child of this process.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        worst = worst.max(code);
    }
    std::process::exit(worst)
}
