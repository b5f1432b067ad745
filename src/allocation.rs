//! Hosts from a resource manager's allocation, used when the command line names none:
//! Slurm (`SLURM_JOB_NODELIST` with `SLURM_TASKS_PER_NODE`) and PBS (`PBS_NODEFILE`).

use crate::job::HostSpec;

/// The allocation kauri runs in, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `slurm` or `pbs`.
    pub manager: &'static str,
    /// Its hosts and slots.
    pub hosts: Vec<HostSpec>,
}

/// Reads the allocation from the environment.
pub fn detect() -> Result<Option<Allocation>, String> {
    if let Ok(list) =
        std::env::var("SLURM_JOB_NODELIST").or_else(|_| std::env::var("SLURM_NODELIST"))
    {
        let names = expand_hostlist(&list)?;
        let tasks = std::env::var("SLURM_TASKS_PER_NODE").unwrap_or_default();
        let slots = expand_tasks_per_node(&tasks, names.len())?;
        let hosts = names
            .into_iter()
            .zip(slots)
            .map(|(name, slots)| HostSpec { name, slots })
            .collect();
        return Ok(Some(Allocation {
            manager: "slurm",
            hosts,
        }));
    }
    if let Ok(path) = std::env::var("PBS_NODEFILE") {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read PBS_NODEFILE {path}: {e}"))?;
        let mut hosts: Vec<HostSpec> = Vec::new();
        for name in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            match hosts.iter_mut().find(|h| h.name == name) {
                Some(h) => h.slots += 1,
                None => hosts.push(HostSpec {
                    name: name.to_string(),
                    slots: 1,
                }),
            }
        }
        if hosts.is_empty() {
            return Err(format!("PBS_NODEFILE {path} lists no host"));
        }
        return Ok(Some(Allocation {
            manager: "pbs",
            hosts,
        }));
    }
    Ok(None)
}

/// Expands a Slurm host list: `node[01-03,07],login1` -> node01 node02 node03 node07 login1.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut parts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for p in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        match (p.find('['), p.rfind(']')) {
            (Some(o), Some(c)) if c > o => {
                let (prefix, suffix) = (&p[..o], &p[c + 1..]);
                for range in p[o + 1..c].split(',') {
                    match range.split_once('-') {
                        Some((a, b)) => {
                            let width = a.len();
                            let (x, y): (u64, u64) = (
                                a.parse()
                                    .map_err(|_| format!("bad host range {range:?} in {list:?}"))?,
                                b.parse()
                                    .map_err(|_| format!("bad host range {range:?} in {list:?}"))?,
                            );
                            if y < x || y - x > 1_000_000 {
                                return Err(format!("bad host range {range:?} in {list:?}"));
                            }
                            for n in x..=y {
                                out.push(format!("{prefix}{n:0width$}{suffix}"));
                            }
                        }
                        None => out.push(format!("{prefix}{range}{suffix}")),
                    }
                }
            }
            (None, None) => out.push(p.to_string()),
            _ => return Err(format!("bad host list {list:?}")),
        }
    }
    Ok(out)
}

/// Expands `SLURM_TASKS_PER_NODE` (`2(x3),1`) to one count per node; empty means 1 each.
pub fn expand_tasks_per_node(spec: &str, nodes: usize) -> Result<Vec<usize>, String> {
    if spec.trim().is_empty() {
        return Ok(vec![1; nodes]);
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let (n, rep) = match part.split_once("(x") {
            Some((n, r)) => (n, r.trim_end_matches(')')),
            None => (part, "1"),
        };
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("bad SLURM_TASKS_PER_NODE {spec:?}"))?;
        let rep: usize = rep
            .trim()
            .parse()
            .map_err(|_| format!("bad SLURM_TASKS_PER_NODE {spec:?}"))?;
        out.extend(std::iter::repeat_n(n.max(1), rep.min(1_000_000)));
    }
    if out.len() != nodes {
        return Err(format!(
            "SLURM_TASKS_PER_NODE {spec:?} does not match {nodes} node(s)"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists() {
        assert_eq!(expand_hostlist("localhost").unwrap(), vec!["localhost"]);
        assert_eq!(
            expand_hostlist("n[01-03,07],login1").unwrap(),
            vec!["n01", "n02", "n03", "n07", "login1"]
        );
        assert_eq!(expand_hostlist("a[9-10]b").unwrap(), vec!["a9b", "a10b"]);
        assert!(expand_hostlist("n[3-1]").is_err());
        assert!(expand_hostlist("n[1-").is_err());
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(
            expand_tasks_per_node("2(x3),1", 4).unwrap(),
            vec![2, 2, 2, 1]
        );
        assert_eq!(expand_tasks_per_node("", 2).unwrap(), vec![1, 1]);
        assert!(expand_tasks_per_node("2(x3)", 2).is_err());
        assert!(expand_tasks_per_node("x", 1).is_err());
    }
}
