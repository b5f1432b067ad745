//! PMI-1 requests: [`Engine::handle_v1`] dispatches each command to one call, which answers on
//! the connection it came from (or leaves the rank waiting: a barrier, a question for the front
//! end).

use super::{
    Asked, ConnId, Engine, Mismatch, Output, Refusal, Waiter, HWLOC_XMLFILE_KEY, PUBLISH_KVS,
};
use crate::proto::service::{Service, ServiceReply};
use pmi_wire::limits::{KEY_MAX, KVSNAME_MAX, VALUE_MAX};
use pmi_wire::v1::{Request as Q, Response as A};
use pmi_wire::Status;

/// Where a PMI-1 `put` goes, decided from the pair, its kvsname and the job alone.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PutRoute {
    /// Acknowledged and dropped: MPICH's singleton client replays its one cached put once it
    /// has a process manager, an empty one when it had none.
    Ignore,
    /// Published to the whole job at once (the kvsname is [`PUBLISH_KVS`]).
    Publish,
    /// Into the committed store at once (a singleton's job: puts are visible at once).
    Preput,
    /// Into this agent's pending puts, readable after the next fence.
    Put,
    /// Refused, with why.
    Refuse(Refusal),
}

/// Where `put` of `key=value` under `kvsname` goes, in a job whose puts are visible at once
/// or not.
fn put_route(puts_visible_at_once: bool, kvsname: &str, key: &str, value: &str) -> PutRoute {
    match Engine::check_put(key, value) {
        // MPICH's singleton client replays its one cached put once it has a process
        // manager, an empty one when it had none.
        Err(_) if puts_visible_at_once && key.is_empty() && value.is_empty() => PutRoute::Ignore,
        Ok(()) if kvsname == PUBLISH_KVS => PutRoute::Publish,
        Ok(()) if puts_visible_at_once => PutRoute::Preput,
        Ok(()) => PutRoute::Put,
        Err(e) => PutRoute::Refuse(e),
    }
}

/// The answer to `init` offering `version.subversion`: 1.1 or 2.0 when the client offers
/// version 1 or 2, else its own offer with an error status.
fn negotiate(version: u32, subversion: u32) -> A {
    let (v, s, status) = match version {
        1 => (1, 1, Status::ok()),
        2 => (2, 0, Status::ok()),
        _ => (
            version,
            subversion,
            Status::error(
                -1,
                format!(
                    "PMI version {version}.{subversion} not supported: kauri speaks 1.1 and 2.0"
                ),
            ),
        ),
    };
    A::Init {
        status,
        version: v,
        subversion: s,
    }
}

/// The PMI-1 reply to a rank whose question `asked` the front end answered with `reply`;
/// `Err` (an internal error, to report) when `reply` does not answer that question.
pub(super) fn service_answer(asked: Asked, reply: ServiceReply) -> Result<A, Mismatch> {
    let fail = |e: String| Status::error(1, e);
    Ok(match (asked, reply) {
        // No `errcodes`: clients read their absence as all 0, and a long list would
        // not fit the classic clients' line buffer.
        (Asked::Spawn, ServiceReply::Spawn(Ok(_))) => A::SpawnResult {
            status: Status::ok(),
            errcodes: Vec::new(),
        },
        (Asked::Spawn, ServiceReply::Spawn(Err(e))) => A::SpawnResult {
            status: fail(e),
            errcodes: Vec::new(),
        },
        (Asked::Publish, ServiceReply::Done(r)) => {
            A::PublishResult(r.map_or_else(|e| fail(e.to_string()), |()| Status::ok()))
        }
        (Asked::Unpublish, ServiceReply::Done(r)) => {
            A::UnpublishResult(r.map_or_else(|e| fail(e.to_string()), |()| Status::ok()))
        }
        (Asked::Lookup, ServiceReply::Found(r)) => match r {
            Ok(port) => A::LookupResult {
                status: Status::ok(),
                port: Some(port),
            },
            Err(e) => A::LookupResult {
                status: fail(e.to_string()),
                port: None,
            },
        },
        (asked, reply) => return Err(Mismatch { asked, reply }),
    })
}

