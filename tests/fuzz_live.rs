//! A bounded process-level fuzz run of the live server: jobs of 2-4 ranks,
//! on one host or over two fork hosts, whose ranks write mutated PMI-1 and PMI-2 scripts to a
//! real kauri through their `PMI_FD`, read whatever comes back for a moment, and exit with a
//! random status (now and then by a signal). About a third of the jobs are tame: every rank
//! enters the same fences and waits for them, few messages are damaged, and all finalize, so
//! the paths past a fence (gets that find keys, spawns that start) are reached too. Every job
//! must end on its own (well before its `MPIEXEC_TIMEOUT`), without a panic or a signal death
//! of kauri, and leave no process behind and no zombie child of the test. Crashes, hangs,
//! orphans and zombies are counted; all must be zero.
//!
//! The scripts come from a seeded xorshift, so a run can be replayed: the seed is printed, and
//! `KAURI_FUZZ_SEED=S` replays it (the chunking of each rank's writes comes from the same seed;
//! only the timing between the processes differs). `KAURI_FUZZ_JOBS=N` runs N jobs instead of
//! 20 (longer local runs), `KAURI_FUZZ_VERBOSE=1` prints each job's stderr, `KAURI_FUZZ_KEEP=1`
//! keeps the scripts. A rank is `python3` running a small program that sends its script.

mod common;

use common::{kauri, stderr};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A job that takes longer than this did not end on its own: its ranks are all gone within a
/// second or two, so only a hang (or `MPIEXEC_TIMEOUT`) keeps kauri running this long.
const HANG_SECS: u64 = 30;

/// Where a rank's script waits for a fence reply before going on.
const WAIT: &[u8] = b"\0KAURI-FUZZ-WAIT\0";

/// The most processes a (mutated) spawn may start: `KAURI_SPAWN_MAX` for every job.
const SPAWN_MAX: u32 = 4;

/// What each rank runs: reads its script and settings from `DIR/r<PMI_RANK>.{bin,cfg}`,
/// writes the script to `PMI_FD` in random chunks, reading whatever comes back between them
/// (never blocking for long); at each [`WAIT`] mark it waits (a second at most, and only
/// until one such wait fails) for the fence it entered to complete; then it lingers reading
/// for a moment, and exits as told.
const RANK_PY: &str = r#"
import os, sys, socket, random, time
d = sys.argv[1]
r = os.environ.get('PMI_RANK', '0')
try:
    seed, status, sig, stop, linger, close_first = (
        int(x) for x in open(os.path.join(d, 'r%s.cfg' % r)).read().split())
    data = open(os.path.join(d, 'r%s.bin' % r), 'rb').read()
except (OSError, ValueError):
    os._exit(0)
segs = data.split(b'\0KAURI-FUZZ-WAIT\0')
rx = bytearray()
rng = random.Random(seed)
s = None
try:
    s = socket.socket(fileno=int(os.environ['PMI_FD']))
except (KeyError, ValueError, OSError):
    s = None

def drain(secs):
    end = time.monotonic() + secs
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return True
            s.settimeout(left)
            b = s.recv(65536)
            if not b:
                return False
            rx.extend(b[:4096])
    except OSError:
        return True

def fences_out():
    return rx.count(b'barrier_out') + rx.count(b'kvs-fence-response')

if s is not None:
    budget = sum(len(g) for g in segs) if stop < 0 else stop
    waits = 0
    try:
        for g, seg in enumerate(segs):
            i = 0
            while i < len(seg) and budget > 0:
                k = rng.choice((1, 2, 7, 64, 512, 4096))
                k = min(rng.randint(1, k), budget, len(seg) - i)
                s.settimeout(2.0)
                s.sendall(seg[i:i + k])
                i += k
                budget -= k
                if rng.random() < 0.3 and not drain(0.002):
                    raise EOFError
                if rng.random() < 0.03:
                    time.sleep(0.01)
            if g + 1 < len(segs) and waits >= 0:
                # Wait (a second at most, once) for the fence just entered to complete.
                waits += 1
                end = time.monotonic() + 1.0
                while fences_out() < waits and time.monotonic() < end:
                    if not drain(0.02):
                        raise EOFError
                if fences_out() < waits:
                    waits = -1
    except (OSError, EOFError):
        pass
    if close_first:
        s.close()
        time.sleep(linger / 1000.0)
    else:
        drain(linger / 1000.0)
