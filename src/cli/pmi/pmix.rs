//! `kauri pmi --method pmix`: the OpenPMIx client library kauri links for its server.

use super::log::Log;
use super::{Session, SessionError};
use crate::proto::pmix::ffi::PmixClient;
use crate::proto::pmix::PmixError;

/// `pmix`: the OpenPMIx client library.
pub(super) struct Pmix {
    c: PmixClient,
    size: i64,
    log: Log,
}

impl Pmix {
    pub(super) fn open(log: &Log) -> Result<Pmix, SessionError> {
        let c = PmixClient::init();
        match &c {
            Ok(c) => log.call(
                "PMIx_Init",
                &format!("PMIX_SUCCESS, namespace {} rank {}", c.nspace(), c.rank()),
            ),
            Err(e) => log.call("PMIx_Init", &e.to_string()),
        }
        let mut c = c.map_err(|e| {
            if std::env::var_os("PMIX_NAMESPACE").is_none() {
                SessionError::PmixUnnamed(e)
            } else {
                SessionError::Pmix(e)
            }
        })?;
        log.set_rank(c.rank().into());
        let size = c.size();
        log.call(
            "PMIx_Get(WILDCARD, pmix.job.size)",
            &match &size {
                Ok(n) => n.to_string(),
                Err(e) => e.to_string(),
            },
        );
        Ok(Pmix {
            c,
            size: size?.into(),
            log: log.clone(),
        })
    }

    fn logged<T: std::fmt::Debug>(
        &self,
        call: String,
        r: Result<T, PmixError>,
    ) -> Result<T, PmixError> {
        match &r {
            Ok(v) => self.log.call(&call, &format!("PMIX_SUCCESS {v:?}")),
            Err(e) => self.log.call(&call, &e.to_string()),
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
    fn put(&mut self, key: &str, value: &str) -> Result<(), SessionError> {
        let r = self.c.put(key, value);
        Ok(self.logged(format!("PMIx_Put(GLOBAL, {key}, {value:?})"), r)?)
    }
    fn fence(&mut self) -> Result<(), SessionError> {
        let r = self.c.commit();
        self.logged("PMIx_Commit()".into(), r)?;
        let r = self.c.fence(true);
        Ok(self.logged("PMIx_Fence(WILDCARD, COLLECT_DATA)".into(), r)?)
    }
    fn get(&mut self, owner: i64, key: &str) -> Result<Option<String>, SessionError> {
        let rank = u32::try_from(owner).map_err(|_| SessionError::BadRank(owner))?;
        let r = self.c.get(Some(rank), key);
        self.logged(format!("PMIx_Get(rank {rank}, {key})"), r)
            .map_err(|source| SessionError::PmixGet {
                call: format!("get {key} of rank {rank}"),
                source,
            })
    }
    fn lookup(&mut self, key: &str) -> Result<Option<String>, SessionError> {
        let r = self.c.get(None, key);
        self.logged(format!("PMIx_Get(WILDCARD, {key})"), r)
            .map_err(|source| SessionError::PmixGet {
                call: format!("get {key}"),
                source,
            })
    }
    fn finalize(self: Box<Self>) -> Result<(), SessionError> {
        let log = self.log.clone();
        let r = self.c.finalize();
        log.call(
            "PMIx_Finalize()",
            &r.as_ref()
                .map_or_else(ToString::to_string, |_| "PMIX_SUCCESS".into()),
        );
        Ok(r?)
    }
    fn abort(self: Box<Self>, code: i32, msg: &str) {
        let log = self.log.clone();
        let r = self.c.abort(code, msg);
        log.call(
            &format!("PMIx_Abort({code}, {msg:?})"),
            &r.as_ref()
                .map_or_else(ToString::to_string, |_| "PMIX_SUCCESS".into()),
        );
    }
}
