//! A host's GPUs, found where the agent runs without their vendors' libraries: each GPU's
//! vendor, its PCI address, the NUMA node and CPUs next to it, and its number in its vendor's
//! runtime (what `CUDA_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES` or `ZE_AFFINITY_MASK` name).
//!
//! - NVIDIA: the driver's `/proc/driver/nvidia/gpus/<PCI address>/`, else the PCI devices of
//!   vendor `0x10de` and class `0x0302` (3D controller) or `0x0300` (VGA). Numbered in PCI
//!   order, which is CUDA's with `CUDA_DEVICE_ORDER=PCI_BUS_ID`.
//! - AMD: the KFD topology, `/sys/class/kfd/kfd/topology/nodes/N/` with a non-zero `gpu_id`,
//!   its PCI address from `properties` (`domain`, `location_id`). Numbered in node order, as
//!   ROCm does.
//! - Intel: the DRM cards (`/sys/class/drm/cardN/device`) of vendor `0x8086` driven by `i915`
//!   or `xe` (the drivers Level Zero uses). Numbered in PCI order.
//!
//! Each GPU's place is its PCI device's `numa_node` and `local_cpulist`, as the kernel gives
//! them. Everything is read below a root directory (`/` on a host), so tests give a fake
//! tree.

use crate::error::NodeError;
pub use kauri_core::plan::gpus::{GpuAsk, GpuBind, PerProc};
use kauri_core::plan::{AppPlan, JobPlan};
use std::path::{Path, PathBuf};

/// A GPU's maker, which decides the variable its runtime reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Vendor {
    /// CUDA: `CUDA_VISIBLE_DEVICES`.
    Nvidia,
    /// ROCm: `ROCR_VISIBLE_DEVICES` (and HIP's `HIP_VISIBLE_DEVICES`).
    Amd,
    /// Level Zero: `ZE_AFFINITY_MASK`.
    Intel,
}

impl Vendor {
    /// The vendor's name as kauri prints it.
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Intel => "intel",
        }
    }
}

/// One GPU of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its maker.
    pub vendor: Vendor,
    /// Its number among its vendor's GPUs on this host, as the vendor's runtime counts.
    pub index: usize,
    /// Its PCI address (`0000:3b:00.0`).
    pub pci: String,
    /// The NUMA node it is attached to, if the kernel knows.
    pub numa: Option<usize>,
    /// The CPUs next to it (`local_cpulist`), empty if the kernel does not say.
    pub cpus: Vec<usize>,
}

/// The GPUs of the host whose filesystem is at `root` (`/` here), by vendor, each vendor's
/// in its runtime's order.
pub fn discover(root: &Path) -> Vec<Gpu> {
    let mut all = Vec::new();
    for (vendor, found) in [
        (Vendor::Nvidia, nvidia(root)),
        (Vendor::Amd, amd(root)),
        (Vendor::Intel, intel(root)),
    ] {
        for (index, pci) in found.into_iter().enumerate() {
            let dev = root.join("sys/bus/pci/devices").join(&pci);
            let numa = read(&dev.join("numa_node"))
                .and_then(|n| n.trim().parse::<i64>().ok())
                .and_then(|n| usize::try_from(n).ok());
            let cpus = read(&dev.join("local_cpulist"))
                .and_then(|l| crate::bind::parse_cpu_list(&l))
                .unwrap_or_default();
            all.push(Gpu {
                vendor,
                index,
                pci,
                numa,
                cpus,
            });
        }
    }
    all
}