if sig:
    os.kill(os.getpid(), sig)
os._exit(status)
"#;

/// xorshift64*: small, seeded, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so that nearby seeds give unrelated streams (and 0 works).
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True `pct` times in 100.
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// What a rank's script generator needs to know.
struct Ctx<'a> {
    rank: usize,
    size: usize,
    python: &'a str,
    rank_py: &'a str,
    /// Where a spawned job's scripts are; `None` in a spawned job (no spawn of a spawn).
    spawn_dir: Option<&'a str>,
    /// A tame job: every rank enters the same fences, waits for them, finalizes and exits 0;
    /// few messages are damaged, and the requests exclude init, fences, abort and finalize.
    tame: Option<u64>,
}

fn key(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => "k".repeat(60 + rng.below(20) as usize),
        1 => "PMI_process_mapping".into(),
        2 => String::new(),
        3 => "PMI_x".into(),
        _ => rng
            .pick(&["a", "b", "bc-0", "bc-1", "k;x", "k v"])
            .to_string(),
    }
}

fn value(rng: &mut Rng) -> String {
    match rng.below(12) {
        0 => "v".repeat(1000 + rng.below(100) as usize),
        1 => "w".repeat(70_000),
        2 => String::new(),
        3 => "a=b;c d".into(),
        _ => format!("val{}", rng.below(100)),
    }
}

fn number(rng: &mut Rng) -> String {
    rng.pick(&[
        "0",
        "1",
        "2",
        "3",
        "-1",
        "255",
        "256",
        "-255",
        "2147483647",
        "2147483648",
        "-9223372036854775808",
        "99999999999999999999",
        "1e3",
        "",
        "x",
    ])
    .to_string()
}

fn service(rng: &mut Rng) -> String {
    rng.pick(&["svc", "svc2", "", "a b", "n;=x"]).to_string()
}

/// A spawn: usually of a program that does not exist, now and then of the rank program itself
/// (its scripts under `spawn_dir`), with counts that are sometimes nonsense.
fn spawn_parts(rng: &mut Rng, cx: &Ctx) -> (String, String, Vec<String>) {
    let nprocs = if rng.chance(70) {
        (1 + rng.below(2)).to_string()
    } else {
        number(rng)
    };
    match cx.spawn_dir {
        Some(dir) if rng.chance(40) => (
            nprocs,
            cx.python.to_string(),
            vec![
                "-I".into(),
                "-S".into(),
                cx.rank_py.to_string(),
                dir.to_string(),
            ],
        ),
        _ => (
            nprocs,
            rng.pick(&["/nonexistent/kauri-fuzz-prog", "", "a b", "./x"])
                .to_string(),
            vec!["arg".into(); rng.below(3) as usize],
        ),
    }
}

/// One PMI-1 request, valid or nearly so.
fn v1_request(rng: &mut Rng, cx: &Ctx) -> Vec<u8> {
    let kvs = rng.pick(&["kvs_0", "kauri.publish", "x"]).to_string();
    let pick = match cx.tame {
        Some(_) => *rng.pick(&[3, 4, 5, 6, 7, 11, 12, 13, 14, 15]),
        None => rng.below(22),
    };
    let s = match pick {
        0 => "cmd=init pmi_version=1 pmi_subversion=1\n".to_string(),
        1 => "cmd=init pmi_version=2 pmi_subversion=0\n".to_string(),
        2 => format!("cmd=init pmi_version={} pmi_subversion=0\n", number(rng)),
        3 => "cmd=get_maxes\n".into(),
        4 => rng
            .pick(&[
                "cmd=get_appnum\n",
                "cmd=get_my_kvsname\n",
                "cmd=get_universe_size\n",
            ])
            .to_string(),
        5 | 6 => format!(
            "cmd=put kvsname={kvs} key={} value={}\n",
            key(rng),
            value(rng)
        ),
        7 => format!("cmd=get kvsname={kvs} key={}\n", key(rng)),
        8..=10 => "cmd=barrier_in\n".into(),
        11 => format!("cmd=getbyidx kvsname={kvs} idx={}\n", number(rng)),
        12 => format!(
            "cmd=publish_name service={} port=p{}\n",
            service(rng),
            rng.below(9)
        ),
        13 => format!("cmd=unpublish_name service={}\n", service(rng)),
        14 => format!("cmd=lookup_name service={}\n", service(rng)),
        15 => {
            let (n, exe, args) = spawn_parts(rng, cx);
            let mut m = format!(
                "mcmd=spawn\nnprocs={n}\nexecname={exe}\ntotspawns=1\nspawnssofar=1\nargcnt={}\n",
                args.len()
            );
            for (i, a) in args.iter().enumerate() {
                m += &format!("arg{}={a}\n", i + 1);
            }
            m += "preput_num=1\npreput_key_0=PARENT_ROOT_PORT_NAME\npreput_val_0=tag#0$\n";
            m += "info_num=0\nendcmd\n";
            m
        }
        16 => {
            let code = number(rng);
            format!("cmd=abort exitcode={code} message=fuzz abort\n")
        }
        17 => "cmd=finalize\n".into(),
        18 => format!("cmd=initack pmiid={}\n", cx.rank),
        19 => format!("cmd=initack pmiid={}\n", number(rng)),
        20 => "cmd=barrier_in group=WORLD:1\n".into(),
        _ => rng
            .pick(&[
                "cmd=frobnicate x=1\n",
                "cmd=singinit pmi_version=1 pmi_subversion=1 stdio=yes authtype=none\n",
                "cmd=put key=k\n",
                "cmd=\n",
                "\n",
                "mcmd=spawn\nnprocs=1\nendcmd\n",
            ])
            .to_string(),
    };
    s.into_bytes()
}

