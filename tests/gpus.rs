//! Per-rank GPUs (`-gpus-per-proc`, `-gpu-bind`) on fake `/sys` trees (`KAURI_SYSFS_ROOT`):
//! two sockets of one CPU each (CPU 0 and CPU 1, so that the binding really happens on a
//! two-CPU machine) with four GPUs next to each, of each vendor; a host whose GPUs are all on
//! one socket; a host without GPUs. Each rank prints the variables its vendor's runtime reads
//! and the CPUs it may run on (`/proc/self/status`), as a user would check them.

mod common;

use kauri::host::bind::{allowed_cpus, parse_cpu_list};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A GPU maker, as a fake tree shows it.
#[derive(Clone, Copy, Debug)]
enum Maker {
    Nvidia,
    Amd,
    Intel,
}

impl Maker {
    /// The variable its runtime reads.
    fn var(self) -> &'static str {
        match self {
            Maker::Nvidia => "CUDA_VISIBLE_DEVICES",
            Maker::Amd => "ROCR_VISIBLE_DEVICES",
            Maker::Intel => "ZE_AFFINITY_MASK",
        }
    }
}

fn put(p: &Path, s: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, format!("{s}\n")).unwrap();
}

/// A fresh directory for one test's fake hosts.
fn fresh(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kauri-gpus-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A fake host at `root`: CPU 0 is socket 0 and NUMA node 0, CPU 1 socket 1 and node 1; and
/// `sockets[i]` GPUs of `maker` next to socket `i`, in PCI order.
fn host(root: &Path, maker: Maker, sockets: [usize; 2]) {
    let sys = root.join("sys");
    put(&sys.join("devices/system/cpu/online"), "0-1");
    for c in 0..2 {
        let cpu = sys.join(format!("devices/system/cpu/cpu{c}/topology"));
        put(&cpu.join("physical_package_id"), &c.to_string());
        put(&cpu.join("core_id"), "0");
        put(
            &sys.join(format!("devices/system/node/node{c}/cpulist")),
            &c.to_string(),
        );
    }
    let places = (0..2).flat_map(|s| std::iter::repeat_n(s, sockets[s]));
    for (i, socket) in places.enumerate() {
        let pci = format!("0000:{:02x}:00.0", 0x10 + 0x10 * i);
        let dev = sys.join("bus/pci/devices").join(&pci);
        let vendor = match maker {
            Maker::Nvidia => "0x10de",
            Maker::Amd => "0x1002",
            Maker::Intel => "0x8086",
        };
        put(&dev.join("vendor"), vendor);
        put(&dev.join("class"), "0x030200");
        put(&dev.join("numa_node"), &socket.to_string());
        put(&dev.join("local_cpulist"), &socket.to_string());
        match maker {
            Maker::Nvidia => {}
            Maker::Amd => {
                let node = sys.join(format!("class/kfd/kfd/topology/nodes/{}", i + 2));
                put(&node.join("gpu_id"), &(4000 + i).to_string());
                let location = (0x10 + 0x10 * i) << 8;
                put(
                    &node.join("properties"),
                    &format!("location_id {location}\ndomain 0"),
                );
            }
            Maker::Intel => {
                let drivers = sys.join("bus/pci/drivers/xe");
                std::fs::create_dir_all(&drivers).unwrap();
                let card = sys.join(format!("class/drm/card{i}"));
                std::fs::create_dir_all(&card).unwrap();
                std::os::unix::fs::symlink(&dev, card.join("device")).unwrap();
                std::os::unix::fs::symlink(&drivers, dev.join("driver")).unwrap();
            }
        }
    }
    if let Maker::Amd = maker {
        // The CPU nodes, which are no GPUs.
        for n in 0..2 {
            put(
                &sys.join(format!("class/kfd/kfd/topology/nodes/{n}/gpu_id")),
                "0",
            );
        }
    }
}

/// One rank's view: its GPU variable's value and its CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    host: String,
    gpus: Option<String>,
    cpus: Vec<usize>,
    env: String,
}

