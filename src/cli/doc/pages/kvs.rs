//! `kauri-kvs(1)`.

use super::{flag, with};
use crate::cli::doc::{Example, Item, OptSection, Page};

/// `kauri-kvs(1)`.
pub static KAURI_KVS: Page = Page {
    name: "kauri-kvs",
    section: 1,
    summary: "a kauri job's key-value store from a shell script running as a rank",
    synopsis: &[
        Item {
            label: "kauri kvs put KEY VALUE",
            help: "",
        },
        Item {
            label: "kauri kvs get KEY [--wait]",
            help: "",
        },
        Item {
            label: "kauri kvs fence | barrier",
            help: "",
        },
    ],
    description: &[
        "From a shell script running as a rank, kauri kvs reaches the job's key-value store\n\
         over the rank's own PMI connection (PMI_FD, or PMI_PORT and PMI_ID).",
    ],
    details: &[
        "Each call is one short PMI-1 session: init, the operation, finalize. Calls from one \
         rank share its PMI socket: run them one after another, not in parallel. A program \
         that starts kauri kvs must pass PMI_FD on (Python: subprocess's close_fds=False). A \
         rank may exit after any call, but a rank that exits while others wait in a fence it \
         never entered ends the job.",
    ],
    options: &[
        OptSection {
            title: "Commands",
            in_help: true,
            opts: &[
                with(
                    &["put"],
                    "KEY VALUE",
                    "publish a pair to every rank at once (no fence needed)",
                ),
                with(&["get"], "KEY", "print a value"),
                flag(
                    &["--wait"],
                    "with get: wait until some rank has put the key",
                ),
                flag(
                    &["fence"],
                    "wait until every rank has called fence (a job-wide barrier)",
                ),
                flag(&["barrier"], "the same"),
            ],
        },
        OptSection {
            title: "Options",
            in_help: true,
            opts: &[flag(&["-h", "--help"], "this text (on stdout)")],
        },
    ],
    environment: &[
        Item {
            label: "PMI_FD",
            help: "the rank's PMI socket, as kauri set it",
        },
        Item {
            label: "PMI_PORT, PMI_ID",
            help: "the same with -pmi-port",
        },
    ],
    environment_more: &[],
    exit_status: &[
        Item {
            label: "0",
            help: "done (get printed the value; -h printed the usage)",
        },
        Item {
            label: "1",
            help: "it failed: not a rank, no such key, the connection failed",
        },
        Item {
            label: "2",
            help: "bad usage",
        },
    ],
    examples: &[Example {
        command: "if [ \"$PMI_RANK\" = 0 ]; then kauri kvs put addr \"$(hostname)\"; fi; kauri kvs get addr --wait",
        what: "Rank 0 publishes its host; every rank reads it.",
    }],
    see_also: &["kauri(1)"],
    words: &["put", "get", "fence", "barrier"],
};