/// One PMI-2 frame body, valid or nearly so.
fn v2_body(rng: &mut Rng, cx: &Ctx) -> String {
    let thrid = if rng.chance(30) {
        format!("thrid=t{};", rng.below(4))
    } else {
        String::new()
    };
    let pick = match cx.tame {
        Some(_) => *rng.pick(&[3, 4, 5, 6, 7, 11, 12, 13, 14, 15, 16, 17, 20]),
        None => rng.below(22),
    };
    let body = match pick {
        0 | 1 => format!("cmd=fullinit;pmirank={};threaded=FALSE;", cx.rank),
        2 => format!("cmd=fullinit;pmirank={};threaded=TRUE;", number(rng)),
        3 => "cmd=job-getid;".into(),
        4 | 5 => format!("cmd=kvs-put;key={};value={};", key(rng), value(rng)),
        6 => format!(
            "cmd=kvs-get;jobid={};srcid={};key={};",
            rng.pick(&["kvs_0", "x"]),
            rng.below(cx.size as u64 + 1),
            key(rng)
        ),
        7 => format!("cmd=kvs-get;key={};", key(rng)),
        8..=10 => "cmd=kvs-fence;".into(),
        11 => format!(
            "cmd=info-putnodeattr;key={};value={};",
            key(rng),
            value(rng)
        ),
        12 => format!(
            "cmd=info-getnodeattr;key={};wait={};",
            key(rng),
            rng.pick(&["TRUE", "FALSE", "maybe"])
        ),
        13 => format!(
            "cmd=info-getjobattr;key={};",
            rng.pick(&["PMI_process_mapping", "universeSize", "x"])
        ),
        14 => format!(
            "cmd=name-publish;name={};port=p{};infokeycount=0;",
            service(rng),
            rng.below(9)
        ),
        15 => format!("cmd=name-unpublish;name={};", service(rng)),
        16 => format!("cmd=name-lookup;name={};", service(rng)),
        17 => {
            let (n, exe, args) = spawn_parts(rng, cx);
            let mut m = format!(
                "cmd=spawn;ncmds=1;preputcount=1;ppkey0=PARENT_ROOT_PORT_NAME;ppval0=tag#0$;subcmd={exe};maxprocs={n};argc={};",
                args.len()
            );
            for (i, a) in args.iter().enumerate() {
                m += &format!("argv{i}={a};");
            }
            m += "infokeycount=0;";
            m
        }
        18 => format!(
            "cmd=abort;isworldabort=TRUE;msg=fuzz;{}",
            if rng.chance(50) {
                format!("exitcode={};", number(rng))
            } else {
                String::new()
            }
        ),
        19 => "cmd=finalize;".into(),
        20 => rng
            .pick(&["cmd=job-connect;jobid=x;", "cmd=job-disconnect;jobid=x;"])
            .to_string(),
        _ => rng
            .pick(&["cmd=frobnicate;", "cmd=kvs-put;key=a;", ";;;", "", "cmd"])
            .to_string(),
    };
    if let Some(rest) = body.strip_prefix("cmd=") {
        // thrid goes after cmd, as MPICH writes it.
        let (cmd, tail) = rest.split_once(';').unwrap_or((rest, ""));
        format!("cmd={cmd};{thrid}{tail}")
    } else {
        body
    }
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = format!("{:<6}", body.len()).into_bytes();
    f.extend_from_slice(body);
    f
}

