//! `kauri nameserver [-port P] [-bind ADDR] [-key SECRET]`: the command line of the name
//! server `-nameserver` points jobs at, and its run in the foreground; the server itself is
//! `proto::nameserver`'s.

use crate::proto::nameserver::{
    key_from_env, serve, Limits, CLIENTS_MAX, DEFAULT_PORT, KEY_VAR, LINE_MAX, MAX_CLIENTS_VAR,
    MAX_NAMES_PER_CLIENT_VAR, MAX_NAMES_VAR, NAMES_MAX, NAMES_PER_CLIENT_MAX,
};
use tokio::net::TcpListener;

/// `kauri nameserver [-port P] [-bind ADDR] [-key SECRET]`: runs the server in the
/// foreground (the key may come from [`KEY_VAR`] instead, the [`Limits`] from their
/// variables). Prints one line, `kauri nameserver listening on ADDR:PORT`, once it listens.
pub async fn run(args: &[String]) -> i32 {
    let limits = match Limits::from_env() {
        Ok(l) => l,
        Err(e) => {
            say!("kauri nameserver: {e}");
            return 2;
        }
    };
    let (port, bind, key) = match parse_args(args, key_from_env()) {
        Ok(Invocation::Serve { port, bind, key }) => (port, bind, key),
        Ok(Invocation::Help) => {
            show!("usage: kauri nameserver [-port P (default {DEFAULT_PORT})] [-bind ADDR (default 0.0.0.0)] [-key SECRET (or {KEY_VAR}): clients must present it]");
            show!("limits: {MAX_CLIENTS_VAR} (default {CLIENTS_MAX}) clients at once, {MAX_NAMES_VAR} (default {NAMES_MAX}) names, {MAX_NAMES_PER_CLIENT_VAR} (default {NAMES_PER_CLIENT_MAX}) per client; request lines of at most {LINE_MAX} bytes");
            return 0;
        }
        Err(e) => {
            say!("kauri nameserver: {e}");
            return 2;
        }
    };
    let listener = match TcpListener::bind((bind.as_str(), port)).await {
        Ok(l) => l,
        Err(e) => {
            say!("kauri nameserver: cannot listen on {bind}:{port}: {e}");
            return 1;
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    show!("kauri nameserver listening on {addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = serve(listener, key, limits) => 0,
        _ = tokio::signal::ctrl_c() => 0,
        _ = async { match &mut term { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => 0,
    }
}

/// What `kauri nameserver ARGS` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Invocation {
    /// Serve on `bind:port`, wanting `key` from clients when set.
    Serve {
        port: u16,
        bind: String,
        key: Option<String>,
    },
    /// Print the usage.
    Help,
}

/// A mistake on `kauri nameserver`'s command line (exit status 2); each prints the line
/// after `kauri nameserver: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NameserverUsageError {
    /// An option the `kauri-nameserver` page does not list (without its dashes).
    #[error("unknown argument {0} (try -help)")]
    Unknown(String),
    /// `-port` without a port number.
    #[error("-port needs a port number")]
    NeedsPort,
    /// `-bind` without an address.
    #[error("-bind needs an address")]
    NeedsAddress,
    /// `-key` without a secret.
    #[error("-key needs a secret")]
    NeedsSecret,
}

/// Parses `[-port P] [-bind ADDR] [-key SECRET] [-help]` (any number of dashes, `-name=value`
/// too); `key` is the secret from the environment, which `-key` overrides. A name is known
/// through the `kauri-nameserver` page's table only.
fn parse_args(args: &[String], key: Option<String>) -> Result<Invocation, NameserverUsageError> {
    let (mut port, mut bind, mut key) = (DEFAULT_PORT, "0.0.0.0".to_string(), key);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let a = a.trim_start_matches('-');
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (a, None),
        };
        if super::doc::KAURI_NAMESERVER.find(name).is_none() {
            return Err(NameserverUsageError::Unknown(a.to_string()));
        }
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match name {
            "port" | "p" => match value().and_then(|v| v.parse().ok()) {
                Some(p) => port = p,
                None => return Err(NameserverUsageError::NeedsPort),
            },
            "bind" => match value() {
                Some(b) => bind = b,
                None => return Err(NameserverUsageError::NeedsAddress),
            },
            "key" => match value().filter(|k| !k.is_empty()) {
                Some(k) => key = Some(k),
                None => return Err(NameserverUsageError::NeedsSecret),
            },
            "h" | "help" => return Ok(Invocation::Help),
            _ => return Err(NameserverUsageError::Unknown(a.to_string())),
        }
    }
    Ok(Invocation::Serve { port, bind, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// Every option of the `kauri-nameserver` page is parsed, and one outside it is unknown.
    #[test]
    fn every_page_option_is_parsed() {
        for o in super::super::doc::KAURI_NAMESERVER.opts() {
            for name in o.all_names() {
                let mut a = vec![name.to_string()];
                a.extend((0..o.arg.words()).map(|_| "1".to_string()));
                if let Err(e) = parse_args(&a, None) {
                    assert!(!matches!(e, NameserverUsageError::Unknown(_)), "{a:?}: {e}");
                }
            }
        }
        assert_eq!(
            parse_args(&args(&["-nope"]), None),
            Err(NameserverUsageError::Unknown("nope".into()))
        );
        assert_eq!(
            parse_args(&args(&["--port=7", "-bind", "::1"]), Some("k".into())),
            Ok(Invocation::Serve {
                port: 7,
                bind: "::1".into(),
                key: Some("k".into())
            })
        );
        assert_eq!(parse_args(&args(&["-h"]), None), Ok(Invocation::Help));
        assert_eq!(
            parse_args(&args(&["-key"]), None),
            Err(NameserverUsageError::NeedsSecret)
        );
    }

    /// Each mistake prints the line `kauri nameserver` printed when its errors were text.
    #[test]
    fn each_usage_error_prints_its_line() {
        for (a, line) in [
            (&["--nope=1"][..], "unknown argument nope=1 (try -help)"),
            (&["-port", "x"][..], "-port needs a port number"),
            (&["-bind"][..], "-bind needs an address"),
            (&["-key="][..], "-key needs a secret"),
        ] {
            let e = parse_args(&args(a), None).unwrap_err();
            assert_eq!(e.to_string(), line, "{a:?}");
        }
    }

    /// With no argument the server listens on every IPv4 address, on port 6392, for any
    /// client (no key unless the environment gives one).
    #[test]
    fn the_server_listens_on_every_address_at_6392_by_default() {
        assert_eq!(
            parse_args(&[], None),
            Ok(Invocation::Serve {
                port: 6392,
                bind: "0.0.0.0".into(),
                key: None
            })
        );
    }
}
