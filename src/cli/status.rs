//! `kauri --status [--stacks] [PID]`: asks each running kauri of this user on this host where
//! its ranks are, through the socket it listens on (`tree::status`), and prints the answers.

use crate::tree::status::{socket_dir, CLIENT_WAIT};
use std::io::{Read, Write};
use std::path::Path;

/// `kauri --status [--stacks] [PID]` (the words after `--status`): see [`client`].
pub fn run(args: &[String]) -> i32 {
    let (mut pid, mut stacks) = (None, false);
    for a in args {
        match a.as_str() {
            "--stacks" | "-stacks" => stacks = true,
            p => match p.parse::<u32>() {
                Ok(n) if pid.is_none() && n > 0 => pid = Some(n),
                _ => {
                    say!("kauri: --status {p:?}: expected [--stacks] [PID]");
                    return 255;
                }
            },
        }
    }
    client(pid, stacks)
}

/// `kauri --status [--stacks] [PID]`: prints the diagnosis of each kauri job of this user on
/// this host (or of the one with that pid); returns the exit status (1 when there is none).
/// A socket directory that is there but not a private directory of this user is not read:
/// whoever could have put it there could have planted its sockets, and their answers.
pub fn client(pid: Option<u32>, stacks: bool) -> i32 {
    let dir = socket_dir();
    if std::fs::symlink_metadata(&dir).is_ok() {
        if let Err(e) = crate::proto::pmix::check_private_dir(&dir) {
            say!("kauri: {e}");
            return 1;
        }
    }
    let mut pids: Vec<u32> = match pid {
        Some(p) => vec![p],
        None => std::fs::read_dir(&dir)
            .map(|rd| {
                rd.filter_map(|e| {
                    let name = e.ok()?.file_name().into_string().ok()?;
                    name.strip_suffix(".sock")?.parse().ok()
                })
                .collect()
            })
            .unwrap_or_default(),
    };
    pids.sort_unstable();
    let mut answered = 0;
    for p in pids {
        let path = dir.join(format!("{p}.sock"));
        match ask(&path, stacks) {
            Ok(text) => {
                if answered > 0 {
                    show!("");
                }
                crate::console::out(&text);
                answered += 1;
            }
            Err(e) => {
                let alive = std::path::Path::new(&format!("/proc/{p}")).exists();
                if !alive {
                    // Left by a kauri that was killed: the directory is this user's.
                    let _ = std::fs::remove_file(&path);
                }
                if pid.is_some() {
                    let why = if alive {
                        e.to_string()
                    } else {
                        "no such process".into()
                    };
                    say!(
                        "kauri: no answer from kauri {p} ({}): {why}",
                        path.display()
                    );
                    return 1;
                }
            }
        }
    }
    if answered == 0 {
        say!(
            "kauri: no kauri job of yours is running on this host (no socket answered in {})",
            dir.display()
        );
        return 1;
    }
    0
}

/// Asks the kauri listening on `path`.
fn ask(path: &Path, stacks: bool) -> std::io::Result<String> {
    let mut s = std::os::unix::net::UnixStream::connect(path)?;
    s.set_read_timeout(Some(CLIENT_WAIT))?;
    let req: &[u8] = if stacks {
        b"status stacks\n"
    } else {
        b"status\n"
    };
    s.write_all(req)?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    if text.is_empty() {
        return Err(std::io::Error::other("it closed the connection unanswered"));
    }
    Ok(text)
}
