//! Which launcher starts the agents ([`LauncherKind`]) and every fact about it that the rest
//! of kauri decides by: its name on the command line, its default program, whether it is a
//! resource manager's, how it batches agents, how the job key reaches an agent, whether its
//! hosts are simulated.
//!
//! Plain data and decisions: no I/O. What needs the machine (finding the program, running
//! it) is each launcher's own file in `launch` ([`crate::launch::Launcher`]). Every fact is an
//! exhaustive `match`, so a new variant does not compile until each fact is decided for it.

use serde::{Deserialize, Serialize};

/// A launcher, as `-launcher` names it. It travels in the plan to every agent (one variant
/// index on the wire). The default, when neither `-launcher` nor an allocation names one, is
/// ssh.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LauncherKind {
    /// `ssh HOST kauri agent …`, the key on stdin.
    #[default]
    Ssh,
    /// `rsh HOST kauri agent …`, the key on stdin.
    Rsh,
    /// One `srun` step for every agent, inside a Slurm allocation.
    Slurm,
    /// `qrsh -inherit` per host, inside a Grid Engine parallel environment.
    Sge,
    /// `blaunch` per host, inside an LSF job.
    Lsf,
    /// `pbs_tmrsh` per host, inside a PBS job.
    Pbs,
    /// Agents as local processes, one per simulated host.
    Fork,
}

/// The program a launcher runs when `-launcher-exec` names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// A program by name (found in `PATH`, or where its launcher's file looks first).
    Named(&'static str),
    /// kauri itself (the fork launcher's agents are kauri processes on this machine).
    Kauri,
}

/// How a launcher's processes stand for agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// One process per agent, which knows its id (`--id N --host NAME`).
    OnePerAgent,
    /// One process starts every agent (one `srun` step); each agent knows its host, not its
    /// id (`--slurm`), and its parent finds it by the host's name.
    AllInOne,
}

/// How the job key reaches an agent (never on a command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyTravel {
    /// In the environment (`KAURI_JOB_KEY`), which the launcher carries to the agent.
    Environment,
    /// On the first line of the agent's stdin: the launcher (a remote shell) carries no
    /// environment.
    StdinLine,
}

/// Every launcher, in the order `-launcher`'s help and `kauri -info` list them.
pub const ALL: [LauncherKind; 7] = [
    LauncherKind::Ssh,
    LauncherKind::Rsh,
    LauncherKind::Slurm,
    LauncherKind::Sge,
    LauncherKind::Lsf,
    LauncherKind::Pbs,
    LauncherKind::Fork,
];

/// Every launcher's name, as `-launcher` takes it, in the order of [`ALL`].
pub const NAMES: [&str; ALL.len()] = {
    let mut names = [""; ALL.len()];
    let mut i = 0;
    while i < ALL.len() {
        names[i] = ALL[i].as_str();
        i += 1;
    }
    names
};

impl LauncherKind {
    /// Its name, as `-launcher` takes it and `kauri --status` prints it.
    pub const fn as_str(self) -> &'static str {
        match self {
            LauncherKind::Ssh => "ssh",
            LauncherKind::Rsh => "rsh",
            LauncherKind::Slurm => "slurm",
            LauncherKind::Sge => "sge",
            LauncherKind::Lsf => "lsf",
            LauncherKind::Pbs => "pbs",
            LauncherKind::Fork => "fork",
        }
    }

    /// The program that starts agents when `-launcher-exec` names none.
    pub fn default_program(self) -> Program {
        match self {
            LauncherKind::Ssh => Program::Named("ssh"),
            LauncherKind::Rsh => Program::Named("rsh"),
            LauncherKind::Slurm => Program::Named("srun"),
            LauncherKind::Sge => Program::Named("qrsh"),
            LauncherKind::Lsf => Program::Named("blaunch"),
            LauncherKind::Pbs => Program::Named("pbs_tmrsh"),
            LauncherKind::Fork => Program::Kauri,
        }
    }

    /// The launcher used instead when this one's program is not installed here and
    /// `-launcher-exec` names none: PBS without `pbs_tmrsh` (Torque, say) uses ssh, as Hydra
    /// built without TM does.
    pub fn instead_when_missing(self) -> Option<LauncherKind> {
        match self {
            LauncherKind::Pbs => Some(LauncherKind::Ssh),
            LauncherKind::Ssh
            | LauncherKind::Rsh
            | LauncherKind::Slurm
            | LauncherKind::Sge
            | LauncherKind::Lsf
            | LauncherKind::Fork => None,
        }
    }

    /// Whether it is a resource manager's own launcher (`srun`, `qrsh -inherit`, `blaunch`,
    /// `pbs_tmrsh`): it starts agents inside the job's allocation, so the manager accounts for
    /// them and kills them with the job. The front end starts every agent itself, as Hydra
    /// does: the tree is flat.
    pub fn is_resource_manager(self) -> bool {
        match self {
            LauncherKind::Slurm | LauncherKind::Sge | LauncherKind::Lsf | LauncherKind::Pbs => true,
            LauncherKind::Ssh | LauncherKind::Rsh | LauncherKind::Fork => false,
        }
    }

    /// How its processes stand for agents.
    pub fn batching(self) -> Batching {
        match self {
            LauncherKind::Slurm => Batching::AllInOne,
            LauncherKind::Ssh
            | LauncherKind::Rsh
            | LauncherKind::Sge
            | LauncherKind::Lsf
            | LauncherKind::Pbs
            | LauncherKind::Fork => Batching::OnePerAgent,
        }
    }

    /// How the job key reaches its agents.
    pub fn key_travel(self) -> KeyTravel {
        match self {
            LauncherKind::Ssh | LauncherKind::Rsh => KeyTravel::StdinLine,
            LauncherKind::Slurm
            | LauncherKind::Sge
            | LauncherKind::Lsf
            | LauncherKind::Pbs
            | LauncherKind::Fork => KeyTravel::Environment,
        }
    }

    /// Whether its hosts are simulated on this machine (`fork`): host names are labels, not
    /// names to resolve, and every host's address is loopback.
    pub fn simulates_hosts(self) -> bool {
        match self {
            LauncherKind::Fork => true,
            LauncherKind::Ssh
            | LauncherKind::Rsh
            | LauncherKind::Slurm
            | LauncherKind::Sge
            | LauncherKind::Lsf
            | LauncherKind::Pbs => false,
        }
    }

    /// Whether the front end serves the host it runs on itself, in its own process, rather
    /// than starting an agent there: not under Slurm, whose one step starts an agent on every
    /// node of the job.
    pub fn front_end_serves_its_host(self) -> bool {
        match self {
            LauncherKind::Slurm => false,
            LauncherKind::Ssh
            | LauncherKind::Rsh
            | LauncherKind::Sge
            | LauncherKind::Lsf
            | LauncherKind::Pbs
            | LauncherKind::Fork => true,
        }
    }

    /// Whether a host name it is given may need the resolver to tell whether it is this
    /// machine: the names a user typed for ssh and rsh. A resource manager's node names are
    /// its machines' own; a simulated host's name is a label.
    pub fn resolves_host_names(self) -> bool {
        match self {
            LauncherKind::Ssh | LauncherKind::Rsh => true,
            LauncherKind::Slurm
            | LauncherKind::Sge
            | LauncherKind::Lsf
            | LauncherKind::Pbs
            | LauncherKind::Fork => false,
        }
    }

    /// Whether the front end, at its end, waits for its launcher processes to end: a resource
    /// manager's launcher tells the manager how its agent ended (a killed `qrsh -inherit`
    /// fails the whole Grid Engine job), and a fork launcher's agents are the front end's
    /// children, so nothing of the run outlives it.
    pub fn waits_for_launchers_at_end(self) -> bool {
        self.is_resource_manager() || self.simulates_hosts()
    }
}