/// Damages one message: truncation, bit flips, random bytes, NULs, a lost newline, a bogus
/// PMI-2 length prefix, or a copy of itself.
fn mutate(rng: &mut Rng, m: &mut Vec<u8>, v2: bool) {
    for _ in 0..1 + rng.below(3) {
        let len = m.len().max(1) as u64;
        match rng.below(9) {
            0 => m.truncate(rng.below(len) as usize),
            1 => {
                for _ in 0..1 + rng.below(4) {
                    if !m.is_empty() {
                        let i = rng.below(m.len() as u64) as usize;
                        m[i] ^= 1 << rng.below(8);
                    }
                }
            }
            2 => {
                let at = rng.below(m.len() as u64 + 1) as usize;
                let n = 1 + rng.below(16) as usize;
                let junk = rng.bytes(n);
                m.splice(at..at, junk);
            }
            3 => {
                let at = rng.below(m.len() as u64 + 1) as usize;
                m.insert(at, 0);
            }
            4 => {
                while m.last() == Some(&b'\n') || m.last() == Some(&b';') {
                    m.pop();
                }
            }
            5 if v2 && m.len() >= 6 => {
                let body = m.len() - 6;
                let prefix = match rng.below(8) {
                    0 => "999999".to_string(),
                    1 => "-1    ".into(),
                    2 => "abcdef".into(),
                    3 => "0     ".into(),
                    4 => format!("{:<6}", body.saturating_sub(1 + rng.below(5) as usize)),
                    5 => format!("{:<6}", body + 1 + rng.below(50) as usize),
                    6 => format!("{body:>6}"),
                    _ => " 1e3  ".into(),
                };
                m[..6].copy_from_slice(prefix.as_bytes());
            }
            6 => {
                let copy = m.clone();
                m.extend_from_slice(&copy);
            }
            7 => {
                let at = rng.below(m.len() as u64 + 1) as usize;
                let n = 1 + rng.below(8) as usize;
                let chars = rng.pick(b"\n;= \r");
                m.splice(at..at, std::iter::repeat_n(*chars, n));
            }
            _ => {
                // A digit run in a random place: numbers that overflow.
                let at = rng.below(m.len() as u64 + 1) as usize;
                m.splice(at..at, b"99999999999999999999".iter().copied());
            }
        }
    }
}

/// A rank's script: mostly an init and then requests in whichever protocol is current, some
/// of them damaged, now and then a burst of random bytes; in a tame job, an init, the job's
/// fences with requests between them, and a finalize.
fn script(rng: &mut Rng, cx: &Ctx) -> Vec<u8> {
    let mut out = Vec::new();
    let mut v2 = false;
    if let Some(fences) = cx.tame {
        if rng.chance(50) {
            out.extend_from_slice(b"cmd=init pmi_version=2 pmi_subversion=0\n");
            out.extend(frame(
                format!("cmd=fullinit;pmirank={};threaded=FALSE;", cx.rank).as_bytes(),
            ));
            v2 = true;
        } else {
            out.extend_from_slice(b"cmd=init pmi_version=1 pmi_subversion=1\n");
        }
        for f in 0..=fences {
            for _ in 0..rng.below(5) {
                let mut m = if v2 {
                    frame(v2_body(rng, cx).as_bytes())
                } else {
                    v1_request(rng, cx)
                };
                if rng.chance(3) {
                    mutate(rng, &mut m, v2);
                }
                out.extend(m);
            }
            if f < fences {
                out.extend(if v2 {
                    frame(b"cmd=kvs-fence;")
                } else {
                    b"cmd=barrier_in\n".to_vec()
                });
                out.extend(WAIT);
            }
        }
        out.extend(if v2 {
            frame(b"cmd=finalize;")
        } else {
            b"cmd=finalize\n".to_vec()
        });
        return out;
    }
    if rng.chance(85) {
        if rng.chance(45) {
            out.extend_from_slice(b"cmd=init pmi_version=2 pmi_subversion=0\n");
            out.extend(frame(
                format!("cmd=fullinit;pmirank={};threaded=FALSE;", cx.rank).as_bytes(),
            ));
            v2 = true;
        } else {
            out.extend_from_slice(b"cmd=init pmi_version=1 pmi_subversion=1\n");
        }
    }
    let damage = rng.below(40);
    for _ in 0..3 + rng.below(25) {
        if rng.chance(4) {
            let n = 1 + rng.below(64) as usize;
            out.extend(rng.bytes(n));
            continue;
        }
        let mut m = if v2 {
            frame(v2_body(rng, cx).as_bytes())
        } else {
            v1_request(rng, cx)
        };
        let switches = !v2 && m.starts_with(b"cmd=init pmi_version=2 ");
        let fence = m == b"cmd=barrier_in\n" || m.ends_with(b"cmd=kvs-fence;");
        if rng.chance(damage) {
            mutate(rng, &mut m, v2);
        } else if switches {
            v2 = true;
        } else if fence && rng.chance(50) {
            m.extend(WAIT);
        }
        out.extend(m);
    }
    out
}

