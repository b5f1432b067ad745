//! The process's one PMI-2 session, and every API call in Rust types.
//!
//! The session lives in a mutex; calls are serialised (this client sends no `thrid`, so it
//! has one request outstanding at a time). Each call returns `Ok` or the `PMI2_*` code the C
//! function returns. Nothing here touches a C pointer.

use crate::codes::*;
use kauri_libpmi_common::{debug_enabled, lock, Backend, LocalJob};
use pmi_wire::client::{Client, ClientError};
use pmi_wire::{Spawn, Version};
use std::os::raw::c_int;
use std::sync::Mutex;

/// A failed call: the `PMI2_*` code to return.
pub type Code = c_int;

/// What `PMI2_Init` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// True when started by a spawn.
    pub spawned: bool,
    /// The job's size.
    pub size: i64,
    /// This process's rank.
    pub rank: i64,
    /// The MPMD command index.
    pub appnum: i64,
}

/// What a session knows once initialised.
pub struct Session {
    backend: Backend,
    id: Identity,
    jobid: String,
    debug: bool,
}

static STATE: Mutex<Option<Session>> = Mutex::new(None);

fn trace(debug: bool, what: &str, e: &ClientError) {
    if debug {
        eprintln!("libpmi2: {what}: {e}");
    }
}

fn code(e: &ClientError) -> Code {
    match e {
        ClientError::TooLong { what: "key", .. } => PMI2_ERR_INVALID_KEY_LENGTH,
        ClientError::TooLong { .. } => PMI2_ERR_INVALID_VAL_LENGTH,
        _ => PMI2_FAIL,
    }
}

fn check_key(key: &str) -> Result<(), Code> {
    if key.is_empty() || key.contains(';') {
        return Err(PMI2_ERR_INVALID_KEY);
    }
    if key.len() > PMI2_MAX_KEYLEN {
        return Err(PMI2_ERR_INVALID_KEY_LENGTH);
    }
    Ok(())
}

fn check_value(value: &str) -> Result<(), Code> {
    if value.len() > PMI2_MAX_VALLEN {
        return Err(PMI2_ERR_INVALID_VAL_LENGTH);
    }
    Ok(())
}

/// Parses an attribute holding a comma-separated list of integers.
pub fn int_array(value: &str) -> Result<Vec<c_int>, Code> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|x| x.trim().parse().map_err(|_| PMI2_ERR_INVALID_VAL))
        .collect()
}

impl Session {
    /// A session over `backend` (public for tests that bring their own server).
    pub fn new(backend: Backend, debug: bool) -> Session {
        match backend {
            Backend::Server(c) => Session {
                id: Identity {
                    spawned: c.spawned(),
                    size: c.size(),
                    rank: c.rank(),
                    appnum: c.appnum(),
                },
                jobid: c.kvsname().to_string(),
                debug,
                backend: Backend::Server(c),
            },
            Backend::Local(job) => Session {
                id: Identity {
                    spawned: false,
                    size: 1,
                    rank: 0,
                    appnum: 0,
                },
                jobid: job.kvsname.clone(),
                debug,
                backend: Backend::Local(job),
            },
        }
    }

    /// What `PMI2_Init` reports.
    pub fn identity(&self) -> Identity {
        self.id
    }

    /// The job id (the KVS name).
    pub fn jobid(&self) -> &str {
        &self.jobid
    }

    fn server(&mut self) -> Result<(&mut Client, bool), &mut LocalJob> {
        let debug = self.debug;
        match &mut self.backend {
            Backend::Server(c) => Ok((c, debug)),
            Backend::Local(j) => Err(j),
        }
    }

