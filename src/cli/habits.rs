//! Other launchers' spellings: the options an Open MPI user (`mpirun`, `prterun`) or a Hydra
//! user types out of habit, each taken as what it means in kauri, or refused in one line that
//! names kauri's own spelling.
//!
//! Taken: `-H` and `--host` (`-hosts`), `-c` (`-n`), `-N` and `--npernode` (`-ppn`), `--map-by
//! ppr:N:node` (`-ppn N`), `-x NAME[=VALUE]` (`-genv`), `--mca` and `--gmca` (`OMPI_MCA_*` in
//! every rank's environment, as `mpirun` passes them), `--tag-output` (`-l`), `--timeout` and
//! Hydra's `-timeout` (`MPIEXEC_TIMEOUT`), `--merge-stderr-to-stdout`, `--display-map` and
//! Hydra's older `-print-rank-map`, Hydra's `-print-all-exitcodes`, and what kauri always does
//! anyway (`--oversubscribe`, `--allow-run-as-root`, `--stdin 0`). Refused with kauri's
//! spelling: `--output-filename`, `--stdin` of another rank, and Hydra's `-gdb`.

use super::{err, nprocs, ppn, Parser, Segment, UsageError, Words};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

impl Parser {
    /// An option of another launcher's (module doc); `false` for another name.
    pub(super) fn habit_option(
        &mut self,
        name: &str,
        w: &mut Words,
        seg: &mut Segment,
    ) -> Result<bool, UsageError> {
        match name {
            "-c" => {
                seg.set_nprocs(name, nprocs(name, &w.value(name)?)?)?;
            }
            "-N" | "-npernode" => {
                self.spec.mapping_asked = true;
                self.spec.ppn = Some(ppn(&w.value(name)?)?);
            }
            "-x" => {
                // Bytes as given: the value (or kauri's own, `-x NAME`) need not be UTF-8.
                let v = w.value_os(name)?;
                let b = v.as_bytes();
                let (k, val) = match b.iter().position(|&c| c == b'=') {
                    Some(i) => (
                        OsStr::from_bytes(&b[..i]).to_os_string(),
                        Some(OsStr::from_bytes(&b[i + 1..]).to_os_string()),
                    ),
                    None => (v.clone(), std::env::var_os(&v)),
                };
                if k.is_empty() {
                    return err(format!(
                        "-x {:?}: expected NAME or NAME=VALUE",
                        v.to_string_lossy()
                    ));
                }
                // `-x NAME` passes kauri's own value of NAME; with none, nothing is passed,
                // and a line says so (as Open MPI's `mpirun` does).
                match val {
                    Some(val) => self.spec.genv.push((k, val)),
                    None => self.spec.warnings.push(format!(
                        "-x {}: kauri's environment has no such variable; the ranks do not get it",
                        k.to_string_lossy()
                    )),
                }
            }
            "-mca" | "-gmca" => {
                let k = w.value(name)?;
                let v = w
                    .next_word()
                    .ok_or_else(|| UsageError(format!("{name} needs KEY VALUE")))?;
                self.spec.genv.push((format!("OMPI_MCA_{k}").into(), v));
            }
            "-tag-output" => self.spec.label = true,
            "-timeout" => {
                let v = w.value(name)?;
                self.spec.timeout = Some(timeout(&v)?);
                self.timeout_given = true;
            }
            "-merge-stderr-to-stdout" => self.spec.output.merge_stderr = true,
            "-display-map" | "-print-rank-map" => self.spec.display_map = true,
            "-print-all-exitcodes" => self.spec.print_exit_codes = true,
            "-oversubscribe" | "-allow-run-as-root" => {}
            "-stdin" => {
                let v = w.value(name)?;
                if v != "0" && v != "rank0" {
                    return err(format!(
                        "--stdin {v:?}: kauri gives its stdin to rank 0 only (--stdin 0); for \
                         none, give it none: kauri ... < /dev/null"
                    ));
                }
            }
            "-output-filename" => {
                let d = w.value(name)?;
                return err(format!(
                    "--output-filename: kauri writes each rank's output to a file named by a \
                     pattern: -outfile-pattern {d}/rank.%r.out -errfile-pattern {d}/rank.%r.err"
                ));
            }
            "-gdb" => {
                return err(
                    "-gdb: kauri has no debugger front end; run each rank under one \
                     (kauri -n 2 gdb -batch -ex run -ex bt --args ./app) or attach one \
                     through MPIR (contrib/gdb/mpir-proctable.gdb)",
                )
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `--map-by ppr:N:node` (Open MPI's N processes per node) as `-ppn N`; `None` for another
    /// value of `--map-by`, an error for `ppr` per anything but a node.
    pub(super) fn map_by_ppr(&mut self, v: &str) -> Result<Option<()>, UsageError> {
        let Some(rest) = v.strip_prefix("ppr:") else {
            return Ok(None);
        };
        match rest.split(':').collect::<Vec<_>>().as_slice() {
            [n, "node" | "host"] => {
                self.spec.mapping_asked = true;
                self.spec.ppn = Some(ppn(n)?);
                Ok(Some(()))
            }
            [_, obj, ..] => err(format!(
                "--map-by {v}: kauri takes ppr:N:node (-ppn N); to deal each host's ranks \
                 over its {obj}s, -map-by {obj} with -ppn N"
            )),
            _ => err(format!("--map-by {v}: expected ppr:N:node")),
        }
    }
}

/// The value of `--timeout` (or Hydra's `-timeout`): whole seconds, as `MPIEXEC_TIMEOUT`.
fn timeout(v: &str) -> Result<std::time::Duration, UsageError> {
    match v.trim().parse::<u64>() {
        Ok(s) if s > 0 && s <= super::SECS_MAX => Ok(std::time::Duration::from_secs(s)),
        _ => err(format!(
            "--timeout {v:?}: a number of seconds from 1 to {}",
            super::SECS_MAX
        )),
    }
}

/// `MPIEXEC_TIMEOUT` (Hydra's): whole seconds, 0 or unset for none.
pub(super) fn timeout_from_env() -> Result<Option<std::time::Duration>, UsageError> {
    let max = super::SECS_MAX;
    match std::env::var("MPIEXEC_TIMEOUT") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u128>() {
            Ok(0) => Ok(None),
            Ok(s) if s > max as u128 => super::err(format!(
                "MPIEXEC_TIMEOUT={}: more than the {max} seconds a time may be",
                crate::console::quoted(&v)
            )),
            Ok(s) => Ok(Some(std::time::Duration::from_secs(s as u64))),
            Err(_) => super::err(format!(
                "MPIEXEC_TIMEOUT={} is not a number of seconds",
                crate::console::quoted(&v)
            )),
        },
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{parse, Command};
    use crate::plan::job::JobSpec;

    fn words(args: &str) -> Vec<String> {
        args.split_whitespace().map(str::to_string).collect()
    }

    fn run(args: &str) -> JobSpec {
        match parse(&words(args)).unwrap() {
            Command::Run(s) => *s,
            other => panic!("{args}: {other:?}"),
        }
    }

    fn fails(args: &str) -> String {
        parse(&words(args)).unwrap_err().0
    }

    fn hosts(s: &JobSpec) -> Vec<(String, usize)> {
        s.hosts.iter().map(|h| (h.name.clone(), h.slots)).collect()
    }

    #[test]
    fn open_mpis_host_and_counts_are_kauris() {
        let s = run("-H localhost:2 -n 2 hostname");
        assert_eq!(hosts(&s), [("localhost".to_string(), 2)]);
        assert_eq!(s.size(), 2);
        assert_eq!(hosts(&run("--host a,b x")).len(), 2);
        assert_eq!(run("-c 3 x").size(), 3);
        let s = run("-N 3 -H a,b x");
        assert_eq!((s.ppn, s.size()), (Some(3), 6), "-N is per node");
        assert_eq!(run("--npernode 2 -H a,b x").size(), 4);
        assert_eq!(run("--map-by ppr:2:node -H a,b,c x").size(), 6);
        let e = fails("--map-by ppr:2:socket -n 2 x");
        assert!(e.contains("-map-by socket with -ppn N"), "{e}");
        assert_eq!(
            run("-map-by node -n 2 x").size(),
            2,
            "kauri's own values stay"
        );
    }

    #[test]
    fn a_count_given_twice_is_refused_and_h_is_help_only_alone() {
        for args in ["-n 2 -l -n 3 x", "-np 2 -n 2 x", "-c 2 -n 2 x"] {
            assert!(
                fails(args).contains("given twice"),
                "{args}: {}",
                fails(args)
            );
        }
        assert_eq!(run("-n 2 x : -n 3 y").size(), 5, "one per segment");
        assert_eq!(parse(&words("-h")).unwrap(), Command::Help);
        assert_eq!(parse(&words("--help")).unwrap(), Command::Help);
        let e = fails("-h -n 2 x");
        assert!(e.contains("-h") && e.contains("-H"), "{e}");
        let s = run("-n 2 x -h");
        assert_eq!(s.apps[0].args, ["-h"], "after the program, the program's");
    }

    #[test]
    fn open_mpis_environment_and_mca_go_to_every_rank() {
        std::env::set_var("KAURI_HABITS_TEST", "from-kauri");
        let s = run("-x FOO=bar -x KAURI_HABITS_TEST -x NOT_SET_ANYWHERE_X -n 1 x");
        assert!(s.genv.contains(&("FOO".into(), "bar".into())));
        assert!(s
            .genv
            .contains(&("KAURI_HABITS_TEST".into(), "from-kauri".into())));
        assert!(!s.genv.iter().any(|(k, _)| k == "NOT_SET_ANYWHERE_X"));
        // Not silently: one warning names it (Open MPI: `could not find environment variable`).
        assert_eq!(
            s.warnings,
            ["-x NOT_SET_ANYWHERE_X: kauri's environment has no such variable; the ranks do not \
              get it"]
        );
        assert!(fails("-x =v -n 1 x").contains("NAME"));
        let s = run("--mca btl tcp,self --gmca pml ob1 -n 1 x");
        assert!(s.genv.contains(&("OMPI_MCA_btl".into(), "tcp,self".into())));
        assert!(s.genv.contains(&("OMPI_MCA_pml".into(), "ob1".into())));
    }

    #[test]
    fn open_mpis_output_and_run_options() {
        assert!(run("--tag-output -n 1 x").label);
        assert!(run("--merge-stderr-to-stdout -n 1 x").output.merge_stderr);
        assert!(run("--display-map -n 1 x").display_map);
        assert!(run("-print-rank-map -n 1 x").display_map);
        assert!(run("-print-all-exitcodes -n 1 x").print_exit_codes);
        let s = run("--oversubscribe --allow-run-as-root --stdin 0 -n 1 x");
        assert_eq!(s.size(), 1);
        assert_eq!(
            run("--timeout 30 -n 1 x").timeout,
            Some(std::time::Duration::from_secs(30))
        );
        assert_eq!(
            run("-timeout 5 -n 1 x").timeout,
            Some(std::time::Duration::from_secs(5))
        );
        assert!(fails("--timeout soon -n 1 x").contains("number of seconds"));
    }

    #[test]
    fn what_kauri_does_otherwise_is_refused_with_its_spelling() {
        let e = fails("--output-filename out -n 2 x");
        assert!(e.contains("-outfile-pattern out/rank.%r.out"), "{e}");
        let e = fails("--stdin all -n 2 x");
        assert!(e.contains("rank 0 only"), "{e}");
        let e = fails("-gdb -n 2 x");
        assert!(e.contains("gdb -batch"), "{e}");
        for e in [
            fails("--output-filename out -n 2 x"),
            fails("--stdin none -n 2 x"),
            fails("-gdb -n 2 x"),
        ] {
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
