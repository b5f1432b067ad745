//! `kauri pmi --method pmix`: the OpenPMIx client library kauri links for its server.

use super::log::Log;
use super::Session;
use crate::proto::pmix::ffi::PmixClient;

/// `pmix`: the OpenPMIx client library.
pub(super) struct Pmix {
    c: PmixClient,
    size: i64,
    log: Log,
}

impl Pmix {
    pub(super) fn open(log: &Log) -> Result<Pmix, String> {
        let c = PmixClient::init();
        match &c {
            Ok(c) => log.call(
                "PMIx_Init",
                &format!("PMIX_SUCCESS, namespace {} rank {}", c.nspace(), c.rank()),
            ),
            Err(e) => log.call("PMIx_Init", e),
        }
        let mut c = c.map_err(|e| {
            if std::env::var_os("PMIX_NAMESPACE").is_none() {
                format!("{e} (PMIX_NAMESPACE is not set: no PMIx server started this process)")
            } else {
                e
            }
        })?;
        log.set_rank(c.rank().into());
        let size = c.size();
        log.call(
            "PMIx_Get(WILDCARD, pmix.job.size)",
            &match &size {
                Ok(n) => n.to_string(),
                Err(e) => e.clone(),
            },
        );
        Ok(Pmix {
            c,
            size: size?.into(),
            log: log.clone(),
        })
    }

    fn logged<T: std::fmt::Debug>(&self, call: String, r: Result<T, String>) -> Result<T, String> {
        match &r {
            Ok(v) => self.log.call(&call, &format!("PMIX_SUCCESS {v:?}")),
            Err(e) => self.log.call(&call, e),
        }
        r
    }
}

impl Session for Pmix {
    fn rank(&self) -> i64 {
        self.c.rank().into()
    }
    fn size(&self) -> i64 {
        self.size
    }
    fn max_value(&self) -> Option<usize> {
        None
    }
    fn put(&mut self, key: &str, value: &str) -> Result<(), String> {
        let r = self.c.put(key, value);
        self.logged(format!("PMIx_Put(GLOBAL, {key}, {value:?})"), r)
    }
    fn fence(&mut self) -> Result<(), String> {
        let r = self.c.commit();
        self.logged("PMIx_Commit()".into(), r)?;
        let r = self.c.fence(true);
        self.logged("PMIx_Fence(WILDCARD, COLLECT_DATA)".into(), r)
    }
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, String> {
        let rank = u32::try_from(owner).map_err(|_| format!("bad rank {owner}"))?;
        let r = self.c.get(Some(rank), key);
        self.logged(format!("PMIx_Get(rank {rank}, {key})"), r)
            .map_err(|e| format!("get {key} of rank {rank}: {e}"))
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, String> {
        let r = self.c.get(None, key);
        self.logged(format!("PMIx_Get(WILDCARD, {key})"), r)
            .map_err(|e| format!("get {key}: {e}"))
    }
    fn finalize(self: Box<Self>) -> Result<(), String> {
        let log = self.log.clone();
        let r = self.c.finalize();
        log.call(
            "PMIx_Finalize()",
            r.as_ref().map_or_else(|e| e.as_str(), |_| "PMIX_SUCCESS"),
        );
        r
    }
    fn abort(self: Box<Self>, code: i32, msg: &str) {
        let log = self.log.clone();
        let r = self.c.abort(code, msg);
        log.call(
            &format!("PMIx_Abort({code}, {msg:?})"),
            r.as_ref().map_or_else(|e| e.as_str(), |_| "PMIX_SUCCESS"),
        );
    }
}
