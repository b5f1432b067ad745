//! The Slurm launcher: one `srun` step inside the allocation starts one agent per node; the
//! job key travels in the environment, which `srun` exports. Slurm's own daemons fan the
//! launch out, so the agents form a flat tree under the front end.
//!
//! Where the installed `srun` has `--external-launcher` (Slurm 23.11 and later) the step is
//! started with it, as MPI launchers are meant to: the step then takes no resources of the
//! allocation (it overlaps the ranks' own) and is not counted as the job's tasks.

use super::{command, launch, Launch, Launcher, Target};
use kauri_core::plan::LaunchPlan;

/// Starts agents with `srun` (the plan's `exec`).
pub struct Slurm;

impl Launcher for Slurm {
    fn prepare(
        &self,
        plan: &LaunchPlan,
        targets: &[Target],
        parent: &str,
        key: &str,
    ) -> Vec<Launch> {
        if targets.is_empty() {
            return Vec::new();
        }
        let hosts: Vec<&str> = targets.iter().map(|t| t.host.as_str()).collect();
        let n = targets.len().to_string();
        let mut cmd = command(&plan.exec);
        if srun_has_external_launcher(&plan.exec) {
            cmd.arg("--external-launcher");
        }
        cmd.args(["--nodes", &n, "--ntasks", &n, "--ntasks-per-node", "1"])
            .arg(format!("--nodelist={}", hosts.join(",")))
            .args(["--kill-on-bad-exit=1", "--input=none", "--mpi=none"])
            .args(&plan.extra_args)
            .arg(&plan.agent_path)
            .args(["agent", "--parent", parent, "--slurm"])
            .args(kauri_os::trace::enabled().then_some("--pmi-trace"));
        vec![launch(
            plan.kind,
            targets.iter().map(|t| t.id).collect(),
            cmd,
            key,
        )]
    }
}

/// Whether `srun` takes `--external-launcher`: its `--help` lists the option, or its
/// `--version` (`slurm 23.11.4`) is 23.11 or later. Asked once per srun path; an srun that
/// cannot be run, or takes over 10 s to answer, does not have it.
pub fn srun_has_external_launcher(srun: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static KNOWN: Mutex<Option<HashMap<String, bool>>> = Mutex::new(None);
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    let known = known.get_or_insert_with(HashMap::new);
    if let Some(&has) = known.get(srun) {
        return has;
    }
    let has = output_of(srun, "--help").contains("--external-launcher")
        || version_at_least(&output_of(srun, "--version"), (23, 11));
    known.insert(srun.to_string(), has);
    has
}

/// What `PROGRAM ARG` prints on stdout, or nothing when it cannot be run or takes over 10 s.
fn output_of(program: &str, arg: &str) -> String {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let Ok(mut child) = std::process::Command::new(program)
        .arg(arg)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    else {
        return String::new();
    };
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let t0 = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t0.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return String::new();
            }
        }
    }
    reader.join().unwrap_or_default()
}

/// Whether `slurm MAJOR.MINOR.PATCH` (srun's `--version`) is at least `want`.
fn version_at_least(text: &str, want: (u32, u32)) -> bool {
    text.split_whitespace()
        .find_map(|w| {
            let mut parts = w.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .is_some_and(|v| v >= want)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert!(version_at_least("slurm 23.11.4\n", (23, 11)));
        assert!(version_at_least("slurm 24.05.0", (23, 11)));
        assert!(!version_at_least("slurm 22.05.8", (23, 11)));
        assert!(!version_at_least("slurm-wlm 23.02.7", (23, 11)));
        assert!(!version_at_least("", (23, 11)));
    }
}
