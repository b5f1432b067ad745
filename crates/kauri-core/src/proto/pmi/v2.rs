//! PMI-2 requests: [`Engine::handle_v2`] dispatches each command to one call, which answers
//! under the frame's `thrid` (or leaves the rank waiting: a fence, a node attribute, a question
//! for the front end).

use super::{Asked, ConnId, Engine, Mismatch, Refusal, Waiter, DEAD_PROCESSES_KEY};
use crate::proto::service::{Service, ServiceReply};
use pmi_wire::v2::{Frame, Lookup, Request as Q, Response as A};
use pmi_wire::Status;

/// The PMI-2 reply to a rank whose question `asked` the front end answered with `reply`;
/// `Err` (an internal error, to report) when `reply` does not answer that question.
pub(super) fn service_answer(asked: Asked, reply: ServiceReply) -> Result<A, Mismatch> {
    let fail = |e: String| Status::error(1, e);
    Ok(match (asked, reply) {
        (Asked::Spawn, ServiceReply::Spawn(Ok(d))) => A::Spawn {
            status: Status::ok(),
            jobid: Some(d.jobid),
            errcodes: Vec::new(),
        },
        (Asked::Spawn, ServiceReply::Spawn(Err(e))) => A::Spawn {
            status: fail(e),
            jobid: None,
            errcodes: Vec::new(),
        },
        (Asked::Publish, ServiceReply::Done(r)) => {
            A::NamePublish(r.map_or_else(|e| fail(e.to_string()), |()| Status::ok()))
        }
        (Asked::Unpublish, ServiceReply::Done(r)) => {
            A::NameUnpublish(r.map_or_else(|e| fail(e.to_string()), |()| Status::ok()))
        }
        (Asked::Lookup, ServiceReply::Found(r)) => A::NameLookup(match r {
            Ok(port) => Lookup::found(port),
            Err(e) => Lookup::not_found(e.to_string()),
        }),
        (asked, reply) => return Err(Mismatch { asked, reply }),
    })
}

impl Engine {
    /// Queues one PMI-2 reply for `conn`, under `thrid`.
    pub(super) fn send_v2(&mut self, conn: ConnId, thrid: Option<String>, msg: A) {
        self.push_send(conn, |b| Frame { thrid, msg }.encode(b));
    }

    /// Handles one PMI-2 frame from `conn`.
    pub(super) fn handle_v2(&mut self, conn: ConnId, frame: Frame<Q>) {
        let thrid = frame.thrid;
        match frame.msg {
            Q::FullInit { pmirank, .. } => self.v2_fullinit(conn, thrid, pmirank),
            Q::JobGetId => self.v2_job_get_id(conn, thrid),
            Q::JobConnect { .. } => self.v2_job_connect(conn, thrid),
            Q::JobDisconnect { .. } => self.send_v2(conn, thrid, A::JobDisconnect(Status::ok())),
            Q::KvsPut { key, value } => self.v2_kvs_put(conn, thrid, &key, &value),
            Q::KvsGet { jobid, key, .. } => self.v2_kvs_get(conn, thrid, jobid.as_deref(), &key),
            Q::KvsFence => self.v2_fence(conn, thrid),
            Q::InfoPutNodeAttr { key, value } => self.v2_put_node_attr(conn, thrid, key, value),
            Q::InfoGetNodeAttr { key, wait } => self.v2_get_node_attr(conn, thrid, key, wait),
            Q::InfoGetJobAttr { key } => self.v2_get_job_attr(conn, thrid, &key),
            Q::NamePublish { name, port, .. } => self.ask(
                Waiter::v2(conn, thrid),
                Asked::Publish,
                Service::publish(name, port),
            ),
            Q::NameUnpublish { name } => self.ask(
                Waiter::v2(conn, thrid),
                Asked::Unpublish,
                Service::unpublish(name),
            ),
            Q::NameLookup { name } => self.ask(
                Waiter::v2(conn, thrid),
                Asked::Lookup,
                Service::lookup(name),
            ),
            Q::Spawn(spawn) => self.v2_spawn(conn, thrid, spawn),
            // Old MPICH clients send no code; Hydra then exits with 255.
            Q::Abort {
                message, exitcode, ..
            } => self.abort(conn, exitcode.unwrap_or(255), message),
            Q::Finalize => self.v2_finalize(conn, thrid),
        }
    }