    /// `PMI2_KVS_Put`.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), Code> {
        check_key(key)?;
        check_value(value)?;
        match self.server() {
            Err(job) => {
                job.kvs.insert(key.into(), value.into());
                Ok(())
            }
            Ok((c, debug)) => c.put(key, value).map_err(|e| {
                trace(debug, "PMI2_KVS_Put", &e);
                code(&e)
            }),
        }
    }

    /// `PMI2_KVS_Fence`.
    pub fn fence(&mut self) -> Result<(), Code> {
        match self.server() {
            Err(_) => Ok(()),
            Ok((c, debug)) => c.fence().map_err(|e| {
                trace(debug, "PMI2_KVS_Fence", &e);
                code(&e)
            }),
        }
    }

    /// `PMI2_KVS_Get`: `jobid` names another job's KVS (`None`: this job's); `src` is the hint
    /// naming the rank that put the key. `Err(PMI2_FAIL)` when the key is not there.
    pub fn get(
        &mut self,
        jobid: Option<&str>,
        src: Option<i64>,
        key: &str,
    ) -> Result<String, Code> {
        check_key(key)?;
        let own = self.jobid.clone();
        let jobid = jobid.filter(|j| !j.is_empty() && *j != own);
        match self.server() {
            Err(job) => {
                if jobid.is_some() {
                    return Err(PMI2_FAIL);
                }
                job.kvs.get(key).cloned().ok_or(PMI2_FAIL)
            }
            Ok((c, debug)) => match c.get_from(jobid, src, key) {
                Ok(Some(v)) => Ok(v),
                Ok(None) => Err(PMI2_FAIL),
                Err(e) => {
                    trace(debug, "PMI2_KVS_Get", &e);
                    Err(code(&e))
                }
            },
        }
    }

    /// `PMI2_Info_PutNodeAttr`.
    pub fn put_node_attr(&mut self, key: &str, value: &str) -> Result<(), Code> {
        check_key(key)?;
        check_value(value)?;
        match self.server() {
            Err(job) => {
                job.node_attrs.insert(key.into(), value.into());
                Ok(())
            }
            Ok((c, debug)) => c.put_node_attr(key, value).map_err(|e| {
                trace(debug, "PMI2_Info_PutNodeAttr", &e);
                code(&e)
            }),
        }
    }

    /// `PMI2_Info_GetNodeAttr`: `Ok(None)` when not found. With `wait`, the server holds the
    /// reply until a process of the node puts the key (a singleton has nobody to wait for).
    pub fn get_node_attr(&mut self, key: &str, wait: bool) -> Result<Option<String>, Code> {
        check_key(key)?;
        match self.server() {
            Err(job) => Ok(job.node_attrs.get(key).cloned()),
            Ok((c, debug)) => c.get_node_attr(key, wait).map_err(|e| {
                trace(debug, "PMI2_Info_GetNodeAttr", &e);
                code(&e)
            }),
        }
    }

    /// `PMI2_Info_GetJobAttr`: `Ok(None)` when not found. A singleton knows
    /// `PMI_process_mapping` and `universeSize`.
    pub fn get_job_attr(&mut self, key: &str) -> Result<Option<String>, Code> {
        check_key(key)?;
        match self.server() {
            Err(_) => Ok(match key {
                "PMI_process_mapping" => Some("(vector,(0,1,1))".into()),
                "universeSize" => Some("1".into()),
                _ => None,
            }),
            Ok((c, debug)) => c.job_attr(key).map_err(|e| {
                trace(debug, "PMI2_Info_GetJobAttr", &e);
                code(&e)
            }),
        }
    }

    /// `PMI2_Nameserv_publish`.
    pub fn publish(&mut self, name: &str, port: &str) -> Result<(), Code> {
        match self.server() {
            Err(job) => job.publish(name, port).then_some(()).ok_or(PMI2_FAIL),
            Ok((c, debug)) => c.publish(name, port).map_err(|e| {
                trace(debug, "PMI2_Nameserv_publish", &e);
                code(&e)
            }),
        }
    }

    /// `PMI2_Nameserv_unpublish`.
    pub fn unpublish(&mut self, name: &str) -> Result<(), Code> {
        match self.server() {
            Err(job) => job.names.remove(name).map(|_| ()).ok_or(PMI2_FAIL),
            Ok((c, debug)) => c.unpublish(name).map_err(|e| {
                trace(debug, "PMI2_Nameserv_unpublish", &e);
                code(&e)
            }),
        }
    }

    /// `PMI2_Nameserv_lookup`: `Err(PMI2_FAIL)` when nobody published it.
    pub fn lookup(&mut self, name: &str) -> Result<String, Code> {
        match self.server() {
            Err(job) => job.names.get(name).cloned().ok_or(PMI2_FAIL),
            Ok((c, debug)) => match c.lookup(name) {
                Ok(Some(p)) => Ok(p),
                Ok(None) => Err(PMI2_FAIL),
                Err(e) => {
                    trace(debug, "PMI2_Nameserv_lookup", &e);
                    Err(code(&e))
                }
            },
        }
    }

    /// `PMI2_Job_Spawn`: the new job's id (empty when the server names none) and one error
    /// code per process. A singleton cannot spawn (no process manager).
    pub fn spawn(&mut self, spawn: &Spawn) -> Result<(String, Vec<i32>), Code> {
        match self.server() {
            Err(_) => Err(PMI2_FAIL),
            Ok((c, debug)) => c
                .spawn(spawn)
                .map(|s| (s.jobid.unwrap_or_default(), s.errcodes))
                .map_err(|e| {
                    trace(debug, "PMI2_Job_Spawn", &e);
                    code(&e)
                }),
        }
    }

    /// `PMI2_Job_Connect`: succeeds when the server shares the other job's KVS. A server that
    /// asks for the KVS to be copied through the caller's connection (`kvscopy`) is refused
    /// with `PMI2_ERR_OTHER`: this library does not copy KVS contents.
    pub fn connect(&mut self, jobid: &str) -> Result<(), Code> {
        match self.server() {
            Err(_) => Err(PMI2_FAIL),
            Ok((c, debug)) => match c.job_connect(jobid) {
                Ok(false) => Ok(()),
                Ok(true) => Err(PMI2_ERR_OTHER),
                Err(e) => {
                    trace(debug, "PMI2_Job_Connect", &e);
                    Err(code(&e))
                }
            },
        }
    }

    /// `PMI2_Job_Disconnect`.
    pub fn disconnect(&mut self, jobid: &str) -> Result<(), Code> {
        match self.server() {
            Err(_) => Err(PMI2_FAIL),
            Ok((c, debug)) => c.job_disconnect(jobid).map_err(|e| {
                trace(debug, "PMI2_Job_Disconnect", &e);
                code(&e)
            }),
        }
    }

    fn finalize(self) -> Result<(), Code> {
        match self.backend {
            Backend::Local(_) => Ok(()),
            Backend::Server(c) => c.finalize().map_err(|e| {
                trace(self.debug, "PMI2_Finalize", &e);
                code(&e)
            }),
        }
    }
}