impl std::fmt::Display for LauncherKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `-launcher` name kauri does not know; its line lists the names it knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown launcher {name:?} ({})", NAMES.join(", "))]
pub struct UnknownLauncher {
    /// The name asked for.
    pub name: String,
}

impl std::str::FromStr for LauncherKind {
    type Err = UnknownLauncher;

    /// A launcher by its `-launcher` name; an unknown name is an error that lists them all.
    fn from_str(name: &str) -> Result<LauncherKind, UnknownLauncher> {
        ALL.into_iter()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| UnknownLauncher {
                name: name.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_an_unknown_one_is_refused() {
        for k in ALL {
            assert_eq!(k.as_str().parse::<LauncherKind>(), Ok(k));
            assert_eq!(k.to_string(), k.as_str());
        }
        assert_eq!(NAMES, ["ssh", "rsh", "slurm", "sge", "lsf", "pbs", "fork"]);
        let e = "telnet".parse::<LauncherKind>().unwrap_err();
        assert_eq!(
            e,
            UnknownLauncher {
                name: "telnet".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "unknown launcher \"telnet\" (ssh, rsh, slurm, sge, lsf, pbs, fork)"
        );
        assert!("SSH".parse::<LauncherKind>().is_err());
        assert_eq!(LauncherKind::default(), LauncherKind::Ssh);
    }

    #[test]
    fn the_facts_of_each_launcher() {
        use LauncherKind::*;
        let rm: Vec<_> = ALL
            .into_iter()
            .filter(|k| k.is_resource_manager())
            .collect();
        assert_eq!(rm, [Slurm, Sge, Lsf, Pbs]);
        let waits: Vec<_> = ALL
            .into_iter()
            .filter(|k| k.waits_for_launchers_at_end())
            .collect();
        assert_eq!(waits, [Slurm, Sge, Lsf, Pbs, Fork]);
        assert_eq!(Slurm.batching(), Batching::AllInOne);
        assert_eq!(Sge.batching(), Batching::OnePerAgent);
        assert_eq!(Ssh.key_travel(), KeyTravel::StdinLine);
        assert_eq!(Rsh.key_travel(), KeyTravel::StdinLine);
        assert_eq!(Lsf.key_travel(), KeyTravel::Environment);
        assert_eq!(Fork.default_program(), Program::Kauri);
        assert_eq!(Slurm.default_program(), Program::Named("srun"));
        assert_eq!(Rsh.default_program(), Program::Named("rsh"));
        assert_eq!(Pbs.instead_when_missing(), Some(Ssh));
        assert_eq!(Sge.instead_when_missing(), None);
        assert!(Fork.simulates_hosts() && !Ssh.simulates_hosts());
        assert!(!Slurm.front_end_serves_its_host() && Sge.front_end_serves_its_host());
        let resolves: Vec<_> = ALL
            .into_iter()
            .filter(|k| k.resolves_host_names())
            .collect();
        assert_eq!(resolves, [Ssh, Rsh]);
    }

    #[test]
    fn it_travels_as_one_small_number() {
        let bytes = bincode::serialize(&LauncherKind::Fork).unwrap();
        assert!(bytes.len() <= 4, "{bytes:?}");
        let back: LauncherKind = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, LauncherKind::Fork);
        assert!(bincode::deserialize::<LauncherKind>(&[7, 0, 0, 0]).is_err());
    }
}
