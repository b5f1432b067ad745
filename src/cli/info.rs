//! `kauri --version` and `kauri -info`: what this kauri is, serves and was built with, like
//! `mpiexec.hydra -info`.
//!
//! The build stamp (`KAURI_GIT_COMMIT`, `KAURI_BUILD_DATE`) comes from `build.rs`. Everything
//! else is read from the modules that own it (the PMI engine's versions, the launchers'
//! names, the resource managers, the binding words of the option table) or asked of the
//! PMIx library; this module only gathers and prints. It starts nothing.

use serde::Serialize;

/// kauri's version (`Cargo.toml`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit it was built from (`unknown` outside a git checkout).
pub const COMMIT: &str = env!("KAURI_GIT_COMMIT");
/// The day it was built, `YYYY-MM-DD` UTC (`SOURCE_DATE_EPOCH` when that was set).
pub const BUILD_DATE: &str = env!("KAURI_BUILD_DATE");

/// The line of `kauri --version`.
pub fn version_line() -> String {
    format!("kauri {VERSION} (commit {COMMIT}, built {BUILD_DATE})")
}

/// A PMI client library built from `contrib/libpmi`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ClientLibrary {
    /// Its soname.
    pub soname: &'static str,
    /// The API it implements.
    pub api: &'static str,
    /// The crate that builds it.
    pub source: &'static str,
}

/// The allocation kauri would run in, from here.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Detected {
    /// The resource manager (`slurm`, `sge`, `lsf`, `pbs`).
    pub manager: &'static str,
    /// How many hosts it gives.
    pub hosts: usize,
}

/// Everything `kauri -info` prints.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Info {
    /// kauri's version.
    pub version: &'static str,
    /// The git commit.
    pub commit: &'static str,
    /// The build date.
    pub build_date: &'static str,
    /// The PMI wire versions served, `1.1` and `2.0`.
    pub pmi_versions: Vec<String>,
    /// The PMIx server library's version line.
    pub pmix_library: String,
    /// The launchers `-launcher` takes.
    pub launchers: Vec<&'static str>,
    /// The resource managers whose allocations kauri reads.
    pub resource_managers: Vec<&'static str>,
    /// The allocation found in this environment, if any.
    pub resource_manager_detected: Option<Detected>,
    /// Why the allocation in this environment could not be read, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_manager_error: Option<String>,
    /// What `-bind-to` takes.
    pub bind_to: Vec<&'static str>,
    /// What `-map-by` takes.
    pub map_by: Vec<&'static str>,
    /// The PMI client libraries of `contrib/libpmi`.
    pub pmi_client_libraries: Vec<ClientLibrary>,
}

/// Gathers the facts.
pub fn gather() -> Info {
    let (detected, error) = match crate::launch::allocation::detect() {
        Ok(a) => (
            a.map(|a| Detected {
                manager: a.manager.as_str(),
                hosts: a.hosts.len(),
            }),
            None,
        ),
        Err(e) => (None, Some(e.to_string())),
    };
    Info {
        version: VERSION,
        commit: COMMIT,
        build_date: BUILD_DATE,
        pmi_versions: crate::proto::pmi::SERVED_VERSIONS
            .iter()
            .map(|(v, s)| format!("{v}.{s}"))
            .collect(),
        pmix_library: crate::proto::pmix::ffi::library_version(),
        launchers: crate::launch::NAMES.to_vec(),
        resource_managers: crate::launch::allocation::MANAGERS.to_vec(),
        resource_manager_detected: detected,
        resource_manager_error: error,
        bind_to: crate::cli::doc::OBJECTS.to_vec(),
        map_by: crate::cli::doc::MAP_BY.to_vec(),
        pmi_client_libraries: vec![
            ClientLibrary {
                soname: "libpmi.so.0",
                api: "PMI-1",
                source: "contrib/libpmi/pmi1",
            },
            ClientLibrary {
                soname: "libpmi2.so.0",
                api: "PMI-2",
                source: "contrib/libpmi/pmi2",
            },
        ],
    }
}

impl Info {
    /// The text of `kauri -info`, laid out as `mpiexec.hydra -info`.
    pub fn text(&self) -> String {
        let detected = match (
            &self.resource_manager_detected,
            &self.resource_manager_error,
        ) {
            (Some(d), _) => format!("{} ({} hosts)", d.manager, d.hosts),
            (None, Some(e)) => format!("none ({e})"),
            (None, None) => "none".into(),
        };
        let pmi: Vec<String> = self
            .pmi_versions
            .iter()
            .map(|v| format!("PMI-{} {v}", v.split('.').next().unwrap_or(v)))
            .collect();
        let libs: Vec<String> = self
            .pmi_client_libraries
            .iter()
            .map(|l| format!("{} ({}, {})", l.soname, l.api, l.source))
            .collect();
        let rows = [
            ("Version:", self.version.to_string()),
            ("Git commit:", self.commit.to_string()),
            ("Build date:", self.build_date.to_string()),
            ("PMI versions served:", pmi.join(", ")),
            ("PMIx server library:", self.pmix_library.clone()),
            ("Launchers available:", self.launchers.join(" ")),
            ("Resource managers:", self.resource_managers.join(" ")),
            ("Resource manager detected:", detected),
            ("Binding (-bind-to):", self.bind_to.join(" ")),
            ("Mapping (-map-by):", self.map_by.join(" ")),
            ("PMI client libraries:", libs.join(", ")),
        ];
        let mut out = String::from("kauri build details:\n");
        for (k, v) in rows {
            out.push_str(&format!("    {k:<32} {v}\n"));
        }
        out
    }

    /// The JSON of `kauri -info --json`: one object, one line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_names_what_kauri_serves() {
        let i = gather();
        assert_eq!(i.pmi_versions, vec!["1.1", "2.0"]);
        assert!(i.launchers.contains(&"fork") && i.launchers.contains(&"ssh"));
        assert!(i.bind_to.contains(&"core"));
        let t = i.text();
        assert!(t.contains("PMI-1 1.1, PMI-2 2.0"), "{t}");
        assert!(t.contains("libpmi2.so.0 (PMI-2"), "{t}");
        let v: serde_json::Value = serde_json::from_str(&i.json()).unwrap();
        assert_eq!(v["version"], VERSION);
        assert_eq!(v["pmi_versions"][1], "2.0");
    }

    #[test]
    fn version_line_has_the_stamp() {
        let l = version_line();
        assert!(l.starts_with(&format!("kauri {VERSION} (commit ")), "{l}");
        assert!(!COMMIT.is_empty() && BUILD_DATE.len() == 10, "{l}");
    }
}