    /// `fullinit`: binds `conn` to `pmirank` unless it has a rank already, marks the rank
    /// initialised and tells it who it is; refused on a connection with neither.
    fn v2_fullinit(&mut self, conn: ConnId, thrid: Option<String>, pmirank: Option<i64>) {
        let bound = match (self.rank_of(conn), pmirank) {
            (Some(r), _) => Ok(r),
            (None, Some(id)) => self.bind(conn, id),
            (None, None) => Err(Refusal::NoPmirank),
        };
        let reply = match bound {
            Ok(rank) => {
                self.mark_initialized(conn);
                A::FullInit {
                    status: Status::ok(),
                    rank: rank as i64,
                    size: self.job.size as i64,
                    appnum: self.appnum(conn).into(),
                    spawner_jobid: self.job.spawner_jobid.clone(),
                    debugged: false,
                    pmiverbose: false,
                }
            }
            Err(e) => A::FullInit {
                status: Status::error(-1, e.to_string()),
                rank: -1,
                size: self.job.size as i64,
                appnum: 0,
                spawner_jobid: None,
                debugged: false,
                pmiverbose: false,
            },
        };
        self.send_v2(conn, thrid, reply);
    }

    /// `job-getid`: the job's KVS name.
    fn v2_job_get_id(&mut self, conn: ConnId, thrid: Option<String>) {
        let jobid = self.job.kvsname.clone();
        let status = Status::ok();
        self.send_v2(conn, thrid, A::JobGetId { status, jobid });
    }

    /// `job-connect`: the MPI library connects jobs itself (over the port it looked up); the
    /// process manager has nothing to copy, as under Hydra and Slurm: `kvscopy=FALSE`.
    fn v2_job_connect(&mut self, conn: ConnId, thrid: Option<String>) {
        let status = Status::ok();
        self.send_v2(
            conn,
            thrid,
            A::JobConnect {
                status,
                kvscopy: false,
            },
        );
    }

    /// `kvs-put`: stores the pair in the pending puts, or refuses it.
    fn v2_kvs_put(&mut self, conn: ConnId, thrid: Option<String>, key: &str, value: &str) {
        let status = match Self::check_put(key, value) {
            Ok(()) => {
                self.kvs.put(key, value);
                Status::ok()
            }
            Err(e) => Status::error(-1, e.to_string()),
        };
        self.send_v2(conn, thrid, A::KvsPut(status));
    }

    /// `kvs-get`: answers from the job's KVS (see [`Engine::v2_kvs_value`]).
    fn v2_kvs_get(&mut self, conn: ConnId, thrid: Option<String>, jobid: Option<&str>, key: &str) {
        let found = match self.v2_kvs_value(jobid, key) {
            Some(v) => Lookup::found(v),
            None => Lookup::not_found(format!("key {key} not found")),
        };
        self.send_v2(conn, thrid, A::KvsGet(found));
    }

    /// The value of `key` for a `kvs-get` under `jobid`: the dead ranks under any job id,
    /// other keys only from this job's KVS (under its id, or none).
    fn v2_kvs_value(&self, jobid: Option<&str>, key: &str) -> Option<String> {
        let ours = jobid.is_none_or(|j| j == self.job.kvsname);
        if key == DEAD_PROCESSES_KEY {
            Some(self.dead_processes())
        } else if ours {
            self.kvs.get(key).map(str::to_string)
        } else {
            None
        }
    }

    /// `kvs-fence`: enters the fence (answered when it completes), or refuses at once.
    fn v2_fence(&mut self, conn: ConnId, thrid: Option<String>) {
        if let Err(e) = self.enter_fence(conn, Waiter::v2(conn, thrid.clone())) {
            self.send_v2(conn, thrid, A::KvsFence(Status::error(-1, e.to_string())));
        }
    }

