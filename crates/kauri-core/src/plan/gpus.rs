//! What a job asks of each host's GPUs: how many each rank gets (`-gpus-per-proc`, Hydra's
//! spelling) and which (`-gpu-bind`, Slurm's words). The host finds its GPUs and hands them
//! out (`kauri_host::gpu`).

use serde::{Deserialize, Serialize};

/// What a job asks of each host's GPUs: given when `-gpus-per-proc` or `-gpu-bind` is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuAsk {
    /// How many each rank gets.
    pub per: PerProc,
    /// Which.
    pub bind: GpuBind,
}

/// How many GPUs each rank gets (`-gpus-per-proc N|auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PerProc {
    /// None: every GPU is hidden from the ranks (`-gpus-per-proc 0`, as Hydra's).
    Hidden,
    /// This many (at least one).
    Count(usize),
    /// The host's GPUs divided among its ranks, at least one each (one under a map).
    Auto,
}

impl PerProc {
    /// Reads `-gpus-per-proc`'s value: a count (0: none) or `auto`.
    pub fn parse(v: &str) -> Result<PerProc, GpuOptionError> {
        match v {
            "auto" => Ok(PerProc::Auto),
            n => match n.parse::<usize>() {
                Ok(0) => Ok(PerProc::Hidden),
                Ok(n) => Ok(PerProc::Count(n)),
                _ => Err(GpuOptionError::PerProc(v.to_string())),
            },
        }
    }
}

/// Which GPUs a rank gets (`-gpu-bind closest|none|map:I,J,…`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum GpuBind {
    /// Those nearest its CPUs; an unbound rank is then bound next to its GPUs.
    #[default]
    Closest,
    /// In turn, whatever their place.
    None,
    /// Local rank `L` gets GPU `map[L mod len]` (Slurm's `map_gpu:`).
    Map(Vec<usize>),
}

impl GpuBind {
    /// Reads `-gpu-bind`'s value.
    pub fn parse(v: &str) -> Result<GpuBind, GpuOptionError> {
        let bad = || GpuOptionError::Bind(v.to_string());
        match v {
            "closest" => Ok(GpuBind::Closest),
            "none" => Ok(GpuBind::None),
            _ => {
                let list = v
                    .strip_prefix("map:")
                    .or_else(|| v.strip_prefix("map_gpu:"))
                    .ok_or_else(bad)?;
                let map: Vec<usize> = list
                    .split(',')
                    .map(|i| i.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad())?;
                if map.is_empty() {
                    return Err(bad());
                }
                Ok(GpuBind::Map(map))
            }
        }
    }
}

/// A GPU option's value kauri cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuOptionError {
    /// `-gpus-per-proc` wants a count or `auto`.
    #[error("-gpus-per-proc: {0:?} is neither a count nor auto")]
    PerProc(String),
    /// `-gpu-bind` wants `closest`, `none` or `map:I,J,…`.
    #[error("-gpu-bind: {0:?} is none of closest, none, map:I,J,...")]
    Bind(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_values() {
        assert_eq!(PerProc::parse("2"), Ok(PerProc::Count(2)));
        assert_eq!(PerProc::parse("auto"), Ok(PerProc::Auto));
        assert_eq!(PerProc::parse("0"), Ok(PerProc::Hidden));
        for bad in ["-1", "two", ""] {
            assert_eq!(
                PerProc::parse(bad).map_err(|e| e.to_string()),
                Err(format!(
                    "-gpus-per-proc: {bad:?} is neither a count nor auto"
                ))
            );
        }
        assert_eq!(GpuBind::parse("closest"), Ok(GpuBind::Closest));
        assert_eq!(GpuBind::parse("none"), Ok(GpuBind::None));
        assert_eq!(GpuBind::parse("map:3,1"), Ok(GpuBind::Map(vec![3, 1])));
        assert_eq!(GpuBind::parse("map_gpu:0"), Ok(GpuBind::Map(vec![0])));
        for bad in ["map:", "map:a", "nearest", "map:1,,2"] {
            assert_eq!(GpuBind::parse(bad), Err(GpuOptionError::Bind(bad.into())));
        }
    }
}
