//! Process binding (`-bind-to`, `-map-by` over a host's topology, `-report-bindings`), as
//! Hydra's: each host's agent reads its own topology from `/sys` and gives each of its
//! ranks a set of CPUs, which the rank takes (`sched_setaffinity`) between fork and exec.
//!
//! The topology is the CPUs this agent may run on (its own affinity: a cgroup's cpuset or a
//! batch system's binding holds), grouped into the objects of each kind: hardware threads,
//! cores (`topology/core_id` within a package), L1/L2/L3 caches (`cache/index*/level` and
//! `shared_cpu_list`), sockets (`topology/physical_package_id`) and NUMA nodes
//! (`/sys/devices/system/node/node*/cpulist`). Objects are ordered by their first CPU.
//!
//! Local rank `L` of a host is mapped to object `L mod M` of the mapping kind (`-map-by`,
//! by default the binding kind), and within it to the `L div M`-th group of `N` objects of
//! the binding kind (`-bind-to KIND:N`, N 1 by default), wrapping around; a binding object
//! larger than the mapping object is the one that holds it. More ranks than places wrap
//! around, and the host says so once.

use crate::error::TopologyError;
pub use kauri_core::plan::binding::{Binding, Kind};
use rustix::thread::CpuSet;
use std::collections::BTreeMap;
use std::path::Path;

/// A host's CPUs, grouped into the objects of each kind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    /// The CPUs this process may use, ascending.
    pub cpus: Vec<usize>,
    objects: BTreeMap<Kind, Vec<Vec<usize>>>,
}

/// Reads a CPU list as `/sys` writes it: `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Writes CPUs as a list with ranges (`0-3,8`), as the kernel writes them (the same runs as
/// [`kauri_core::plan::rank_ranges`]).
pub fn cpu_list(cpus: &[usize]) -> String {
    kauri_core::plan::rank_ranges(cpus)
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

impl Topology {
    /// Reads this host's topology from `/sys`, limited to `allowed` (this process's
    /// affinity).
    pub fn read(allowed: &[usize]) -> Result<Topology, TopologyError> {
        Topology::read_from(Path::new("/sys/devices/system"), allowed)
    }

    /// [`Topology::read`] from a `sys/devices/system` tree at `root`.
    pub fn read_from(root: &Path, allowed: &[usize]) -> Result<Topology, TopologyError> {
        let cpu_dir = root.join("cpu");
        let online = read(&cpu_dir.join("online"))
            .and_then(|s| parse_cpu_list(&s))
            .ok_or_else(|| TopologyError::Unreadable(cpu_dir.join("online")))?;
        let cpus: Vec<usize> = online
            .into_iter()
            .filter(|c| allowed.is_empty() || allowed.contains(c))
            .collect();
        if cpus.is_empty() {
            return Err(TopologyError::NoCpu);
        }
        // Each kind: a key per CPU; CPUs with the same key are one object.
        let mut keys: BTreeMap<Kind, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
        for &c in &cpus {
            let d = cpu_dir.join(format!("cpu{c}"));
            let num = |f: &str| read(&d.join("topology").join(f)).map(|s| s.trim().to_string());
            let package = num("physical_package_id").unwrap_or_else(|| "0".into());
            let core = num("core_id").unwrap_or_else(|| format!("cpu{c}"));
            let mut add = |k: Kind, key: String| {
                keys.entry(k).or_default().entry(key).or_default().push(c);
            };
            add(Kind::HwThread, c.to_string());
            add(Kind::Core, format!("{package}/{core}"));
            add(Kind::Socket, package.clone());
            for level in 1..=3u8 {
                let kind = [Kind::L1, Kind::L2, Kind::L3][usize::from(level - 1)];
                // The level's data or unified cache (an instruction cache is not a place).
                let shared = (0..8).find_map(|i| {
                    let idx = d.join("cache").join(format!("index{i}"));
                    let lv = read(&idx.join("level"))?;
                    let ty = read(&idx.join("type")).unwrap_or_default();
                    (lv.trim() == level.to_string() && ty.trim() != "Instruction")
                        .then(|| read(&idx.join("shared_cpu_list")))
                        .flatten()
                });
                // Without that cache level, each core is its own.
                let key = shared.map_or_else(
                    || format!("core {package}/{core}"),
                    |s| s.trim().to_string(),
                );
                add(kind, key);
            }
        }
        // NUMA nodes; without any, the machine is one.
        let mut numa: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        if let Ok(rd) = std::fs::read_dir(root.join("node")) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name
                    .strip_prefix("node")
                    .is_some_and(|n| n.parse::<u32>().is_ok())
                {
                    if let Some(list) =
                        read(&e.path().join("cpulist")).and_then(|s| parse_cpu_list(&s))
                    {
                        let mine: Vec<usize> =
                            list.into_iter().filter(|c| cpus.contains(c)).collect();
                        if !mine.is_empty() {
                            numa.insert(name, mine);
                        }
                    }
                }
            }
        }
        if numa.is_empty() {
            numa.insert("all".into(), cpus.clone());
        }
        keys.insert(Kind::Numa, numa);
        let objects = keys
            .into_iter()
            .map(|(k, m)| {
                let mut objs: Vec<Vec<usize>> = m.into_values().collect();
                objs.iter_mut().for_each(|o| o.sort_unstable());
                objs.sort();
                (k, objs)
            })
            .collect();
        Ok(Topology { cpus, objects })
    }

    /// The objects of `kind`, ordered by their first CPU.
    pub fn objects(&self, kind: Kind) -> &[Vec<usize>] {
        self.objects.get(&kind).map_or(&[], Vec::as_slice)
    }

    /// The CPUs of each of `n` local ranks under `b`, and whether they wrapped around (more
    /// ranks than places).
    pub fn place(&self, b: &Binding, n: usize) -> (Vec<Vec<usize>>, bool) {
        let bind = self.objects(b.kind);
        let map = self.objects(b.map.unwrap_or(b.kind));
        let count = b.count.min(bind.len()).max(1);
        let mut wrapped = false;
        let mut out = Vec::with_capacity(n);
        if bind.is_empty() || map.is_empty() {
            return (vec![self.cpus.clone(); n], false);
        }
        if b.map.is_none_or(|m| m == b.kind) {
            // Consecutive groups of `count` objects.
            for l in 0..n {
                if (l + 1) * count > bind.len() {
                    wrapped = true;
                }
                let mut cpus: Vec<usize> = (0..count)
                    .flat_map(|k| bind[(l * count + k) % bind.len()].iter().copied())
                    .collect();
                cpus.sort_unstable();
                cpus.dedup();
                out.push(cpus);
            }
            return (out, wrapped);
        }
        for l in 0..n {
            let m = &map[l % map.len()];
            let round = l / map.len();
            // The binding objects within the mapping object; when a binding object is larger,
            // the one that holds the mapping object's first CPU.
            let inside: Vec<usize> = (0..bind.len())
                .filter(|&i| bind[i].iter().all(|c| m.contains(c)))
                .collect();
            let cpus = if inside.is_empty() {
                let holder = (0..bind.len())
                    .find(|&i| bind[i].contains(&m[0]))
                    .unwrap_or(0);
                if round > 0 {
                    wrapped = true;
                }
                (0..count)
                    .flat_map(|k| bind[(holder + k) % bind.len()].iter().copied())
                    .collect::<Vec<usize>>()
            } else {
                let groups = inside.len().div_ceil(count);
                if round >= groups {
                    wrapped = true;
                }
                let first = (round % groups) * count;
                (0..count)
                    .flat_map(|k| bind[inside[(first + k) % inside.len()]].iter().copied())
                    .collect()
            };
            let mut cpus = cpus;
            cpus.sort_unstable();
            cpus.dedup();
            out.push(cpus);
        }
        (out, wrapped)
    }
}