/// Each local rank's GPUs (their indexes), given the host's `gpus` and each rank's CPUs
/// (`ranks[L]`, empty when it is not bound), and whether GPUs had to be shared (more wanted
/// than the host has). `None` when the host has no GPU of the one vendor used.
pub fn assign(
    gpus: &[Gpu],
    ranks: &[Vec<usize>],
    per: PerProc,
    bind: &GpuBind,
) -> Option<(Vec<Vec<usize>>, bool)> {
    // One vendor per host: the first found (a host with two is rare, and each runtime
    // counts its own GPUs only).
    let vendor = gpus.first()?.vendor;
    let gpus: Vec<&Gpu> = gpus.iter().filter(|g| g.vendor == vendor).collect();
    let n = match (per, bind) {
        (PerProc::Hidden, _) => 0,
        (PerProc::Count(n), _) => n.max(1),
        // A map gives each rank one GPU, as Slurm's map_gpu does.
        (PerProc::Auto, GpuBind::Map(_)) => 1,
        (PerProc::Auto, _) => (gpus.len() / ranks.len().max(1)).max(1),
    };
    let shared = n * ranks.len() > gpus.len();
    if let GpuBind::Map(map) = bind {
        let out = (0..ranks.len())
            .map(|l| {
                (0..n)
                    .map(|k| map[(l * n + k) % map.len().max(1)])
                    .collect()
            })
            .collect();
        return Some((out, shared));
    }
    let mut used = vec![0usize; gpus.len()];
    let mut out = vec![Vec::new(); ranks.len()];
    // Under `closest`, ranks with a GPU next to their CPUs choose first, so a socket's GPUs
    // go to its own ranks before the others take the leftovers.
    let near_any = |cpus: &Vec<usize>| gpus.iter().any(|g| cpus.iter().any(|c| g.cpus.contains(c)));
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    if *bind == GpuBind::Closest {
        order.sort_by_key(|&l| !near_any(&ranks[l]));
    }
    for l in order {
        let cpus = &ranks[l];
        let mut mine: Vec<usize> = Vec::with_capacity(n);
        for _ in 0..n {
            // The least used GPU, nearest first under `closest`, in index order.
            let nearness = |g: &Gpu| -> usize {
                match bind {
                    GpuBind::Closest if !cpus.is_empty() => {
                        let near = cpus.iter().filter(|c| g.cpus.contains(c)).count();
                        usize::from(near == 0)
                    }
                    _ => 0,
                }
            };
            let pick = (0..gpus.len())
                .filter(|&i| !mine.contains(&gpus[i].index) || mine.len() >= gpus.len())
                .min_by_key(|&i| (used[i], nearness(gpus[i]), i));
            let Some(i) = pick else { break };
            used[i] += 1;
            mine.push(gpus[i].index);
        }
        out[l] = mine;
    }
    Some((out, shared))
}

impl Vendor {
    /// The variable that selects this vendor's GPUs for a process.
    pub fn variable(self) -> &'static str {
        match self {
            Vendor::Nvidia => "CUDA_VISIBLE_DEVICES",
            // Not HIP_VISIBLE_DEVICES too: HIP counts the devices ROCr left visible, so the
            // same numbers in both would select twice.
            Vendor::Amd => "ROCR_VISIBLE_DEVICES",
            Vendor::Intel => "ZE_AFFINITY_MASK",
        }
    }
}

