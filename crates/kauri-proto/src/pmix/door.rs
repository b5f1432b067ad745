//! The PMIx server's front door: a loopback port this process opens before any rank starts
//! and names in every rank's environment, so that a job is offered PMIx beside PMI-1/PMI-2
//! without the server library running. The library starts when a client first knocks (at
//! once, for a job known to be Open MPI), and each connection is carried to it, byte for
//! byte, both ways ([`serve`]).
//!
//! Why: starting the library, registering a job and tearing it down again cost several times
//! what a whole `kauri -n 4 true` takes (docs/performance.md). A job whose ranks speak PMI
//! (MPICH, Intel MPI) or nothing (`hostname`) never pays it, and every job can be offered
//! both protocols: no rank has to be guessed to speak one.
//!
//! What a client is given is what `PMIx_server_setup_fork` gives (the namespace and rank,
//! the server's URI under each protocol version's name, its security, data store and buffer
//! types, host name, directories and release), made here from what kauri fixes itself:
//! the server's namespace ([`SERVER_NSPACE`], given to the library at its start), the data
//! store (`hash`) and security (`native`), given to it the same way, and the library's
//! release, read from its file ([`super::ffi::release_of`]). When the library starts, kauri
//! asks it for one client's environment of each job and says so in one line if it differs.
//!
//! Carrying the bytes changes nothing of how the library trusts a client: over TCP, OpenPMIx's
//! `native` security takes the uid and gid the client states in its handshake (it reads no
//! credential from a TCP socket), whoever connects.

use super::PmixError;
use std::net::SocketAddr;
use std::sync::Mutex;

/// The server's namespace, given to the library at its start (with rank 0):
/// `pmix-server.<pid>`.
pub fn server_nspace() -> String {
    format!("pmix-server.{}", std::process::id())
}

/// The protocol names under which a server of OpenPMIx 4 or 5 gives its URI; a client takes
/// the newest it knows.
const URI_VARS: [&str; 5] = [
    "PMIX_SERVER_URI41",
    "PMIX_SERVER_URI4",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_URI2",
];

/// The OpenPMIx releases whose clients' environment kauri knows how to make ([`client_env`]).
pub fn release_known(release: &str) -> bool {
    release.starts_with("4.") || release.starts_with("5.")
}

/// This process's door.
struct Door {
    port: u16,
    /// The listener, until [`serve`] takes it.
    listener: Option<std::net::TcpListener>,
}

static DOOR: Mutex<Option<Door>> = Mutex::new(None);

/// Opens this process's door on loopback (a port of `range`, when given), once: its port.
pub fn open(range: Option<&kauri_core::plan::port_range::PortRange>) -> Result<u16, PmixError> {
    let mut door = DOOR.lock().map_err(|_| PmixError::Poisoned)?;
    if let Some(d) = door.as_ref() {
        return Ok(d.port);
    }
    let l = kauri_os::ports::listen(std::net::Ipv4Addr::LOCALHOST.into(), range)
        .map_err(PmixError::Door)?;
    let port = l.local_addr().map_err(PmixError::Door)?.port();
    *door = Some(Door {
        port,
        listener: Some(l),
    });
    Ok(port)
}

/// What a client of the door is given: where it is and who it is.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    /// Its namespace (its job's kvsname).
    pub nspace: &'a str,
    /// Its rank.
    pub rank: usize,
    /// Its host's name, as the server gives it.
    pub host: &'a str,
    /// The server's directory.
    pub tmpdir: &'a str,
    /// The server library's release (`4.2.2rc2`).
    pub release: &'a str,
    /// The door's port.
    pub port: u16,
}

/// The environment `PMIx_server_setup_fork` gives a client of a server behind the door.
pub fn client_env(c: &Client<'_>) -> Vec<(String, String)> {
    // The server's namespace and rank (0), then its address.
    let uri = format!("{}.0;tcp4://127.0.0.1:{}", server_nspace(), c.port);
    let mut env: Vec<(String, String)> = URI_VARS
        .iter()
        .map(|k| (k.to_string(), uri.clone()))
        .collect();
    for (k, v) in [
        ("PMIX_NAMESPACE", c.nspace),
        ("PMIX_RANK", &c.rank.to_string()),
        ("PMIX_SECURITY_MODE", "native"),
        ("PMIX_GDS_MODULE", "hash"),
        ("PMIX_BFROP_BUFFER_TYPE", "PMIX_BFROP_BUFFER_NON_DESC"),
        ("PMIX_HOSTNAME", c.host),
        ("PMIX_SERVER_TMPDIR", c.tmpdir),
        ("PMIX_SYSTEM_TMPDIR", c.tmpdir),
        ("PMIX_VERSION", c.release),
    ] {
        env.push((k.to_string(), v.to_string()));
    }
    env
}