/// A rank's settings, one line for `RANK_PY`: seed, exit status, signal, where to stop
/// writing (-1: all), how long to linger (ms), close the socket before lingering.
fn settings(rng: &mut Rng, tame: bool) -> String {
    if tame {
        return format!("{} 0 0 -1 {} 0\n", rng.next() >> 11, 50 + rng.below(150));
    }
    let status = if rng.chance(85) {
        0
    } else {
        1 + rng.below(255)
    };
    let sig = if rng.chance(4) {
        *rng.pick(&[libc::SIGKILL, libc::SIGTERM, libc::SIGUSR1])
    } else {
        0
    };
    let stop = if rng.chance(12) {
        rng.below(400) as i64
    } else {
        -1
    };
    let linger = 20 + rng.below(280);
    let close_first = rng.chance(10) as u8;
    format!(
        "{} {status} {sig} {stop} {linger} {close_first}\n",
        rng.next() >> 11
    )
}

fn write_rank_files(dir: &Path, rng: &mut Rng, cx: &Ctx) {
    let r = cx.rank;
    std::fs::write(dir.join(format!("r{r}.bin")), script(rng, cx)).unwrap();
    std::fs::write(
        dir.join(format!("r{r}.cfg")),
        settings(rng, cx.tame.is_some()),
    )
    .unwrap();
}

/// Processes whose command line or environment holds `marker`, other than this test.
fn leftovers(marker: &str) -> Vec<String> {
    let me = std::process::id();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let hit = |b: &[u8]| b.windows(marker.len()).any(|w| w == marker.as_bytes());
        if hit(&cmd) || hit(&env) {
            found.push(format!(
                "{pid}: {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    found
}

/// Children of this test that are zombies.
fn zombie_children() -> Vec<u32> {
    let me = std::process::id();
    let mut z = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let mut f = rest.split(' ');
        let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
        if state == Some("Z") && ppid == Some(me) {
            z.push(pid);
        }
    }
    z
}

fn python3() -> String {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("python3"))
                .find(|p| p.is_file())
        })
        .map(|p| p.to_string_lossy().into_owned())
        .expect("python3 on PATH")
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[derive(Default)]
struct Tally {
    crashes: Vec<String>,
    hangs: Vec<String>,
    orphans: Vec<String>,
    zombies: Vec<String>,
    statuses: std::collections::BTreeMap<i32, u32>,
    slowest: Duration,
}