/// Runs `kauri ARGS -n N` with the fake hosts below `root` (`%h`: each host's name); each
/// rank's view by rank, and kauri's stderr. `var`: the variable to read; `more`: another
/// one printed whole.
fn run(
    root: &str,
    args: &[&str],
    var: &str,
    more: &str,
    env: &[(&str, &str)],
) -> (Vec<Seen>, String) {
    let more = if more.is_empty() {
        String::new()
    } else {
        format!(" ${more}")
    };
    let body = format!(
        "echo \"$KAURI_RANK $KAURI_HOST ${{{var}-unset}} \
         $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status){more}\""
    );
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["sh", "-c", &body]);
    let mut e = vec![("KAURI_SYSFS_ROOT", root)];
    e.extend(env);
    let out = common::kauri(&a, None, &e);
    let err = common::stderr(&out);
    assert!(out.status.success(), "kauri {args:?} failed: {err}");
    let mut by_rank = BTreeMap::new();
    for l in common::lines(&out) {
        let w: Vec<&str> = l.split(' ').collect();
        let seen = Seen {
            host: w[1].to_string(),
            gpus: (w[2] != "unset").then(|| w[2].to_string()),
            cpus: parse_cpu_list(w[3]).expect("a CPU list"),
            env: w.get(4).unwrap_or(&"").to_string(),
        };
        by_rank.insert(w[0].parse::<usize>().unwrap(), seen);
    }
    (by_rank.into_values().collect(), err)
}

/// `kauri` arguments for ranks on simulated `hosts` (`-launcher fork`), then `more`.
fn fork<'a>(hosts: &'a str, n: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["-hosts", hosts, "-launcher", "fork", "-n", n];
    a.extend(more);
    a
}

/// The machine lets the test bind to CPUs 0 and 1 (the fake hosts' CPUs); else it says why
/// it skips.
fn can_bind() -> bool {
    let mine = allowed_cpus();
    let ok = mine.contains(&0) && mine.contains(&1);
    if !ok {
        eprintln!("skipped: the test may run on CPUs {mine:?}, not on both 0 and 1");
    }
    ok
}

/// The socket of GPU `g` on a host with `sockets` GPUs on each socket.
fn socket_of(g: usize, sockets: [usize; 2]) -> usize {
    usize::from(g >= sockets[0])
}

/// Each rank got one GPU of its own on its host, on the socket of the CPU it is bound to.
fn one_gpu_each_on_its_socket(seen: &[Seen], sockets: &BTreeMap<String, [usize; 2]>) {
    let mut taken = BTreeSet::new();
    for (r, s) in seen.iter().enumerate() {
        let g: usize = s
            .gpus
            .as_deref()
            .and_then(|g| g.parse().ok())
            .unwrap_or_else(|| panic!("rank {r} has one GPU: {seen:?}"));
        assert!(
            taken.insert((s.host.clone(), g)),
            "rank {r}'s GPU is shared: {seen:?}"
        );
        assert_eq!(s.cpus.len(), 1, "rank {r} is bound to one core: {seen:?}");
        let near = s.cpus[0];
        let layout = sockets[&s.host];
        if layout[near] > 0 {
            assert_eq!(
                socket_of(g, layout),
                near,
                "rank {r}'s GPU is on its socket: {seen:?}"
            );
        }
    }
}

