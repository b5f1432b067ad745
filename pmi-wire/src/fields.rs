//! An ordered list of `key=value` fields, shared by both protocols' typed conversions.

use crate::error::{bad, missing, WireError};
use std::str::FromStr;

/// The fields of one message, in wire order. Keys may repeat (PMI-2 spawn repeats them per
/// command); lookups return the first occurrence.
#[derive(Debug, Default)]
pub(crate) struct Fields<'a> {
    pub cmd: &'a str,
    pub pairs: Vec<(&'a str, std::borrow::Cow<'a, str>)>,
}

impl<'a> Fields<'a> {
    pub fn opt(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_ref())
    }

    pub fn req(&self, key: &str) -> Result<&str, WireError> {
        self.opt(key).ok_or_else(|| missing(self.cmd, key))
    }

    pub fn string(&self, key: &str) -> Result<String, WireError> {
        self.req(key).map(str::to_string)
    }

    pub fn opt_string(&self, key: &str) -> Option<String> {
        self.opt(key).map(str::to_string)
    }

    pub fn num<T: FromStr>(&self, key: &str) -> Result<T, WireError> {
        let v = self.req(key)?;
        parse_num(self.cmd, key, v)
    }

    pub fn opt_num<T: FromStr>(&self, key: &str) -> Result<Option<T>, WireError> {
        match self.opt(key) {
            None => Ok(None),
            Some(v) => parse_num(self.cmd, key, v).map(Some),
        }
    }

    /// `rc`, absent meaning success (RFC 13; MPICH's clients read it so).
    pub fn rc(&self) -> Result<i32, WireError> {
        Ok(self.opt_num("rc")?.unwrap_or(0))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, WireError> {
        match self.opt(key) {
            None => Ok(None),
            Some(v) => parse_bool(v).map(Some).ok_or_else(|| bad(self.cmd, key, v)),
        }
    }
}

fn parse_num<T: FromStr>(cmd: &str, key: &str, v: &str) -> Result<T, WireError> {
    v.trim().parse().map_err(|_| bad(cmd, key, v))
}

/// Booleans as real implementations write them: `TRUE`/`FALSE` in any case, and the
/// `yes`/`no` of PMI-1 `singinit`.
pub(crate) fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}
