//! Links the OpenPMIx library (Debian `libpmix-dev`) for the PMIx server in `src/pmix`.
//! `pkg-config pmix` gives its directory when it is there; otherwise the default library
//! path must hold `libpmix.so`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let libdir = std::process::Command::new("pkg-config")
        .args(["--variable=libdir", "pmix"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|d| !d.is_empty());
    if let Some(dir) = libdir {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=dylib=pmix");
}