#[test]
fn one_gpu_per_rank_on_its_own_socket_for_every_vendor() {
    if !can_bind() {
        return;
    }
    for maker in [Maker::Nvidia, Maker::Amd, Maker::Intel] {
        let d = fresh(&format!("{maker:?}"));
        host(&d.join("vm"), maker, [4, 4]);
        let root = d.join("%h").display().to_string();
        let args = [
            "-gpus-per-proc",
            "1",
            "-gpu-bind",
            "closest",
            "-bind-to",
            "core",
        ];
        // One host (this machine's name is not known to the test: the host list names it).
        let one = fork("vm:8", "8", &args);
        let (seen, err) = run(&root, &one, maker.var(), "KAURI_LOCAL_RANK", &[]);
        let layout = BTreeMap::from([("vm".to_string(), [4, 4])]);
        assert_eq!(seen.len(), 8, "{maker:?}: {err}");
        one_gpu_each_on_its_socket(&seen, &layout);
        if let Maker::Nvidia = maker {
            let (order, _) = run(&root, &one, "CUDA_DEVICE_ORDER", "", &[]);
            assert!(order
                .iter()
                .all(|s| s.gpus.as_deref() == Some("PCI_BUS_ID")));
        }
        // Two simulated hosts, the second with its GPUs on socket 0 only.
        host(&d.join("b"), maker, [4, 0]);
        let two = fork("vm:4,b:4", "8", &args);
        let (seen, err) = run(&root, &two, maker.var(), "", &[]);
        assert_eq!(seen.len(), 8, "{maker:?}: {err}");
        let layout = BTreeMap::from([("vm".to_string(), [4, 4]), ("b".to_string(), [4, 0])]);
        one_gpu_each_on_its_socket(&seen, &layout);
        assert_eq!(seen.iter().filter(|s| s.host == "b").count(), 4);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn unbound_ranks_are_bound_next_to_their_gpus() {
    if !can_bind() {
        return;
    }
    let d = fresh("unbound");
    host(&d.join("vm"), Maker::Nvidia, [4, 4]);
    let root = d.join("%h").display().to_string();
    let args = fork("vm:8", "8", &["-gpus-per-proc", "1"]);
    let (seen, err) = run(&root, &args, "CUDA_VISIBLE_DEVICES", "", &[]);
    for (r, s) in seen.iter().enumerate() {
        // In turn, each next to its own.
        assert_eq!(s.gpus.as_deref(), Some(r.to_string().as_str()), "{err}");
        assert_eq!(s.cpus, [r / 4], "rank {r}: {seen:?}");
    }
    // `none`: in turn, and not bound.
    let none = fork("vm:2", "2", &["-gpu-bind", "none"]);
    let (seen, err) = run(&root, &none, "CUDA_VISIBLE_DEVICES", "", &[]);
    assert_eq!(
        seen[0].gpus.as_deref(),
        Some("0,1,2,3"),
        "auto: 8 GPUs, 2 ranks: {err}"
    );
    assert_eq!(seen[1].gpus.as_deref(), Some("4,5,6,7"));
    assert!(seen.iter().all(|s| s.cpus == allowed_cpus()), "{seen:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn maps_auto_and_the_ml_environment() {
    let d = fresh("maps");
    host(&d.join("vm"), Maker::Amd, [4, 4]);
    let root = d.join("%h").display().to_string();
    let map = fork("vm:8", "3", &["-gpu-bind", "map_gpu:6,2"]);
    let (seen, _) = run(&root, &map, "ROCR_VISIBLE_DEVICES", "", &[]);
    let got: Vec<_> = seen.iter().map(|s| s.gpus.clone().unwrap()).collect();
    assert_eq!(got, ["6", "2", "6"], "local rank L gets map[L mod 2]");
    let two = fork(
        "vm:8",
        "2",
        &["-gpus-per-proc", "2", "-gpu-bind", "map:7,6,5,4"],
    );
    let (seen, _) = run(&root, &two, "ROCR_VISIBLE_DEVICES", "", &[]);
    let got: Vec<_> = seen.iter().map(|s| s.gpus.clone().unwrap()).collect();
    assert_eq!(got, ["7,6", "5,4"]);
    // -ml-env: every GPU visible, the rank's own at LOCAL_RANK.
    let ml_args = ["-ml-env", "-gpus-per-proc", "1", "-gpu-bind", "map:5,1,6,2"];
    let ml = fork("vm:8", "4", &ml_args);
    let (seen, err) = run(&root, &ml, "ROCR_VISIBLE_DEVICES", "LOCAL_RANK", &[]);
    for (want, s) in [5, 1, 6, 2].iter().zip(&seen) {
        let list: Vec<usize> = s
            .gpus
            .as_deref()
            .unwrap()
            .split(',')
            .map(|g| g.parse().unwrap())
            .collect();
        let local: usize = s.env.parse().unwrap();
        assert_eq!(list.len(), 8, "{err}");
        assert_eq!(list[local], *want, "its own at LOCAL_RANK: {seen:?}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_users_own_variable_wins() {
    let d = fresh("user");
    host(&d.join("vm"), Maker::Nvidia, [4, 4]);
    let root = d.join("%h").display().to_string();
    let args = fork("vm:2", "2", &["-gpus-per-proc", "1", "-report-bindings"]);
    let (seen, err) = run(
        &root,
        &args,
        "CUDA_VISIBLE_DEVICES",
        "",
        &[("CUDA_VISIBLE_DEVICES", "3")],
    );
    assert!(
        seen.iter().all(|s| s.gpus.as_deref() == Some("3")),
        "{seen:?}"
    );
    assert!(
        seen.iter().all(|s| s.cpus == allowed_cpus()),
        "not bound near GPUs it did not get: {seen:?}"
    );
    assert!(
        err.contains("kauri: rank 0 on vm: not bound; GPUs as its CUDA_VISIBLE_DEVICES says"),
        "{err}"
    );
    let genv = fork(
        "vm:1",
        "1",
        &["-gpus-per-proc", "1", "-genv", "CUDA_VISIBLE_DEVICES", "7"],
    );
    let (seen, _) = run(&root, &genv, "CUDA_VISIBLE_DEVICES", "", &[]);
    assert_eq!(seen[0].gpus.as_deref(), Some("7"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_bad_cases_each_say_one_line() {
    let d = fresh("bad");
    host(&d.join("vm"), Maker::Nvidia, [4, 4]);
    // A host with CPUs and no GPU.
    host(&d.join("b"), Maker::Nvidia, [0, 0]);
    let root = d.join("%h").display().to_string();
    let fails = |args: &[&str], line: &str| {
        let out = common::kauri(args, None, &[("KAURI_SYSFS_ROOT", &root)]);
        let err = common::stderr(&out);
        assert!(!out.status.success(), "kauri {args:?} succeeded: {err}");
        assert!(err.contains(line), "kauri {args:?} says {line:?}: {err}");
    };
    fails(
        &fork("vm:1,b:1", "2", &["-gpus-per-proc", "1", "true"]),
        "kauri: -gpus-per-proc: b has no GPU (none under /proc/driver/nvidia, /sys/class/kfd or /sys/class/drm)",
    );
    fails(
        &fork("vm:1", "1", &["-gpu-bind", "map:8", "true"]),
        "kauri: -gpu-bind map: vm has no nvidia GPU 8 (it has 8)",
    );
    fails(
        &["-gpus-per-proc", "none", "-n", "1", "true"],
        "-gpus-per-proc: \"none\" is neither a count nor auto",
    );
    fails(
        &["-gpu-bind", "nearest", "-n", "1", "true"],
        "-gpu-bind: \"nearest\" is none of closest, none, map:I,J,...",
    );
    // 0, as Hydra's: every GPU hidden, on a host with or without GPUs.
    let zero = fork(
        "vm:1,b:1",
        "2",
        &["-gpus-per-proc", "0", "-report-bindings"],
    );
    let (seen, err) = run(
        &root,
        &zero,
        "CUDA_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        &[],
    );
    assert!(
        seen.iter()
            .all(|s| s.gpus.as_deref() == Some("-1") && s.env == "-1"),
        "{seen:?}"
    );
    assert!(
        err.contains("kauri: rank 1 on b: not bound; no GPU"),
        "{err}"
    );
    // More ranks than GPUs: shared in turn, said once.
    let args = fork("vm:10", "10", &["-gpus-per-proc", "1"]);
    let (seen, err) = run(&root, &args, "CUDA_VISIBLE_DEVICES", "", &[]);
    let got: Vec<_> = seen.iter().map(|s| s.gpus.clone().unwrap()).collect();
    assert_eq!(got, ["0", "1", "2", "3", "4", "5", "6", "7", "0", "1"]);
    let line = "kauri: -gpus-per-proc: 10 ranks on vm want more GPUs than its 8: ranks share them, in turn";
    assert_eq!(err.matches(line).count(), 1, "{err}");
    // A GPU gone between two jobs: the next job sees the host as it is then.
    std::fs::remove_dir_all(d.join("vm/sys/bus/pci/devices/0000:80:00.0")).unwrap();
    fails(
        &fork("vm:1", "1", &["-gpu-bind", "map:7", "true"]),
        "kauri: -gpu-bind map: vm has no nvidia GPU 7 (it has 7)",
    );
    std::fs::remove_dir_all(&d).unwrap();
}

/// Where this machine has a GPU kauri can find, a rank asked one gets one (its runtime's
/// variable names one of this host's); skipped, and said so, where none is.
#[test]
fn a_real_gpu_where_there_is_one() {
    let gpus = kauri::host::gpu::discover(Path::new("/"));
    let Some(first) = gpus.first() else {
        eprintln!("skipped: this machine has no GPU kauri can find");
        return;
    };
    let var = first.vendor.variable();
    let out = common::kauri(
        &[
            "-gpus-per-proc",
            "1",
            "-n",
            "1",
            "sh",
            "-c",
            &format!("echo ${var}"),
        ],
        None,
        &[],
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert_eq!(common::lines(&out), ["0"]);
}
