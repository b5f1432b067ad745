//! Lays out kauri's hot code first in its text (`src/main.order`, see [`hot_order`]).
//!
//! Also stamps the build for `kauri --version` and `kauri -info`: `KAURI_GIT_COMMIT` (the
//! variable when set, else `git rev-parse --short HEAD` in a git checkout, else `unknown`) and
//! `KAURI_BUILD_DATE` (UTC, from `SOURCE_DATE_EPOCH` when set, for reproducible builds, else
//! now).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    hot_order();
    stamp();
}

/// Passes `src/main.order` to the linker (lld's `--symbol-ordering-file`): the functions a
/// short job runs are then laid out together at the start of kauri's text, so that its start
/// maps (and its exit unmaps) a few hundred kilobytes of it, not most of its 3.3 MB
/// (docs/performance.md, "The hot code laid out first"). Only where the file's names are this build's: a
/// release build for x86-64 Linux by the rustc the file was made for, linked by that rustc's
/// own linker (lld, the default there since Rust 1.90), not one the user chose. Otherwise the
/// build goes on without it, warned when the compiler differs.
fn hot_order() {
    const FILE: &str = "src/main.order";
    println!("cargo:rerun-if-changed={FILE}");
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("PROFILE") != "release" || var("TARGET") != "x86_64-unknown-linux-gnu" {
        return;
    }
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    if flags.contains("linker")
        || flags.contains("link-self-contained")
        || std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some()
    {
        return;
    }
    let Ok(text) = std::fs::read_to_string(FILE) else {
        return;
    };
    let made = text
        .lines()
        .find_map(|l| l.strip_prefix("# rustc: "))
        .unwrap_or("no rustc named");
    let rustc = Command::new(var("RUSTC"))
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if made.trim() != rustc {
        println!(
            "cargo:warning={FILE} was made for {made}, this is {rustc}: kauri's hot code is \
             not laid out first (contrib/tools/hot-order.py make)"
        );
        return;
    }
    let path = std::path::Path::new(&var("CARGO_MANIFEST_DIR")).join(FILE);
    println!(
        "cargo:rustc-link-arg-bin=kauri=-Wl,--symbol-ordering-file={}",
        path.display()
    );
    // Names the file has and this build has not (a function renamed or gone) are left out.
    println!("cargo:rustc-link-arg-bin=kauri=-Wl,--no-warn-symbol-ordering");
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