/// The variables that give a rank the GPUs `mine` of `vendor`, unless its environment
/// (`has`: whether a variable is set) already chooses: a variable the user set is never
/// overridden, and then none is added. NVIDIA's numbering is CUDA's only in PCI order, so
/// `CUDA_DEVICE_ORDER=PCI_BUS_ID` comes with it unless set.
///
/// `place_at: Some(L)` shows the rank every GPU of the host (`all` of them) with its own at
/// position `L` instead of its own alone: under `-ml-env`, a program that takes device
/// `LOCAL_RANK` (L) must find its own there, and NCCL wants its peers visible.
pub fn rank_env(
    vendor: Vendor,
    mine: &[usize],
    all: usize,
    place_at: Option<usize>,
    has: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let var = vendor.variable();
    if CHOOSING.iter().any(|v| has(v)) || mine.is_empty() {
        return Vec::new();
    }
    let list: Vec<usize> = match place_at {
        None => mine.to_vec(),
        Some(at) => {
            let mut others: Vec<usize> = (0..all).filter(|g| !mine.contains(g)).collect();
            let at = at.min(others.len());
            others.splice(at..at, mine.iter().copied());
            others
        }
    };
    let text: Vec<String> = list.iter().map(usize::to_string).collect();
    let mut env = vec![(var.to_string(), text.join(","))];
    if vendor == Vendor::Nvidia && !has("CUDA_DEVICE_ORDER") {
        env.push(("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()));
    }
    env
}

/// The CPUs a rank with GPUs `mine` and no `-bind-to` is bound to under `closest`: those
/// next to its GPUs that this process may use (`allowed`); empty (not bound) when the
/// kernel does not say where its GPUs are, or none of those CPUs is allowed.
pub fn cpus_near(gpus: &[Gpu], mine: &[usize], allowed: &[usize]) -> Vec<usize> {
    let mut cpus: Vec<usize> = gpus
        .iter()
        .filter(|g| mine.contains(&g.index))
        .flat_map(|g| g.cpus.iter().copied())
        .filter(|c| allowed.is_empty() || allowed.contains(c))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// How `--report-bindings` names a rank's GPUs: `GPU nvidia:4 (0000:88:00.0)`, several
/// joined by `, `.
pub fn report(gpus: &[Gpu], mine: &[usize]) -> String {
    let named: Vec<String> = mine
        .iter()
        .filter_map(|i| gpus.iter().find(|g| g.index == *i))
        .map(|g| format!("GPU {}:{} ({})", g.vendor.name(), g.index, g.pci))
        .collect();
    named.join(", ")
}

/// A host's GPUs as its ranks got them ([`place`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// Every GPU is hidden from the ranks (`-gpus-per-proc 0`).
    pub hidden: bool,
    /// The GPUs of the vendor used.
    pub gpus: Vec<Gpu>,
    /// Each local rank's, by index, by local id.
    pub of: Vec<Vec<usize>>,
}

impl Placed {
    /// The variables that give local rank `local` its GPUs, from a segment `app` of `job`
    /// (none when its environment chooses GPUs itself: see [`rank_env`]).
    pub fn rank_env(&self, job: &JobPlan, app: &AppPlan, local: usize) -> Vec<(String, String)> {
        if self.hidden {
            // An index no device has hides them all, from CUDA and ROCr alike (Hydra sets
            // CUDA's alone).
            return ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]
                .into_iter()
                .filter(|v| user_choice(app) != Some(*v))
                .map(|v| (v.to_string(), "-1".to_string()))
                .collect();
        }
        let Some(first) = self.gpus.first() else {
            return Vec::new();
        };
        let mine = self.of.get(local).map_or(&[][..], Vec::as_slice);
        // -ml-env: the program takes device LOCAL_RANK.
        let place_at = job.master.is_some().then_some(local);
        rank_env(first.vendor, mine, self.gpus.len(), place_at, |k| {
            app.env.iter().any(|(n, _)| n == k)
        })
    }

    /// How `--report-bindings` names local rank `local`'s GPUs, or what chose them instead.
    pub fn report(&self, app: &AppPlan, local: usize) -> String {
        match user_choice(app) {
            Some(var) => format!("GPUs as its {var} says"),
            None if self.hidden => "no GPU".to_string(),
            None => report(&self.gpus, self.of.get(local).map_or(&[], Vec::as_slice)),
        }
    }
}

/// The variables by which an environment chooses its GPUs itself: any one of them set, kauri
/// sets none ([`rank_env`], [`user_choice`]).
const CHOOSING: [&str; 4] = [
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK",
];

/// The variable by which segment `app`'s environment chooses its GPUs itself, if it does.
pub fn user_choice(app: &AppPlan) -> Option<&'static str> {
    CHOOSING
        .into_iter()
        .find(|v| app.env.iter().any(|(n, _)| n == v))
}

