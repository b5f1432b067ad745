//! `kauri-agent(1)`.

use super::{flag, with};
use crate::cli::doc::{Item, OptSection, Page};

/// `kauri-agent(1)`.
pub static KAURI_AGENT: Page = Page {
    name: "kauri-agent",
    section: 1,
    summary: "kauri's per-host process (internal)",
    synopsis: &[
        Item {
            label: "kauri agent --parent ADDR --id N --host NAME",
            help: "",
        },
        Item {
            label: "kauri agent --parent ADDR --slurm",
            help: "",
        },
    ],
    description: &[
        "kauri starts one agent on each other host of a job, through its launcher; \
                    it is not meant to be run by hand.",
    ],
    details: &[
        "The agent connects back to its parent (kauri, or the agent above it in the tree), \
         proves it holds the job key (from the variable KAURI_JOB_KEY, removed at once, or \
         the first line of its standard input), receives its part of the job, starts its own \
         child agents and its host's ranks, and relays: fence contributions up, merged \
         results down, output and reports up, standard input, signals and teardown down. It \
         exits when its ranks and children are done, or at once, killing its ranks, when its \
         parent disappears.",
    ],
    options: &[OptSection {
        title: "Arguments",
        in_help: true,
        opts: &[
            with(
                &["--parent"],
                "ADDR",
                "ip:port of the parent to connect back to",
            ),
            with(&["--id"], "N", "the agent's id in the tree"),
            with(
                &["--host"],
                "NAME",
                "the host name it stands for, as given to kauri",
            ),
            flag(
                &["--slurm"],
                "started by srun: the host is SLURMD_NODENAME (or this host's\n\
                 name), the id comes from the host",
            ),
            flag(
                &["--pmi-trace"],
                "log every PMI request and reply of this host's ranks\n\
                 (KAURI_PMI_TRACE, which a remote shell may not pass on)",
            ),
        ],
    }],
    environment: &[
        Item {
            label: "KAURI_JOB_KEY",
            help: "the job key (else read from the first line of standard input)",
        },
        Item {
            label: "KAURI_LOG",
            help: "the log filter (warn, info, debug), as kauri -v sets it",
        },
    ],
    environment_more: &[],
    exit_status: &[
        Item {
            label: "0",
            help: "its ranks and children are done",
        },
        Item {
            label: "1",
            help: "it could not reach or join its parent",
        },
        Item {
            label: "2",
            help: "bad arguments",
        },
    ],
    examples: &[],
    see_also: &["kauri(1)"],
    words: &[],
};