    /// `info-putnodeattr`: answers the ranks waiting for the attribute, stores it, then
    /// acknowledges; or refuses it.
    fn v2_put_node_attr(
        &mut self,
        conn: ConnId,
        thrid: Option<String>,
        key: String,
        value: String,
    ) {
        let status = match Self::check_put(&key, &value) {
            Ok(()) => {
                for w in self.node_waiters.remove(&key).unwrap_or_default() {
                    self.send_v2(
                        w.conn,
                        w.thrid,
                        A::InfoGetNodeAttr(Lookup::found(value.clone())),
                    );
                }
                self.node_attrs.insert(key, value);
                Status::ok()
            }
            Err(e) => Status::error(-1, e.to_string()),
        };
        self.send_v2(conn, thrid, A::InfoPutNodeAttr(status));
    }

    /// `info-getnodeattr`: answers the attribute, or "not found", or with `wait` leaves the
    /// rank waiting until somebody puts it.
    fn v2_get_node_attr(&mut self, conn: ConnId, thrid: Option<String>, key: String, wait: bool) {
        let found = match self.node_attrs.get(&key) {
            Some(v) => Lookup::found(v.clone()),
            None if wait => {
                let w = Waiter::v2(conn, thrid);
                self.node_waiters.entry(key).or_default().push(w);
                return;
            }
            None => Lookup::not_found(format!("node attribute {key} not found")),
        };
        self.send_v2(conn, thrid, A::InfoGetNodeAttr(found));
    }

    /// `info-getjobattr`: answers a job attribute, or "not found".
    fn v2_get_job_attr(&mut self, conn: ConnId, thrid: Option<String>, key: &str) {
        let found = match self.job_attr(key) {
            Some(v) => Lookup::found(v),
            None => Lookup::not_found(format!("job attribute {key} not found")),
        };
        self.send_v2(conn, thrid, A::InfoGetJobAttr(found));
    }

    /// `spawn`: asks the front end, or refuses a spawn that names no program at once.
    fn v2_spawn(&mut self, conn: ConnId, thrid: Option<String>, spawn: pmi_wire::Spawn) {
        match Self::spawn_request(spawn) {
            Ok(s) => self.ask(Waiter::v2(conn, thrid), Asked::Spawn, s),
            Err(e) => self.send_v2(
                conn,
                thrid,
                A::Spawn {
                    status: Status::error(-1, e.to_string()),
                    jobid: None,
                    errcodes: Vec::new(),
                },
            ),
        }
    }

    /// `finalize`: records it, then acknowledges.
    fn v2_finalize(&mut self, conn: ConnId, thrid: Option<String>) {
        self.finalize(conn);
        self.send_v2(conn, thrid, A::Finalize(Status::ok()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::service::{Refused, SpawnDone};

    /// The front end's replies map onto PMI-2 responses; a reply to another question is an
    /// internal error.
    #[test]
    fn service_replies_map_onto_pmi2_responses() {
        let gone = service_answer(
            Asked::Lookup,
            ServiceReply::Found(Err(Refused::Other("no such".into()))),
        );
        assert_eq!(
            gone,
            Ok(A::NameLookup(Lookup::not_found("no such".to_string())))
        );
        let done = service_answer(Asked::Unpublish, ServiceReply::Done(Ok(())));
        assert_eq!(done, Ok(A::NameUnpublish(Status::ok())));
        let wrong = service_answer(Asked::Lookup, ServiceReply::Done(Ok(())));
        assert!(matches!(
            wrong,
            Err(Mismatch {
                asked: Asked::Lookup,
                ..
            })
        ));
        assert!(wrong
            .unwrap_err()
            .to_string()
            .starts_with("internal: Lookup answered with"));
        let spawned = SpawnDone {
            jobid: "kvs_1".into(),
            size: 2,
        };
        let ok = service_answer(Asked::Spawn, ServiceReply::Spawn(Ok(spawned)));
        assert!(matches!(ok, Ok(A::Spawn { jobid: Some(j), .. }) if j == "kvs_1"));
    }
}