/// Hands `host`'s GPUs (found below `root`) to its ranks as `ask` says, given each rank's
/// CPUs (`cpus_of`, by local id; empty when the job binds none) and whether its
/// environment chooses its GPUs itself (`chooses`, by local id). Under `closest` with no
/// `-bind-to` (`bound` false), each rank that does not choose is bound to the CPUs next to
/// its GPUs: its entry of `cpus_of` is set (empty where the kernel does not say where its
/// GPUs are).
///
/// A host without GPUs, or a map that names one it does not have, is an error (the job
/// asked for GPUs; ranks without would compute on the CPU and look like success). More GPUs
/// wanted than the host has are shared in turn, and the host says so once.
pub fn place(
    ask: &GpuAsk,
    root: &Path,
    host: &str,
    chooses: &[bool],
    bound: bool,
    cpus_of: &mut Vec<Vec<usize>>,
) -> Result<Placed, NodeError> {
    let nlocal = chooses.len();
    if ask.per == PerProc::Hidden {
        return Ok(Placed {
            hidden: true,
            gpus: Vec::new(),
            of: Vec::new(),
        });
    }
    let found = discover(root);
    let Some(vendor) = found.first().map(|g| g.vendor) else {
        return Err(NodeError::NoGpu {
            host: host.to_string(),
        });
    };
    let gpus: Vec<Gpu> = found.into_iter().filter(|g| g.vendor == vendor).collect();
    if let GpuBind::Map(map) = &ask.bind {
        if let Some(&index) = map.iter().find(|&&i| i >= gpus.len()) {
            return Err(NodeError::NoSuchGpu {
                host: host.to_string(),
                vendor: vendor.name(),
                index,
                count: gpus.len(),
            });
        }
    }
    cpus_of.resize(nlocal, Vec::new());
    let (of, shared) = assign(&gpus, cpus_of, ask.per, &ask.bind).unwrap_or_default();
    if shared {
        say!(
            "kauri: -gpus-per-proc: {nlocal} ranks on {host} want more GPUs than its {}: \
             ranks share them, in turn",
            gpus.len()
        );
    }
    if ask.bind == GpuBind::Closest && !bound {
        let allowed = crate::bind::allowed_cpus();
        for ((cpus, mine), &chooses) in cpus_of.iter_mut().zip(&of).zip(chooses) {
            if !chooses {
                *cpus = cpus_near(&gpus, mine, &allowed);
            }
        }
    }
    if !bound && cpus_of.iter().all(Vec::is_empty) {
        cpus_of.clear();
    }
    Ok(Placed {
        hidden: false,
        gpus,
        of,
    })
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok()
}

/// The names in directory `d`, sorted; none if it cannot be read.
fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether `s` reads as a hexadecimal number (`0x10de`) equal to `want`.
fn hex_is(s: Option<String>, want: u32) -> bool {
    s.and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()) == Some(want)
}

/// The top 16 bits of a PCI device's class (`0x030200` → `0x0302`).
fn class_of(dev: &Path) -> Option<u32> {
    let c = read(&dev.join("class"))?;
    u32::from_str_radix(c.trim().trim_start_matches("0x"), 16)
        .ok()
        .map(|c| c >> 8)
}

/// NVIDIA GPUs' PCI addresses, in PCI order.
fn nvidia(root: &Path) -> Vec<String> {
    let by_driver = names(&root.join("proc/driver/nvidia/gpus"));
    if !by_driver.is_empty() {
        return by_driver;
    }
    let pci = root.join("sys/bus/pci/devices");
    names(&pci)
        .into_iter()
        .filter(|a| {
            let dev = pci.join(a);
            hex_is(read(&dev.join("vendor")), 0x10de)
                && matches!(class_of(&dev), Some(0x0302 | 0x0300))
        })
        .collect()
}

/// AMD GPUs' PCI addresses, in KFD node order.
fn amd(root: &Path) -> Vec<String> {
    let nodes = root.join("sys/class/kfd/kfd/topology/nodes");
    let mut found: Vec<(u32, String)> = Vec::new();
    for n in names(&nodes) {
        let Ok(number) = n.parse::<u32>() else {
            continue;
        };
        let node = nodes.join(&n);
        let gpu_id = read(&node.join("gpu_id")).and_then(|g| g.trim().parse::<u64>().ok());
        if gpu_id.unwrap_or(0) == 0 {
            continue; // a CPU node
        }
        let props = read(&node.join("properties")).unwrap_or_default();
        let prop = |key: &str| {
            props.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse::<u32>().ok()).flatten()
            })
        };
        let Some(location) = prop("location_id") else {
            continue;
        };
        let domain = prop("domain").unwrap_or(0);
        let pci = format!(
            "{domain:04x}:{:02x}:{:02x}.{:x}",
            location >> 8,
            (location >> 3) & 0x1f,
            location & 7
        );
        found.push((number, pci));
    }
    found.sort();
    found.into_iter().map(|(_, pci)| pci).collect()
}