impl Engine {
    /// Queues one PMI-1 reply for `conn`.
    pub(super) fn send_v1(&mut self, conn: ConnId, r: A) {
        self.push_send(conn, |b| r.encode(b));
    }

    /// Handles one PMI-1 request from `conn`.
    pub(super) fn handle_v1(&mut self, conn: ConnId, req: Q) {
        match req {
            Q::InitAck { pmiid } => self.v1_initack(conn, &pmiid),
            Q::Init {
                version,
                subversion,
            } => self.v1_init(conn, version, subversion),
            Q::GetMaxes => self.send_v1(conn, MAXES),
            Q::GetAppnum => self.v1_appnum(conn),
            Q::GetMyKvsname => self.v1_my_kvsname(conn),
            Q::GetUniverseSize => self.v1_universe_size(conn),
            Q::BarrierIn { group } => self.v1_barrier(conn, group),
            Q::Put {
                key,
                value,
                kvsname,
            } => self.v1_put(conn, key, value, &kvsname),
            Q::Get { key, kvsname } => self.v1_get(conn, &key, &kvsname),
            Q::GetByIdx { idx, .. } => self.v1_get_by_idx(conn, idx),
            Q::PublishName { service, port } => self.ask(
                Waiter::v1(conn),
                Asked::Publish,
                Service::publish(service, port),
            ),
            Q::UnpublishName { service } => self.ask(
                Waiter::v1(conn),
                Asked::Unpublish,
                Service::unpublish(service),
            ),
            Q::LookupName { service } => {
                self.ask(Waiter::v1(conn), Asked::Lookup, Service::lookup(service))
            }
            Q::Abort { exitcode, message } => self.abort(conn, exitcode.unwrap_or(1), message),
            Q::Finalize => self.v1_finalize(conn),
            Q::Singinit { .. } => self.v1_singinit(conn),
            Q::Spawn(spawn) => self.v1_spawn(conn, spawn),
        }
    }

    /// `initack`: binds `conn` to the rank `pmiid` names and tells it the job's size and its
    /// rank; a bad id closes the connection.
    fn v1_initack(&mut self, conn: ConnId, pmiid: &str) {
        let id = pmiid
            .trim()
            .parse::<i64>()
            .map_err(|_| Refusal::BadPmiid(pmiid.to_string()));
        match id.and_then(|id| self.bind(conn, id)) {
            Ok(rank) => {
                self.send_v1(conn, A::InitAck);
                let size = self.job.size.to_string();
                for (k, v) in [
                    ("size", size),
                    ("rank", rank.to_string()),
                    ("debug", "0".into()),
                ] {
                    self.send_v1(
                        conn,
                        A::Set {
                            key: k.into(),
                            value: v,
                        },
                    );
                }
            }
            Err(e) => {
                self.out.push(Output::ProtocolError {
                    rank: None,
                    error: e.to_string(),
                });
                self.out.push(Output::Close { conn });
            }
        }
    }

    /// `init`: answers the version served; a rank staying with PMI-1 is initialised by it (a
    /// PMI-2 one by its `fullinit`).
    fn v1_init(&mut self, conn: ConnId, version: u32, subversion: u32) {
        // Version 1 is always served, so its `init` always succeeds.
        if version == 1 {
            self.mark_initialized(conn);
        }
        self.send_v1(conn, negotiate(version, subversion));
    }

    /// `get_appnum`: the MPMD segment of the rank on `conn`.
    fn v1_appnum(&mut self, conn: ConnId) {
        let appnum = self.appnum(conn) as i32;
        self.send_v1(conn, A::Appnum { appnum });
    }

    /// `get_my_kvsname`: the job's KVS name.
    fn v1_my_kvsname(&mut self, conn: ConnId) {
        let kvsname = self.job.kvsname.clone();
        self.send_v1(conn, A::MyKvsname { kvsname });
    }