/// The directory below which `host`'s `/sys` and `/proc` are read for its CPUs and GPUs: `/`,
/// or `KAURI_SYSFS_ROOT` (with `%h` the host's name), for tests on fake trees.
pub fn system_root(host: &str) -> std::path::PathBuf {
    match std::env::var("KAURI_SYSFS_ROOT") {
        Ok(dir) if !dir.is_empty() => dir.replace("%h", host).into(),
        _ => "/".into(),
    }
}

/// This process's allowed CPUs (`sched_getaffinity`); empty when unknown.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// A CPU set holding `cpus` (those beyond [`CpuSet::MAX_CPU`] are left out).
pub fn cpu_set(cpus: &[usize]) -> CpuSet {
    let mut set = CpuSet::new();
    for &c in cpus.iter().filter(|&&c| c < CpuSet::MAX_CPU) {
        set.set(c);
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use kauri_core::plan::binding::BindingError;
    use std::fs;

    /// A fake `sys/devices/system` of 2 sockets × 2 cores × 2 threads (CPUs numbered as Linux
    /// does on many Intel machines: thread siblings are c and c+4), an L3 per socket, L1/L2
    /// per core, and a NUMA node per socket.
    fn fake(root: &Path) {
        let cpu = root.join("cpu");
        fs::create_dir_all(&cpu).unwrap();
        fs::write(cpu.join("online"), "0-7\n").unwrap();
        for c in 0..8usize {
            let (socket, core) = ((c % 4) / 2, c % 2);
            let d = cpu.join(format!("cpu{c}"));
            fs::create_dir_all(d.join("topology")).unwrap();
            fs::write(
                d.join("topology/physical_package_id"),
                format!("{socket}\n"),
            )
            .unwrap();
            fs::write(d.join("topology/core_id"), format!("{core}\n")).unwrap();
            let sibling = if c < 4 { c + 4 } else { c - 4 };
            let pair = format!("{},{}", c.min(sibling), c.max(sibling));
            let l3 = if socket == 0 { "0-1,4-5" } else { "2-3,6-7" };
            for (i, (level, ty, shared)) in [
                (1, "Data", pair.as_str()),
                (1, "Instruction", pair.as_str()),
                (2, "Unified", pair.as_str()),
                (3, "Unified", l3),
            ]
            .iter()
            .enumerate()
            {
                let idx = d.join(format!("cache/index{i}"));
                fs::create_dir_all(&idx).unwrap();
                fs::write(idx.join("level"), format!("{level}\n")).unwrap();
                fs::write(idx.join("type"), format!("{ty}\n")).unwrap();
                fs::write(idx.join("shared_cpu_list"), format!("{shared}\n")).unwrap();
            }
        }
        for (n, list) in [(0, "0-1,4-5"), (1, "2-3,6-7")] {
            let d = root.join(format!("node/node{n}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("cpulist"), format!("{list}\n")).unwrap();
        }
    }

    fn topo() -> (tempfile_dir::Dir, Topology) {
        let d = tempfile_dir::Dir::new();
        fake(d.path());
        let t = Topology::read_from(d.path(), &[]).unwrap();
        (d, t)
    }

    /// A scratch directory removed on drop (no crate needed for so little).
    mod tempfile_dir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let p = std::env::temp_dir()
                    .join(format!("kauri-bind-test-{}-{n}", std::process::id()));
                let _ = std::fs::remove_dir_all(&p);
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn b(kind: Kind, count: usize, map: Option<Kind>) -> Binding {
        Binding { kind, count, map }
    }

    #[test]
    fn cpu_lists_read_and_write() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[5]), "5");
    }

    #[test]
    fn objects_of_each_kind() {
        let (_d, t) = topo();
        assert_eq!(t.objects(Kind::HwThread).len(), 8);
        assert_eq!(
            t.objects(Kind::Core),
            [vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        assert_eq!(t.objects(Kind::L1), t.objects(Kind::Core));
        assert_eq!(t.objects(Kind::L3), [vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
        assert_eq!(t.objects(Kind::Socket), t.objects(Kind::L3));
        assert_eq!(t.objects(Kind::Numa), t.objects(Kind::Socket));
    }

    #[test]
    fn ranks_are_placed_like_hydra() {
        let (_d, t) = topo();
        // One core each, in order.
        let (p, w) = t.place(&b(Kind::Core, 1, None), 4);
        assert_eq!(p, [vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]);
        assert!(!w);
        // Dealt over the sockets, a core each.
        let (p, _) = t.place(&b(Kind::Core, 1, Some(Kind::Socket)), 4);
        assert_eq!(p, [vec![0, 4], vec![2, 6], vec![1, 5], vec![3, 7]]);
        // Two cores each.
        let (p, _) = t.place(&b(Kind::Core, 2, None), 2);
        assert_eq!(p, [vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
        // Bound to the socket that holds the core each is mapped to.
        let (p, _) = t.place(&b(Kind::Socket, 1, Some(Kind::Core)), 3);
        assert_eq!(p, [vec![0, 1, 4, 5], vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
        // More ranks than hardware threads: round and round, and said.
        let (p, w) = t.place(&b(Kind::HwThread, 1, None), 10);
        assert_eq!((p[8].clone(), p[9].clone(), w), (vec![0], vec![1], true));
    }

    #[test]
    fn the_allowed_cpus_bound_the_topology() {
        let d = tempfile_dir::Dir::new();
        fake(d.path());
        let t = Topology::read_from(d.path(), &[2, 3, 6, 7]).unwrap();
        assert_eq!(t.objects(Kind::Socket), [vec![2, 3, 6, 7]]);
        assert_eq!(t.objects(Kind::Core), [vec![2, 6], vec![3, 7]]);
        assert!(Topology::read_from(d.path(), &[99]).is_err());
    }

    #[test]
    fn bind_to_values() {
        assert_eq!(Binding::parse("none"), Ok(None));
        assert_eq!(Binding::parse("core"), Ok(Some(b(Kind::Core, 1, None))));
        assert_eq!(Binding::parse("numa:2"), Ok(Some(b(Kind::Numa, 2, None))));
        assert!(matches!(
            Binding::parse("board"),
            Err(BindingError::UnknownKind { .. })
        ));
        assert!(matches!(
            Binding::parse("core:0"),
            Err(BindingError::NotACount { .. })
        ));
    }

    #[test]
    fn this_machine_reads() {
        let t = Topology::read(&allowed_cpus()).expect("this machine's topology");
        assert!(!t.objects(Kind::Core).is_empty());
        let (p, _) = t.place(&b(Kind::Core, 1, None), 2);
        assert!(p.iter().all(|c| !c.is_empty()));
    }
}