#[test]
fn mutated_pmi_from_ranks_never_crashes_hangs_or_orphans() {
    let jobs = env_u64("KAURI_FUZZ_JOBS").unwrap_or(20);
    let seed = env_u64("KAURI_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            % 1_000_000_007
    });
    eprintln!("fuzz_live: {jobs} jobs, seed {seed} (replay: KAURI_FUZZ_SEED={seed})");
    let marker = format!("kauri-fuzz-live-{}-{seed}", std::process::id());
    let root: PathBuf = std::env::temp_dir().join(&marker);
    std::fs::create_dir_all(&root).unwrap();
    let rank_py = root.join("rank.py");
    std::fs::write(&rank_py, RANK_PY).unwrap();
    let rank_py = rank_py.to_string_lossy().into_owned();
    let python = python3();
    let verbose = std::env::var_os("KAURI_FUZZ_VERBOSE").is_some();
    let start = Instant::now();
    let mut t = Tally::default();
    for j in 0..jobs {
        let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(j));
        let size = 2 + rng.below(3) as usize;
        let fork_hosts = rng.chance(30);
        let tame = rng.chance(35).then(|| rng.below(4));
        let dir = root.join(format!("job{j}"));
        let spawn_dir = dir.join("spawned");
        std::fs::create_dir_all(&spawn_dir).unwrap();
        let spawn_dir_s = spawn_dir.to_string_lossy().into_owned();
        for rank in 0..size {
            let cx = Ctx {
                rank,
                size,
                python: &python,
                rank_py: &rank_py,
                spawn_dir: Some(&spawn_dir_s),
                tame,
            };
            write_rank_files(&dir, &mut rng, &cx);
        }
        for rank in 0..SPAWN_MAX as usize {
            let cx = Ctx {
                rank,
                size: 2,
                python: &python,
                rank_py: &rank_py,
                spawn_dir: None,
                tame: None,
            };
            write_rank_files(&spawn_dir, &mut rng, &cx);
        }
        let size_s = size.to_string();
        let dir_s = dir.to_string_lossy().into_owned();
        let mut args: Vec<&str> = Vec::new();
        if fork_hosts {
            args.extend(["-launcher", "fork", "-hosts", "a,b"]);
        }
        args.extend(["-n", &size_s, &python, "-I", "-S", &rank_py, &dir_s]);
        let spawn_max = SPAWN_MAX.to_string();
        let env = [
            ("MPIEXEC_TIMEOUT", "60"),
            ("KAURI_SPAWN_MAX", spawn_max.as_str()),
            ("KAURI_FUZZ_MARKER", marker.as_str()),
        ];
        let what = format!(
            "job {j} ({size} ranks{}{}; {dir_s})",
            if fork_hosts { ", 2 fork hosts" } else { "" },
            match tame {
                Some(f) => format!(", tame, {f} fences"),
                None => String::new(),
            }
        );
        let began = Instant::now();
        // The watchdog in `kauri` panics on a job that outlives KAURI_TEST_TIMEOUT: a hang.
        let run = std::panic::catch_unwind(|| kauri(&args, None, &env));
        let took = began.elapsed();
        t.slowest = t.slowest.max(took);
        let o = match run {
            Ok(o) => o,
            Err(_) => {
                t.hangs
                    .push(format!("{what}: killed by the test's watchdog"));
                continue;
            }
        };
        let err = stderr(&o);
        if verbose {
            eprintln!("{what}: {:?} in {took:?}\n{err}", o.status);
        }
        if err.contains("panicked") || err.contains("RUST_BACKTRACE") || o.status.signal().is_some()
        {
            t.crashes.push(format!("{what}: {:?}\n{err}", o.status));
        }
        if took > Duration::from_secs(HANG_SECS) || err.contains("timed out") {
            t.hangs.push(format!("{what}: took {took:?}\n{err}"));
        }
        *t.statuses.entry(o.status.code().unwrap_or(-1)).or_default() += 1;
        // Whatever kauri started is gone when it returns; allow the kernel a moment.
        let mut left = leftovers(&marker);
        for _ in 0..10 {
            if left.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            left = leftovers(&marker);
        }
        if !left.is_empty() {
            t.orphans.push(format!("{what}: {left:?}"));
        }
        let z = zombie_children();
        if !z.is_empty() {
            t.zombies.push(format!("{what}: zombie children {z:?}"));
        }
    }
    eprintln!(
        "fuzz_live: {jobs} jobs in {:.1} s (slowest {:.1} s), seed {seed}; exit statuses {:?}; \
         crashes {}, hangs {}, orphans {}, zombies {}",
        start.elapsed().as_secs_f64(),
        t.slowest.as_secs_f64(),
        t.statuses,
        t.crashes.len(),
        t.hangs.len(),
        t.orphans.len(),
        t.zombies.len()
    );
    let bad: Vec<&String> = t
        .crashes
        .iter()
        .chain(&t.hangs)
        .chain(&t.orphans)
        .chain(&t.zombies)
        .collect();
    if bad.is_empty() && std::env::var_os("KAURI_FUZZ_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }
    assert!(
        bad.is_empty(),
        "seed {seed}: crashes {}, hangs {}, orphans {}, zombies {} (scripts kept in {}):\n{}",
        t.crashes.len(),
        t.hangs.len(),
        t.orphans.len(),
        t.zombies.len(),
        root.display(),
        bad.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
}