    /// `get_universe_size`: the universe size of the job.
    fn v1_universe_size(&mut self, conn: ConnId) {
        let size = self.job.universe_size as i32;
        self.send_v1(conn, A::UniverseSize { size });
    }

    /// `barrier_in`: enters the fence (answered when it completes); a group barrier (PMI 1.2)
    /// or a fence the rank cannot enter is refused at once.
    fn v1_barrier(&mut self, conn: ConnId, group: Option<String>) {
        let error = match group {
            Some(g) => format!("group barriers ({g}) need PMI 1.2; kauri speaks 1.1"),
            None => match self.enter_fence(conn, Waiter::v1(conn)) {
                Ok(()) => return,
                Err(e) => e.to_string(),
            },
        };
        let status = Status::error(-1, error);
        self.send_v1(conn, A::BarrierOut { status, tag: None });
    }

    /// `put`: stores, publishes or refuses the pair (see [`put_route`]).
    fn v1_put(&mut self, conn: ConnId, key: String, value: String, kvsname: &str) {
        let status = match put_route(self.job.puts_visible_at_once, kvsname, &key, &value) {
            PutRoute::Ignore => Status::ok(),
            PutRoute::Publish => {
                self.out.push(Output::Publish {
                    delta: vec![(key, value)],
                });
                Status::ok()
            }
            PutRoute::Preput => {
                self.kvs.preput(key, value);
                Status::ok()
            }
            PutRoute::Put => {
                self.kvs.put(&key, &value);
                Status::ok()
            }
            PutRoute::Refuse(e) => Status::error(-1, e.to_string()),
        };
        self.send_v1(conn, A::PutResult(status));
    }

    /// `get`: answers a job attribute or a key of the job's KVS.
    fn v1_get(&mut self, conn: ConnId, key: &str, kvsname: &str) {
        let reply = self.v1_get_reply(key, kvsname);
        self.send_v1(conn, reply);
    }

    /// The answer to `get` of `key` under `kvsname`. Job attributes are answered whatever the
    /// kvsname, as Hydra's proxy answers `PMI_process_mapping`; the KVS only under the job's
    /// own name, as Hydra's server refuses any other. MPICH's ch3 singleton copes as under
    /// Hydra: when a `get` under the `singinit_kvs_PID_0` it made up fails, it asks for the
    /// name the process manager gave and retries (`MPIDI_PG_CheckForSingleton`).
    fn v1_get_reply(&self, key: &str, kvsname: &str) -> A {
        let (status, value) = match self.job_attr(key) {
            Some(v) => (Status::ok(), Some(v)),
            // What Hydra answers, and MPICH looks for, when the host has no topology file.
            None if key == HWLOC_XMLFILE_KEY => (Status::ok(), Some("unavailable".into())),
            None if kvsname != self.job.kvsname => (
                Status::error(
                    -1,
                    format!("kvsname {kvsname} is not this job's ({})", self.job.kvsname),
                ),
                None,
            ),
            None => match self.kvs.get(key) {
                Some(v) => (Status::ok(), Some(v.to_string())),
                None => (Status::error(1, format!("key {key} not found")), None),
            },
        };
        A::GetResult { status, value }
    }

    /// `getbyidx`: the `idx`-th pair of the KVS, or "no more keys".
    fn v1_get_by_idx(&mut self, conn: ConnId, idx: i64) {
        let reply = match usize::try_from(idx)
            .ok()
            .and_then(|i| self.kvs.get_by_idx(i))
        {
            Some((k, v)) => A::GetByIdxResult {
                status: Status::ok(),
                nextidx: Some(idx + 1),
                key: Some(k.to_string()),
                val: Some(v.to_string()),
            },
            None => A::GetByIdxResult {
                status: Status::error(-2, "no more keys"),
                nextidx: None,
                key: None,
                val: None,
            },
        };
        self.send_v1(conn, reply);
    }

