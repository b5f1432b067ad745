//! Hydra's environment: what a cluster tells `mpiexec` through variables rather than flags.
//! A Slurm allocation sets `HYDRA_BOOTSTRAP` and `HYDRA_LAUNCHER_EXTRA_ARGS`, Kubernetes' MPI
//! operator hands over its hosts in `HYDRA_HOST_FILE`, a site pins ports with
//! `MPIEXEC_PORT_RANGE`; Intel MPI's `I_MPI_HYDRA_*` spellings mean the same.
//!
//! [`HydraEnv::read`] turns the variables into values, each taken from the first of its
//! names that is set and not empty; the command line applies them where it gave nothing of
//! its own (`cli`), as Hydra 4 does: the command line first, then the variable. This module
//! reads through a lookup function and touches no process state, files or sockets.

use kauri_core::plan::job::EnvPolicy;
use kauri_core::plan::port_range::PortRange;

/// Where the hosts come from when neither `-f` nor `-hosts` names them (Hydra's
/// `ui/mpich/utils.c`; Intel MPI's name second). Hydra reads it before asking the resource
/// manager, so it wins over a Slurm or PBS allocation.
pub const HOST_FILE: &[&str] = &["HYDRA_HOST_FILE", "I_MPI_HYDRA_HOST_FILE"];

/// The launcher when `-launcher`/`-bootstrap` names none (Hydra's `bsci_init.c`: `HYDRA_LAUNCHER`,
/// then `HYDRA_BOOTSTRAP`; Intel MPI's name last).
pub const LAUNCHER: &[&str] = &["HYDRA_LAUNCHER", "HYDRA_BOOTSTRAP", "I_MPI_HYDRA_BOOTSTRAP"];

/// The launcher program when `-launcher-exec`/`-bootstrap-exec` names none.
pub const LAUNCHER_EXEC: &[&str] = &[
    "HYDRA_LAUNCHER_EXEC",
    "HYDRA_BOOTSTRAP_EXEC",
    "I_MPI_HYDRA_BOOTSTRAP_EXEC",
];

/// Extra arguments for the launcher command (ssh's options, srun's): kauri's own name first,
/// then Hydra's, then Intel MPI's. Hydra has no flag for them.
pub const LAUNCHER_EXTRA_ARGS: &[&str] = &[
    "KAURI_LAUNCHER_ARGS",
    "HYDRA_LAUNCHER_EXTRA_ARGS",
    "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
];

/// Which of kauri's variables ranks inherit when no `-genvall`/`-genvnone`/`-genvlist` says:
/// `all` or `none`.
pub const ENV: &str = "HYDRA_ENV";

/// When set (to anything), output lines get the `[rank] ` prefix, as with `-l`. MPICH
/// documents it for its `mpiexec`; `mpiexec.hydra` 4.0 itself does not read it.
pub const PREFIX_DEFAULT: &str = "MPIEXEC_PREFIX_DEFAULT";

/// What the environment says, before the command line has its say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HydraEnv {
    /// The host file and the variable that named it.
    pub host_file: Option<(&'static str, String)>,
    /// The launcher's name.
    pub launcher: Option<String>,
    /// The launcher's program.
    pub launcher_exec: Option<String>,
    /// The launcher's extra arguments.
    pub launcher_extra_args: Vec<String>,
    /// The inheritance policy of `HYDRA_ENV`.
    pub env_policy: Option<EnvPolicy>,
    /// `MPIEXEC_PREFIX_DEFAULT` is set.
    pub label: bool,
    /// The port range every listener keeps to.
    pub port_range: Option<PortRange>,
}

/// A Hydra variable whose value kauri cannot use: one line naming the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HydraEnvError {
    /// `HYDRA_ENV` is neither `all` nor `none`.
    #[error("{ENV}={value:?}: use all or none")]
    EnvPolicy {
        /// Its value.
        value: String,
    },
    /// A port-range variable is not `LOW:HIGH`.
    #[error(transparent)]
    PortRange(#[from] kauri_core::plan::port_range::PortRangeError),
}

impl HydraEnv {
    /// Reads the variables through `lookup`. A value kauri cannot use is an error of one line
    /// naming the variable.
    pub fn read(lookup: &dyn Fn(&str) -> Option<String>) -> Result<HydraEnv, HydraEnvError> {
        let env_policy = match first(lookup, &[ENV]) {
            None => None,
            Some((_, v)) => match v.trim() {
                "all" => Some(EnvPolicy::All),
                "none" => Some(EnvPolicy::None),
                _ => return Err(HydraEnvError::EnvPolicy { value: v }),
            },
        };
        Ok(HydraEnv {
            host_file: first(lookup, HOST_FILE),
            launcher: first(lookup, LAUNCHER).map(|(_, v)| v.trim().to_string()),
            launcher_exec: first(lookup, LAUNCHER_EXEC).map(|(_, v)| v),
            launcher_extra_args: launcher_extra_args(lookup),
            env_policy,
            label: lookup(PREFIX_DEFAULT).is_some(),
            port_range: PortRange::from_env(lookup)?,
        })
    }
}

