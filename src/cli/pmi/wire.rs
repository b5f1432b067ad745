//! `kauri pmi --method pmi1` and `--method pmi2`: the PMI-1 and PMI-2 wire protocols, spoken by
//! pmi-wire's client (one session type for both: the client knows its version).

use super::log::Log;
use super::{Session, SessionError};
use pmi_wire::client::{Client, ClientError};
use pmi_wire::Version;

/// `pmi1`, `pmi2`: pmi-wire's client.
pub(super) struct Wire(Client);

impl Wire {
    pub(super) fn open(v: Version, log: &Log) -> Result<Wire, SessionError> {
        Client::from_env_traced(v, log.wire_trace())
            .map(Wire)
            .map_err(|e| match e {
                ClientError::NoServer => SessionError::NoWireServer,
                e => failed("init".into())(e),
            })
    }
}

/// The error of wire call `call` (`put KEY`) that failed.
fn failed(call: String) -> impl FnOnce(ClientError) -> SessionError {
    move |source| SessionError::Wire { call, source }
}

impl Session for Wire {
    fn rank(&self) -> i64 {
        self.0.rank()
    }
    fn size(&self) -> i64 {
        self.0.size()
    }
    fn max_value(&self) -> Option<usize> {
        Some(self.0.maxes().value)
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), SessionError> {
        self.0.put(key, value).map_err(failed(format!("put {key}")))
    }
    fn fence(&mut self) -> Result<(), SessionError> {
        self.0.fence().map_err(failed("fence".into()))
    }
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, SessionError> {
        let r = match self.0.version() {
            Version::V1 => self.0.get(key),
            Version::V2 => self.0.get_from(None, Some(owner), key),
        };
        r.map_err(failed(format!("get {key}")))
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, SessionError> {
        let r = match self.0.job_attr(key) {
            Ok(None) if self.0.version() == Version::V2 => self.0.get(key),
            other => other,
        };
        r.map_err(failed(format!("get {key}")))
    }
    fn finalize(self: Box<Self>) -> Result<(), SessionError> {
        self.0.finalize().map_err(failed("finalize".into()))
    }
    fn abort(self: Box<Self>, code: i32, msg: &str) {
        let _ = self.0.abort(code, msg);
    }
}