    /// `finalize`: records it, then acknowledges.
    fn v1_finalize(&mut self, conn: ConnId) {
        self.finalize(conn);
        self.send_v1(conn, A::FinalizeAck);
    }

    /// `singinit`: kauri does not take singletons this way; it says so, with the job's name.
    fn v1_singinit(&mut self, conn: ConnId) {
        let kvsname = self.job.kvsname.clone();
        self.send_v1(
            conn,
            A::SinginitInfo {
                versionok: "no".into(),
                stdio: "no".into(),
                kvsname,
            },
        );
    }

    /// `spawn`: asks the front end, or refuses a spawn that names no program at once.
    fn v1_spawn(&mut self, conn: ConnId, spawn: pmi_wire::Spawn) {
        match Self::spawn_request(spawn) {
            Ok(s) => self.ask(Waiter::v1(conn), Asked::Spawn, s),
            Err(e) => self.send_v1(
                conn,
                A::SpawnResult {
                    status: Status::error(-1, e.to_string()),
                    errcodes: Vec::new(),
                },
            ),
        }
    }
}

/// The answer to `get_maxes`: the wire's limits.
const MAXES: A = A::Maxes {
    kvsname_max: KVSNAME_MAX,
    keylen_max: KEY_MAX,
    vallen_max: VALUE_MAX,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::service::Refused;

    /// A put goes to the pending store, to the committed store in a singleton's job, to the
    /// whole job under the publish kvsname; a singleton's empty replay is dropped, a bad key
    /// refused.
    #[test]
    fn puts_are_routed_by_kvsname_and_job() {
        assert_eq!(put_route(false, "kvs_0", "k", "v"), PutRoute::Put);
        assert_eq!(put_route(true, "kvs_0", "k", "v"), PutRoute::Preput);
        assert_eq!(put_route(false, PUBLISH_KVS, "k", "v"), PutRoute::Publish);
        assert_eq!(put_route(true, PUBLISH_KVS, "k", "v"), PutRoute::Publish);
        assert_eq!(put_route(true, "kvs_0", "", ""), PutRoute::Ignore);
        assert_eq!(
            put_route(false, "kvs_0", "", ""),
            PutRoute::Refuse(Refusal::EmptyKey)
        );
        assert!(matches!(
            put_route(true, "kvs_0", "PMI_x", "v"),
            PutRoute::Refuse(Refusal::ReservedKey { key }) if key == "PMI_x"
        ));
    }

    /// `init` settles on 1.1 or 2.0 and refuses any other version, echoing the offer.
    #[test]
    fn init_settles_on_a_served_version() {
        let answer = |v, s| match negotiate(v, s) {
            A::Init {
                status,
                version,
                subversion,
            } => (status.is_ok(), version, subversion),
            other => panic!("{other:?}"),
        };
        assert_eq!(answer(1, 0), (true, 1, 1));
        assert_eq!(answer(2, 7), (true, 2, 0));
        assert_eq!(answer(3, 1), (false, 3, 1));
    }

    /// The front end's replies map onto PMI-1 results; a reply to another question is an
    /// internal error.
    #[test]
    fn service_replies_map_onto_pmi1_results() {
        let found = service_answer(Asked::Lookup, ServiceReply::Found(Ok("p".into())));
        assert_eq!(
            found,
            Ok(A::LookupResult {
                status: Status::ok(),
                port: Some("p".into())
            })
        );
        let refused = service_answer(
            Asked::Publish,
            ServiceReply::Done(Err(Refused::Other("taken".into()))),
        );
        assert_eq!(refused, Ok(A::PublishResult(Status::error(1, "taken"))));
        let wrong = service_answer(Asked::Spawn, ServiceReply::Done(Ok(())));
        assert_eq!(
            wrong,
            Err(Mismatch {
                asked: Asked::Spawn,
                reply: ServiceReply::Done(Ok(()))
            })
        );
        assert_eq!(
            wrong.unwrap_err().to_string(),
            "internal: Spawn answered with Done(Ok(()))"
        );
    }
}
