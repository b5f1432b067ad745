//! Stamps the build for `kauri --version` and `kauri -info`: `KAURI_GIT_COMMIT` (the
//! variable when set, else `git rev-parse --short HEAD` in a git checkout, else `unknown`) and
//! `KAURI_BUILD_DATE` (UTC, from `SOURCE_DATE_EPOCH` when set, for reproducible builds, else
//! now).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    stamp();
}

/// The output of `git ARGS`, trimmed, when git runs and succeeds.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn stamp() {
    println!("cargo:rerun-if-env-changed=KAURI_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let commit = std::env::var("KAURI_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            let c = git(&["rev-parse", "--short", "HEAD"])?;
            // Run again when HEAD moves: HEAD itself, the branch it names, packed refs.
            let mut watch = vec![git(&["rev-parse", "--git-path", "HEAD"])];
            if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watch.push(git(&["rev-parse", "--git-path", &r]));
            }
            watch.push(git(&["rev-parse", "--git-path", "packed-refs"]));
            for p in watch.into_iter().flatten() {
                if std::path::Path::new(&p).exists() {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
            Some(c)
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=KAURI_GIT_COMMIT={}", commit.trim());
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    println!("cargo:rustc-env=KAURI_BUILD_DATE={}", date(secs));
}

/// `YYYY-MM-DD` (UTC) of a Unix time (Howard Hinnant's civil-from-days).
fn date(secs: i64) -> String {
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