/// `PMI2_Init`: connects (or becomes a singleton). Calling it again while initialised
/// reports the same identity.
pub fn init() -> Result<Identity, Code> {
    let mut st = lock(&STATE);
    if let Some(s) = &*st {
        return Ok(s.id);
    }
    let debug = debug_enabled("PMI2_DEBUG");
    let backend = Backend::from_env(Version::V2).map_err(|e| {
        trace(true, "PMI2_Init", &e);
        PMI2_FAIL
    })?;
    let s = Session::new(backend, debug);
    let id = s.id;
    *st = Some(s);
    Ok(id)
}

/// `PMI2_Initialized`.
pub fn initialized() -> bool {
    lock(&STATE).is_some()
}

/// Runs `f` on the active session; `PMI2_ERR_INIT` when there is none.
pub fn with<T>(f: impl FnOnce(&mut Session) -> Result<T, Code>) -> Result<T, Code> {
    match &mut *lock(&STATE) {
        Some(s) => f(s),
        None => Err(PMI2_ERR_INIT),
    }
}

/// `PMI2_Finalize`.
pub fn finalize() -> Result<(), Code> {
    match lock(&STATE).take() {
        Some(s) => s.finalize(),
        None => Err(PMI2_ERR_INIT),
    }
}

/// The exit status of a process that calls `PMI2_Abort` (the API has no code argument).
pub const ABORT_STATUS: i32 = 1;

/// `PMI2_Abort`: asks the server to end the job (`isworld`) or this process, then exits with
/// [`ABORT_STATUS`]. Does not return.
pub fn abort(isworld: bool, message: &str) -> ! {
    let mut st = lock(&STATE);
    match st.take() {
        Some(Session {
            backend: Backend::Server(c),
            debug,
            ..
        }) => {
            if let Err(e) = c.abort_with(isworld, ABORT_STATUS, message) {
                trace(debug, "PMI2_Abort", &e);
            }
        }
        _ => eprintln!("aborting job:\n{message}"),
    }
    drop(st);
    std::process::exit(ABORT_STATUS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_arrays() {
        assert_eq!(int_array("1,2, 3").unwrap(), [1, 2, 3]);
        assert_eq!(int_array("").unwrap(), Vec::<c_int>::new());
        assert_eq!(int_array("1,x"), Err(PMI2_ERR_INVALID_VAL));
    }

    #[test]
    fn singleton_is_a_job_of_one() {
        let mut s = Session::new(Backend::Local(LocalJob::new()), false);
        assert_eq!(
            s.identity(),
            Identity {
                spawned: false,
                size: 1,
                rank: 0,
                appnum: 0
            }
        );
        s.put("k", "a value; with spaces").unwrap();
        s.fence().unwrap();
        assert_eq!(s.get(None, Some(0), "k").unwrap(), "a value; with spaces");
        let own = s.jobid().to_string();
        assert_eq!(
            s.get(Some(&own), None, "k").unwrap(),
            "a value; with spaces"
        );
        assert_eq!(s.get(Some("other"), None, "k"), Err(PMI2_FAIL));
        assert_eq!(s.get(None, None, "absent"), Err(PMI2_FAIL));
        assert_eq!(s.get_node_attr("n", true).unwrap(), None);
        s.put_node_attr("n", "v").unwrap();
        assert_eq!(s.get_node_attr("n", true).unwrap().as_deref(), Some("v"));
        assert_eq!(
            s.get_job_attr("PMI_process_mapping").unwrap().as_deref(),
            Some("(vector,(0,1,1))")
        );
        assert_eq!(s.get_job_attr("nothing").unwrap(), None);
        s.publish("svc", "p").unwrap();
        assert_eq!(s.lookup("svc").unwrap(), "p");
        s.unpublish("svc").unwrap();
        assert_eq!(s.lookup("svc"), Err(PMI2_FAIL));
        assert_eq!(
            s.put(&"k".repeat(65), "v"),
            Err(PMI2_ERR_INVALID_KEY_LENGTH)
        );
        assert_eq!(
            s.put("k", &"v".repeat(1025)),
            Err(PMI2_ERR_INVALID_VAL_LENGTH)
        );
        assert_eq!(s.spawn(&Spawn::default()), Err(PMI2_FAIL));
        s.finalize().unwrap();
    }
}
