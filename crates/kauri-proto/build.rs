//! Finds where the OpenPMIx library lies (Debian `libpmix-dev`) for the PMIx server in
//! `src/pmix`, which loads it at run time (`dlopen`, so that a run can be served by the
//! OpenPMIx its programs carry): `pkg-config pmix` gives its directory, passed on as
//! `KAURI_PMIX_LIBDIR`, a place to look after the dynamic linker's own path.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let libdir = Command::new("pkg-config")
        .args(["--variable=libdir", "pmix"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|d| !d.is_empty());
    if let Some(dir) = libdir {
        println!("cargo:rustc-env=KAURI_PMIX_LIBDIR={dir}");
    }
}
