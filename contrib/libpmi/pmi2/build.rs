//! Names the shared library `libpmi2.so.0` (its soname), as Slurm's libpmi2 is.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmi2.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
