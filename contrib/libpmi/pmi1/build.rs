//! Names the shared library `libpmi.so.0` (its soname), as Slurm's and Flux's libpmi are.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmi.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
