//! `kauri agent …`'s command line, which the launchers write (`--parent ADDR (--id N --host
//! NAME | --slurm) [--pmi-trace]`), read into the [`AgentArgs`] the agent runs with.

use crate::tree::agent::AgentArgs;

/// A mistake on `kauri agent`'s command line (exit status 2); each prints the line after
/// `kauri agent: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentUsageError {
    /// An argument the `kauri-agent` page does not list.
    #[error("unknown agent argument {0}")]
    Unknown(String),
    /// An argument without its value.
    #[error("{0} needs a value")]
    NeedsValue(String),
    /// `--id` with something else than a number.
    #[error("bad --id")]
    BadId,
    /// A required argument is missing (`--parent`, `--id`, `--host`).
    #[error("{0} is required")]
    Required(&'static str),
}

/// Parses `--parent ADDR (--id N --host NAME | --slurm) [--pmi-trace]`.
pub fn parse(args: &[String]) -> Result<AgentArgs, AgentUsageError> {
    let (mut parent, mut id, mut host, mut slurm) = (None, None, None, false);
    let mut pmi_trace = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        // The page's table is the one list of arguments (`kauri --help-man kauri-agent`).
        if super::doc::KAURI_AGENT.find(a).is_none() {
            return Err(AgentUsageError::Unknown(a.clone()));
        }
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| AgentUsageError::NeedsValue(a.clone()))
        };
        match a.as_str() {
            "--parent" => parent = Some(val()?),
            "--id" => id = Some(val()?.parse::<u32>().map_err(|_| AgentUsageError::BadId)?),
            "--host" => host = Some(val()?),
            "--slurm" => slurm = true,
            "--pmi-trace" => pmi_trace = true,
            other => return Err(AgentUsageError::Unknown(other.to_string())),
        }
    }
    let parent = parent.ok_or(AgentUsageError::Required("--parent"))?;
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
        id: Some(id.ok_or(AgentUsageError::Required("--id"))?),
        host: host.ok_or(AgentUsageError::Required("--host"))?,
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
                    assert!(!matches!(e, AgentUsageError::Unknown(_)), "{a:?}: {e}");
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
        assert_eq!(parse(&bad), Err(AgentUsageError::Unknown("--nope".into())));
    }

    /// Each mistake prints the line `kauri agent` printed when its errors were text.
    #[test]
    fn each_usage_error_prints_its_line() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (a, line) in [
            (&["--nope"][..], "unknown agent argument --nope"),
            (&["--parent"][..], "--parent needs a value"),
            (&["--id", "x"][..], "bad --id"),
            (&["--id", "1"][..], "--parent is required"),
            (&["--parent", "h:1", "--host", "n"][..], "--id is required"),
            (&["--parent", "h:1", "--id", "1"][..], "--host is required"),
        ] {
            assert_eq!(parse(&args(a)).unwrap_err().to_string(), line, "{a:?}");
        }
    }
}