/// Intel GPUs' PCI addresses, in PCI order.
fn intel(root: &Path) -> Vec<String> {
    let drm = root.join("sys/class/drm");
    let mut found: Vec<String> = names(&drm)
        .into_iter()
        .filter(|n| {
            n.strip_prefix("card")
                .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|n| {
            let dev = drm.join(&n).join("device");
            if !hex_is(read(&dev.join("vendor")), 0x8086) {
                return None;
            }
            let driver = link_name(&dev.join("driver"))?;
            if driver != "i915" && driver != "xe" {
                return None;
            }
            link_name(&dev)
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The last part of the path a symbolic link points to (`…/drivers/i915` → `i915`).
fn link_name(p: &Path) -> Option<String> {
    let target: PathBuf = std::fs::read_link(p).ok()?;
    target.file_name()?.to_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake root for one test.
    fn root(test: &str) -> PathBuf {
        let r = std::env::temp_dir().join(format!("kauri-gpu-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&r);
        std::fs::create_dir_all(&r).unwrap();
        r
    }

    fn write(p: &Path, s: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    }

    /// A PCI device at `pci` on NUMA node `numa`, whose CPUs are `cpus`.
    fn pci_device(r: &Path, pci: &str, vendor: &str, class: &str, numa: i32, cpus: &str) {
        let d = r.join("sys/bus/pci/devices").join(pci);
        write(&d.join("vendor"), &format!("{vendor}\n"));
        write(&d.join("class"), &format!("{class}\n"));
        write(&d.join("numa_node"), &format!("{numa}\n"));
        write(&d.join("local_cpulist"), &format!("{cpus}\n"));
    }

    /// Two sockets of 8 CPUs, four GPUs on each: their PCI addresses and places.
    const TWO_SOCKETS: [(&str, i32, &str); 8] = [
        ("0000:1a:00.0", 0, "0-7"),
        ("0000:1b:00.0", 0, "0-7"),
        ("0000:3d:00.0", 0, "0-7"),
        ("0000:3e:00.0", 0, "0-7"),
        ("0000:88:00.0", 1, "8-15"),
        ("0000:89:00.0", 1, "8-15"),
        ("0000:b1:00.0", 1, "8-15"),
        ("0000:b2:00.0", 1, "8-15"),
    ];

    fn check_two_sockets(found: &[Gpu], vendor: Vendor) {
        assert_eq!(found.len(), 8, "{found:#?}");
        for (i, (g, (pci, numa, cpus))) in found.iter().zip(TWO_SOCKETS).enumerate() {
            assert_eq!(g.vendor, vendor);
            assert_eq!(g.index, i);
            assert_eq!(g.pci, pci);
            assert_eq!(g.numa, Some(numa as usize));
            assert_eq!(g.cpus, crate::bind::parse_cpu_list(cpus).unwrap());
        }
    }

    #[test]
    fn nvidia_gpus_from_the_pci_devices_and_from_the_driver() {
        let r = root("nvidia");
        // Listed out of order on purpose, beside a NIC and an NVIDIA audio function.
        for (pci, numa, cpus) in TWO_SOCKETS.iter().rev() {
            pci_device(&r, pci, "0x10de", "0x030200", *numa, cpus);
        }
        pci_device(&r, "0000:17:00.0", "0x15b3", "0x020700", 0, "0-7");
        pci_device(&r, "0000:1a:00.1", "0x10de", "0x040300", 0, "0-7");
        check_two_sockets(&discover(&r), Vendor::Nvidia);
        // With the driver loaded its list is used: one GPU it does not drive is left out.
        for (pci, ..) in &TWO_SOCKETS[..7] {
            write(
                &r.join("proc/driver/nvidia/gpus")
                    .join(pci)
                    .join("information"),
                "Model: fake\n",
            );
        }
        assert_eq!(discover(&r).len(), 7);
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn amd_gpus_from_the_kfd_topology() {
        let r = root("amd");
        let nodes = r.join("sys/class/kfd/kfd/topology/nodes");
        // Two CPU nodes first, as ROCm lists them, then the GPUs.
        for n in 0..2 {
            write(&nodes.join(format!("{n}/gpu_id")), "0\n");
        }
        for (i, (pci, numa, cpus)) in TWO_SOCKETS.iter().enumerate() {
            pci_device(&r, pci, "0x1002", "0x038000", *numa, cpus);
            let bus = u32::from_str_radix(&pci[5..7], 16).unwrap();
            let node = nodes.join((i + 2).to_string());
            write(&node.join("gpu_id"), &format!("{}\n", 1000 + i));
            write(
                &node.join("properties"),
                &format!("cpu_cores_count 0\nlocation_id {}\ndomain 0\n", bus << 8),
            );
        }
        check_two_sockets(&discover(&r), Vendor::Amd);
        std::fs::remove_dir_all(&r).unwrap();
    }

    #[test]
    fn intel_gpus_from_the_drm_cards_their_compute_drivers_drive() {
        let r = root("intel");
        let drivers = r.join("sys/bus/pci/drivers");
        for d in ["i915", "xe", "ast"] {
            std::fs::create_dir_all(drivers.join(d)).unwrap();
        }
        let card = |n: usize, pci: &str, driver: &str| {
            let dev = r.join("sys/bus/pci/devices").join(pci);
            symlink(
                &dev,
                r.join("sys/class/drm")
                    .join(format!("card{n}"))
                    .join("device"),
            )
            .unwrap();
            symlink(drivers.join(driver), dev.join("driver")).unwrap();
        };
        std::fs::create_dir_all(r.join("sys/class/drm")).unwrap();
        for (i, (pci, numa, cpus)) in TWO_SOCKETS.iter().enumerate() {
            pci_device(&r, pci, "0x8086", "0x038000", *numa, cpus);
            std::fs::create_dir_all(r.join(format!("sys/class/drm/card{}", i + 1))).unwrap();
            card(i + 1, pci, if i % 2 == 0 { "i915" } else { "xe" });
        }
        // The board's own display (another vendor's) and a connector are not GPUs.
        pci_device(&r, "0000:03:00.0", "0x1a03", "0x030000", 0, "0-7");
        std::fs::create_dir_all(r.join("sys/class/drm/card0")).unwrap();
        card(0, "0000:03:00.0", "ast");
        std::fs::create_dir_all(r.join("sys/class/drm/card1-DP-1")).unwrap();
        check_two_sockets(&discover(&r), Vendor::Intel);
        std::fs::remove_dir_all(&r).unwrap();
    }

    /// Eight GPUs, four next to each socket of 8 CPUs, without a filesystem.
    fn eight() -> Vec<Gpu> {
        TWO_SOCKETS
            .iter()
            .enumerate()
            .map(|(index, (pci, numa, cpus))| Gpu {
                vendor: Vendor::Nvidia,
                index,
                pci: pci.to_string(),
                numa: Some(*numa as usize),
                cpus: crate::bind::parse_cpu_list(cpus).unwrap(),
            })
            .collect()
    }

    /// Eight ranks bound to one core each, the second socket's first (the order a
    /// `-map-by` may give): each gets one GPU on its own socket, none shared.
    #[test]
    fn closest_gives_each_rank_a_gpu_on_its_socket() {
        let ranks: Vec<Vec<usize>> = [8, 9, 10, 11, 0, 1, 2, 3].map(|c| vec![c]).to_vec();
        let (got, shared) = assign(&eight(), &ranks, PerProc::Count(1), &GpuBind::Closest).unwrap();
        assert!(!shared);
        assert_eq!(got, [[4], [5], [6], [7], [0], [1], [2], [3]]);
        // `none` hands them out in turn.
        let (got, _) = assign(&eight(), &ranks, PerProc::Count(1), &GpuBind::None).unwrap();
        assert_eq!(got, [[0], [1], [2], [3], [4], [5], [6], [7]]);
    }

    /// `auto` divides the GPUs; more ranks than GPUs share them in turn, and say so.
    #[test]
    fn auto_and_more_ranks_than_gpus() {
        let unbound = vec![Vec::new(); 4];
        let (got, shared) = assign(&eight(), &unbound, PerProc::Auto, &GpuBind::Closest).unwrap();
        assert!(!shared);
        assert_eq!(got, [[0, 1], [2, 3], [4, 5], [6, 7]]);
        let many = vec![Vec::new(); 10];
        let (got, shared) = assign(&eight(), &many, PerProc::Count(1), &GpuBind::None).unwrap();
        assert!(shared);
        let firsts: Vec<usize> = got.iter().map(|g| g[0]).collect();
        assert_eq!(firsts, [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]);
        // A map is taken as given, wrapping around.
        let (got, _) = assign(
            &eight(),
            &many[..3],
            PerProc::Count(1),
            &GpuBind::Map(vec![7, 5]),
        )
        .unwrap();
        assert_eq!(got, [[7], [5], [7]]);
        assert_eq!(assign(&[], &many, PerProc::Auto, &GpuBind::None), None);
    }

    /// GPUs on one socket only: ranks on the other get the nearest there is, still one each.
    #[test]
    fn gpus_on_one_socket_only() {
        let four: Vec<Gpu> = eight().into_iter().take(4).collect();
        let ranks: Vec<Vec<usize>> = [0, 8, 1, 9].map(|c| vec![c]).to_vec();
        let (got, shared) = assign(&four, &ranks, PerProc::Count(1), &GpuBind::Closest).unwrap();
        assert!(!shared);
        let mut all: Vec<usize> = got.iter().map(|g| g[0]).collect();
        assert_eq!(
            (got[0][0], got[2][0]),
            (0, 1),
            "the socket's own ranks first in order"
        );
        all.sort();
        assert_eq!(all, [0, 1, 2, 3]);
    }

    #[test]
    fn each_vendor_gets_its_variable_and_the_users_wins() {
        let none = |_: &str| false;
        assert_eq!(
            rank_env(Vendor::Nvidia, &[5], 8, None, none),
            [
                ("CUDA_VISIBLE_DEVICES".to_string(), "5".to_string()),
                ("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into())
            ]
        );
        assert_eq!(
            rank_env(Vendor::Amd, &[2, 3], 8, None, none),
            [("ROCR_VISIBLE_DEVICES".to_string(), "2,3".to_string())]
        );
        assert_eq!(
            rank_env(Vendor::Intel, &[1], 8, None, none),
            [("ZE_AFFINITY_MASK".to_string(), "1".to_string())]
        );
        // The user's own choice stands, and nothing is added beside it.
        assert_eq!(
            rank_env(Vendor::Nvidia, &[5], 8, None, |v| v
                == "CUDA_VISIBLE_DEVICES"),
            []
        );
        assert_eq!(
            rank_env(Vendor::Amd, &[5], 8, None, |v| v == "HIP_VISIBLE_DEVICES"),
            []
        );
        let order = |v: &str| v == "CUDA_DEVICE_ORDER";
        assert_eq!(rank_env(Vendor::Nvidia, &[5], 8, None, order).len(), 1);
    }

    /// Under -ml-env every GPU stays visible, the rank's own at its LOCAL_RANK.
    #[test]
    fn the_ranks_own_gpu_is_at_its_local_rank() {
        let env = rank_env(Vendor::Nvidia, &[5], 8, Some(2), |_| false);
        assert_eq!(env[0].1, "0,1,5,2,3,4,6,7");
        let env = rank_env(Vendor::Intel, &[0], 4, Some(3), |_| false);
        assert_eq!(env[0].1, "1,2,3,0");
    }

    /// Unbound ranks under `closest` are bound next to their GPUs, within what is allowed.
    #[test]
    fn unbound_ranks_go_next_to_their_gpus() {
        let all: Vec<usize> = (0..16).collect();
        assert_eq!(cpus_near(&eight(), &[5], &all), (8..16).collect::<Vec<_>>());
        assert_eq!(cpus_near(&eight(), &[0, 4], &all), all);
        assert_eq!(cpus_near(&eight(), &[5], &[0, 1, 9]), [9]);
        assert_eq!(cpus_near(&eight(), &[5], &[0, 1]), Vec::<usize>::new());
        assert_eq!(
            report(&eight(), &[4, 5]),
            "GPU nvidia:4 (0000:88:00.0), GPU nvidia:5 (0000:89:00.0)"
        );
    }

    #[test]
    fn no_gpu_and_no_numa_node_are_not_errors() {
        let r = root("none");
        assert_eq!(discover(&r), []);
        pci_device(&r, "0000:01:00.0", "0x10de", "0x030000", -1, "");
        let found = discover(&r);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].numa, found[0].cpus.len()), (None, 0));
        std::fs::remove_dir_all(&r).unwrap();
    }
}
