//! kauri's PMI wire trace, as `KAURI_PMI_TRACE` (or `--pmi-trace`) asks for it.

/// Whether `KAURI_PMI_TRACE` asks for the PMI wire trace: set, and neither empty nor `0`
/// (read once per process).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("KAURI_PMI_TRACE").is_ok_and(|v| !v.trim().is_empty() && v.trim() != "0")
    })
}
