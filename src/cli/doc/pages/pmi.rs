//! `kauri-pmi(1)`.

use super::{flag, with};
use crate::cli::doc::{Example, Item, Opt, OptSection, Page, Values};

/// `kauri-pmi(1)`: `kauri pmi`, a PMI client for checking a launcher's PMI.
pub static KAURI_PMI: Page = Page {
    name: "kauri-pmi",
    section: 1,
    summary: "check a launcher's PMI as every rank of a job",
    synopsis: &[Item {
        label: "kauri pmi [OPTIONS] barrier | exchange [--size BYTES] [--count N] | get KEY",
        help: "",
    }],
    description: &[
        "A PMI client for checking a launcher's PMI: run it as every rank of a job, under any\n\
         launcher (kauri, mpiexec.hydra, srun), to tell whose PMI is broken.",
    ],
    details: &[
        "Methods: pmi1 is the PMI-1 wire protocol on PMI_FD or PMI_PORT and PMI_ID (MPICH's \
         simple PMI: Hydra, kauri, srun --mpi=pmi2); pmi2 the PMI-2 wire protocol on the same; \
         libpmi2 Slurm's PMI-2 library, loaded at run time (see --library), which finds its \
         server in PMI_FD (and PMI_RANK, PMI_JOBID) as srun --mpi=pmi2 and kauri set them; pmix \
         the OpenPMIx client library (PMIx_Init, ...), which needs the PMIX_* variables of a \
         PMIx server (kauri --pmi=pmix, srun --mpi=pmix); auto (the default) takes pmix when \
         PMIX_NAMESPACE is set, else pmi1 when PMI_FD or PMI_PORT is set (every PMI wire \
         server speaks PMI-1; ask for pmi2 by name).",
        "With -v, the wire messages of pmi1 and pmi2 are printed as sent and received; libpmi2 \
         and pmix keep their wire inside the library, so their calls and results are printed \
         instead. On the server's side, KAURI_PMI_TRACE=1 (or kauri -v -v) makes kauri log \
         every rank's requests and replies.",
    ],
    options: &[
        OptSection {
            title: "Subcommands",
            in_help: true,
            opts: &[
                flag(
                    &["barrier"],
                    "init, one fence, finalize; rank 0 prints the job's size, the\n\
                     method and the fence's time",
                ),
                flag(
                    &["exchange"],
                    "every rank puts N keys (--count, default 1) of BYTES bytes\n\
                     (--size, default 64), fences, then gets every rank's keys and\n\
                     checks each value's content; rank 0 prints one summary line\n\
                     (ranks, method, bytes, times). Keys are kauri.pmi.RANK.I",
                ),
                with(
                    &["get"],
                    "KEY",
                    "every rank reads KEY and prints its value: for pmi1 a key of\n\
                     the job's KVS (PMI_process_mapping); for pmi2 and libpmi2 a\n\
                     job attribute (PMI_process_mapping, universeSize), else a key\n\
                     of the KVS; for pmix a key of the job's namespace\n\
                     (pmix.job.size, pmix.univ.size, pmix.local.peers)",
                ),
            ],
        },
        OptSection {
            title: "Options",
            in_help: true,
            opts: &[
                Opt {
                    aliases: &[],
                    values: Values::Words(&["auto", "pmi1", "pmi2", "libpmi2", "pmix"]),
                    ..with(
                        &["-m", "--method"],
                        "M",
                        "how to reach the PMI server: auto (default), pmi1, pmi2,\nlibpmi2 or pmix",
                    )
                },
                Opt {
                    values: Values::File,
                    ..with(
                        &["--library"],
                        "PATH",
                        "the library of --method libpmi2 (default libpmi2.so.0, found\n\
                     where the dynamic linker looks)",
                    )
                },
                flag(
                    &["-v", "--verbose"],
                    "print on stderr, with the time (UTC) and the rank, every\n\
                 message sent (->) and received (<-) for pmi1 and pmi2; for\n\
                 libpmi2 and pmix every library call and its result",
                ),
                flag(
                    &["--timing"],
                    "every rank prints its time in each phase: init, put, fence,\nget, finalize",
                ),
                with(
                    &["--size"],
                    "BYTES",
                    "exchange: the size of each value (default 64)",
                ),
                with(
                    &["--count"],
                    "N",
                    "exchange: the keys each rank puts (default 1)",
                ),
                flag(&["-h", "--help"], "this text"),
            ],
        },
    ],
    environment: &[],
    environment_more: &[],
    exit_status: &[
        Item {
            label: "0",
            help: "every call succeeded and every value read back was the one put",
        },
        Item {
            label: "1",
            help: "a call failed or a value was wrong: one line on stderr says which rank,\n\
                   which call or key (a rank that fails before its fence also asks the\n\
                   server to abort the job, so that the others do not wait in it)",
        },
        Item {
            label: "2",
            help: "a bad command line",
        },
    ],
    examples: &[
        Example {
            command: "kauri -n 4 kauri pmi exchange",
            what: "Check kauri's PMI.",
        },
        Example {
            command: "mpiexec.hydra -n 4 kauri pmi --method pmi2 exchange --size 512",
            what: "Check Hydra's PMI-2 server.",
        },
        Example {
            command: "srun --mpi=pmi2 -n 4 kauri pmi --method libpmi2 -v barrier",
            what: "Check Slurm's PMI-2 plugin through its own library, with every call shown.",
        },
        Example {
            command: "kauri --pmi=pmix -n 2 kauri pmi get pmix.job.size",
            what: "Read a key of a PMIx job.",
        },
    ],
    see_also: &["kauri(1)", "mpiexec.hydra(1)", "srun(1)"],
    words: &["barrier", "exchange", "get"],
};
