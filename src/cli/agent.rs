//! `kauri agent …`'s command line, which the launchers write (`--parent ADDR (--id N --host
//! NAME | --slurm) [--pmi-trace]`), read into the [`AgentArgs`] the agent runs with.

use crate::tree::agent::AgentArgs;

/// Parses `--parent ADDR (--id N --host NAME | --slurm) [--pmi-trace]`.
pub fn parse(args: &[String]) -> Result<AgentArgs, String> {
    let (mut parent, mut id, mut host, mut slurm) = (None, None, None, false);
    let mut pmi_trace = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        // The page's table is the one list of arguments (`kauri --help-man kauri-agent`).
        if super::doc::KAURI_AGENT.find(a).is_none() {
            return Err(format!("unknown agent argument {a}"));
        }
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--parent" => parent = Some(val()?),
            "--id" => id = Some(val()?.parse::<u32>().map_err(|_| "bad --id".to_string())?),
            "--host" => host = Some(val()?),
            "--slurm" => slurm = true,
            "--pmi-trace" => pmi_trace = true,
            other => return Err(format!("unknown agent argument {other}")),
        }
    }
    let parent = parent.ok_or("--parent is required")?;
    if slurm {
        let host =
            std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| crate::os::hostname::local_host());
        return Ok(AgentArgs {
            parent,
            id: None,
            host,
            pmi_trace,
        });
    }
    Ok(AgentArgs {
        parent,
        id: Some(id.ok_or("--id is required")?),
        host: host.ok_or("--host is required")?,
        pmi_trace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every argument of the `kauri-agent` page is parsed, and one outside it is unknown.
    #[test]
    fn every_page_argument_is_parsed() {
        for o in super::super::doc::KAURI_AGENT.opts() {
            for name in o.all_names() {
                let mut a = vec![name.to_string()];
                a.extend((0..o.arg.words()).map(|_| "1".to_string()));
                if let Err(e) = parse(&a) {
                    assert!(!e.contains("unknown"), "{a:?}: {e}");
                }
            }
        }
        let a: Vec<String> = ["--parent", "h:1", "--id", "2", "--host", "n"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            parse(&a),
            Ok(AgentArgs {
                parent: "h:1".into(),
                id: Some(2),
                host: "n".into(),
                pmi_trace: false,
            })
        );
        let bad = vec!["--nope".to_string()];
        assert!(parse(&bad).unwrap_err().contains("unknown"));
    }
}