/// The variables of `library` (what the library gave a client) that `ours` (what kauri gave
/// it) lacks or has otherwise, as `K=V` (ours: `K=V`); empty when they agree. The URIs are
/// compared but for their address, which is the door's in `ours` and the library's own.
pub fn differences(ours: &[(String, String)], library: &[(String, String)]) -> Vec<String> {
    let strip = |k: &str, v: &str| -> String {
        if URI_VARS.contains(&k) {
            v.split_once(";tcp4://").map_or(v, |(ns, _)| ns).to_string()
        } else {
            v.to_string()
        }
    };
    let mut out = Vec::new();
    for (k, v) in library {
        match ours.iter().find(|(o, _)| o == k) {
            Some((_, mine)) if strip(k, mine) == strip(k, v) => {}
            Some((_, mine)) => out.push(format!("{k}={v} (kauri: {mine})")),
            None => out.push(format!("{k}={v} (kauri: none)")),
        }
    }
    out
}

/// The library's own address in a client environment it made: the `tcp4://` address of its
/// URI.
pub fn upstream(library: &[(String, String)]) -> Option<SocketAddr> {
    let (_, uri) = library.iter().find(|(k, _)| k == URI_VARS[1])?;
    uri.split_once(";tcp4://")?.1.parse().ok()
}

/// Serves the door from this thread's `LocalSet`, once: each client that connects is carried
/// to the server library, which `start` starts (or finds running) and whose address it gives.
/// A client that comes while the library cannot start is closed (its `PMIx_Init` fails), with
/// `start`'s line said once. Nothing to do when the door was never opened.
pub fn serve(start: fn() -> Result<SocketAddr, PmixError>) {
    let listener = match DOOR.lock() {
        Ok(mut d) => d.as_mut().and_then(|d| d.listener.take()),
        Err(_) => None,
    };
    let Some(listener) = listener else {
        return;
    };
    tokio::task::spawn_local(async move {
        let l = match listener
            .set_nonblocking(true)
            .and_then(|()| tokio::net::TcpListener::from_std(listener))
        {
            Ok(l) => l,
            Err(e) => return say!("kauri: cannot serve PMIx clients: {e}"),
        };
        let mut said = false;
        loop {
            let client = match l.accept().await {
                Ok((c, _)) => c,
                Err(e) => {
                    tracing::warn!("PMIx door: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            match start() {
                Ok(to) => {
                    tokio::task::spawn_local(carry(client, to));
                }
                Err(e) if !said => {
                    said = true;
                    say!("kauri: {e}");
                }
                Err(_) => {}
            }
        }
    });
}

/// Carries one client's connection to the library at `to` and back until both ends close.
async fn carry(mut client: tokio::net::TcpStream, to: SocketAddr) {
    let mut server = match tokio::net::TcpStream::connect(to).await {
        Ok(s) => s,
        Err(e) => return tracing::warn!("PMIx door: cannot reach the library at {to}: {e}"),
    };
    // Requests and replies are small and answered at once: no delay for coalescing.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_clients_environment_names_the_door_under_every_protocol() {
        let c = Client {
            nspace: "kauri_1_a_vm",
            rank: 3,
            host: "vm",
            tmpdir: "/tmp/k/n0-1",
            release: "4.2.2rc2",
            port: 4242,
        };
        let env = client_env(&c);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let uri = format!("pmix-server.{}.0;tcp4://127.0.0.1:4242", std::process::id());
        for k in URI_VARS {
            assert_eq!(get(k), Some(uri.as_str()), "{k}");
        }
        assert_eq!(get("PMIX_RANK"), Some("3"));
        assert_eq!(get("PMIX_NAMESPACE"), Some("kauri_1_a_vm"));
        assert_eq!(get("PMIX_VERSION"), Some("4.2.2rc2"));
        assert_eq!(env.len(), 14);
    }

    #[test]
    fn differences_ignore_only_the_uris_address() {
        let ours = vars(&[
            ("PMIX_SERVER_URI4", "pmix-server.7;tcp4://127.0.0.1:1"),
            ("PMIX_RANK", "0"),
            ("PMIX_VERSION", "4.2.2"),
        ]);
        let lib = vars(&[
            ("PMIX_SERVER_URI4", "pmix-server.7;tcp4://127.0.0.1:2"),
            ("PMIX_RANK", "0"),
        ]);
        assert!(differences(&ours, &lib).is_empty());
        assert_eq!(upstream(&lib), Some("127.0.0.1:2".parse().unwrap()));
        let lib = vars(&[
            ("PMIX_SERVER_URI4", "pmix-server.8;tcp4://127.0.0.1:2"),
            ("PMIX_PTL_MODULE", "tcp"),
        ]);
        assert_eq!(
            differences(&ours, &lib),
            [
                "PMIX_SERVER_URI4=pmix-server.8;tcp4://127.0.0.1:2 (kauri: pmix-server.7;tcp4://127.0.0.1:1)",
                "PMIX_PTL_MODULE=tcp (kauri: none)"
            ]
        );
        assert_eq!(upstream(&vars(&[("PMIX_SERVER_URI4", "junk")])), None);
    }
}
