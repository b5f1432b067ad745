//! `kauri-nameserver(1)`.

use super::{flag, with};
use crate::cli::doc::{Example, Item, Opt, OptSection, Page};

/// `kauri-nameserver(1)`.
pub static KAURI_NAMESERVER: Page = Page {
    name: "kauri-nameserver",
    section: 1,
    summary: "serve MPI published names to several kauri runs",
    synopsis: &[Item {
        label: "kauri nameserver [-port P] [-bind ADDR] [-key SECRET]",
        help: "",
    }],
    description: &[
        "A name server for MPI_Publish_name and MPI_Lookup_name across jobs: the \
                    kauri runs given -nameserver HOST[:PORT] (or KAURI_NAMESERVER) publish and \
                    look names up here. It runs in the foreground and prints one line, \
                    \"kauri nameserver listening on ADDR:PORT\", once it listens.",
    ],
    details: &[
        "A client's names are withdrawn when its connection closes. SIGINT or SIGTERM \
                end the server.",
    ],
    options: &[OptSection {
        title: "Options",
        in_help: true,
        opts: &[
            Opt {
                aliases: &["-p"],
                ..with(&["-port"], "P", "the TCP port (default 6392; 0: any)")
            },
            with(
                &["-bind"],
                "ADDR",
                "the address to listen on (default 0.0.0.0)",
            ),
            with(
                &["-key"],
                "SECRET",
                "clients must present this secret (or KAURI_NAMESERVER_KEY)",
            ),
            flag(&["-h", "-help"], "the usage and the limits"),
        ],
    }],
    environment: &[
        Item {
            label: "KAURI_NAMESERVER_KEY=S",
            help: "the secret, when -key is not given",
        },
        Item {
            label: "KAURI_NAMESERVER_MAX_CLIENTS=N",
            help: "clients served at once (default 1024)",
        },
        Item {
            label: "KAURI_NAMESERVER_MAX_NAMES=N",
            help: "names published at once (default 16384)",
        },
        Item {
            label: "KAURI_NAMESERVER_MAX_NAMES_PER_CLIENT=N",
            help: "names one client may publish (default 1024)",
        },
    ],
    environment_more: &[],
    exit_status: &[
        Item {
            label: "0",
            help: "ended by SIGINT or SIGTERM, or -help",
        },
        Item {
            label: "1",
            help: "it cannot listen on the address",
        },
        Item {
            label: "2",
            help: "bad arguments or limits",
        },
    ],
    examples: &[
        Example {
            command: "kauri nameserver -port 6392 -key s3cret &",
            what: "Start a server.",
        },
        Example {
            command: "KAURI_NAMESERVER_KEY=s3cret kauri -nameserver host1 -n 2 ./server",
            what: "A job that publishes through it.",
        },
    ],
    see_also: &["kauri(1)"],
    words: &[],
};