/// The launcher's extra arguments. Hydra splits its variable on spaces (`strtok(" ")`: runs
/// of spaces are one separator, a tab is part of a word); `KAURI_LAUNCHER_ARGS` splits on
/// any white space, as it always has.
pub fn launcher_extra_args(lookup: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    match first(lookup, LAUNCHER_EXTRA_ARGS) {
        None => Vec::new(),
        Some(("KAURI_LAUNCHER_ARGS", v)) => v.split_whitespace().map(str::to_string).collect(),
        Some((_, v)) => v
            .split(' ')
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect(),
    }
}

/// The first of `names` that is set and not blank, with its name.
fn first(
    lookup: &dyn Fn(&str) -> Option<String>,
    names: &[&'static str],
) -> Option<(&'static str, String)> {
    names
        .iter()
        .find_map(|&n| lookup(n).filter(|v| !v.trim().is_empty()).map(|v| (n, v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<HydraEnv, HydraEnvError> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HydraEnv::read(&|k| map.get(k).cloned())
    }

    #[test]
    fn nothing_set_says_nothing() {
        assert_eq!(read(&[]).unwrap(), HydraEnv::default());
    }

    #[test]
    fn hydra_names_before_intel_names() {
        let e = read(&[
            ("I_MPI_HYDRA_HOST_FILE", "/b"),
            ("HYDRA_HOST_FILE", "/a"),
            ("HYDRA_BOOTSTRAP", "rsh"),
            ("HYDRA_LAUNCHER", "ssh"),
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC", "/x"),
        ])
        .unwrap();
        assert_eq!(e.host_file, Some(("HYDRA_HOST_FILE", "/a".to_string())));
        assert_eq!(e.launcher.as_deref(), Some("ssh"));
        assert_eq!(e.launcher_exec.as_deref(), Some("/x"));
        let e = read(&[("I_MPI_HYDRA_HOST_FILE", "/b"), ("HYDRA_HOST_FILE", "")]).unwrap();
        assert_eq!(
            e.host_file,
            Some(("I_MPI_HYDRA_HOST_FILE", "/b".to_string()))
        );
        let e = read(&[("HYDRA_BOOTSTRAP", "slurm")]).unwrap();
        assert_eq!(e.launcher.as_deref(), Some("slurm"));
    }

    #[test]
    fn extra_args_split_like_hydra() {
        let e = read(&[("HYDRA_LAUNCHER_EXTRA_ARGS", "  -o  Port=22\t2 -q ")]).unwrap();
        assert_eq!(e.launcher_extra_args, vec!["-o", "Port=22\t2", "-q"]);
        let e = read(&[
            ("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-i"),
            ("KAURI_LAUNCHER_ARGS", "-a\t-b"),
        ])
        .unwrap();
        assert_eq!(e.launcher_extra_args, vec!["-a", "-b"]);
        let e = read(&[("I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "-i x")]).unwrap();
        assert_eq!(e.launcher_extra_args, vec!["-i", "x"]);
    }

    #[test]
    fn env_policy_and_prefix() {
        assert_eq!(
            read(&[("HYDRA_ENV", "none")]).unwrap().env_policy,
            Some(EnvPolicy::None)
        );
        assert_eq!(
            read(&[("HYDRA_ENV", "all")]).unwrap().env_policy,
            Some(EnvPolicy::All)
        );
        let e = read(&[("HYDRA_ENV", "some")]).unwrap_err();
        assert_eq!(
            e,
            HydraEnvError::EnvPolicy {
                value: "some".into()
            }
        );
        assert_eq!(e.to_string(), "HYDRA_ENV=\"some\": use all or none");
        assert!(read(&[("MPIEXEC_PREFIX_DEFAULT", "")]).unwrap().label);
    }

    #[test]
    fn a_bad_port_range_is_one_line() {
        let e = read(&[("MPIEXEC_PORT_RANGE", "9000-9100")]).unwrap_err();
        assert!(matches!(&e, HydraEnvError::PortRange(p) if p.var == "MPIEXEC_PORT_RANGE"));
        let e = e.to_string();
        assert!(e.starts_with("MPIEXEC_PORT_RANGE=\"9000-9100\""), "{e}");
        assert!(!e.contains('\n'));
    }
}
