//! A link's framing: a 4-byte big-endian length, then a bincode body of at most
//! [`FRAME_MAX`] bytes. Encodes a message once ([`encode`]) so that one frame can go to many
//! children, and hands a received frame back as it came ([`recv_frame`]) so it can be passed
//! on without encoding it again.
//!
//! It reads from and writes to whatever stream it is given; it owns no socket and knows no
//! message in particular (any serde type frames the same way).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::io;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest frame a link accepts (a fence delta of a very large job fits easily).
pub const FRAME_MAX: usize = 256 * 1024 * 1024;

/// Encodes one frame (length and body), ready to be written as is: to one link, or to every
/// child link at once without encoding the message again for each.
pub fn encode<M: Serialize>(msg: &M) -> io::Result<Bytes> {
    let bad = |e| io::Error::new(io::ErrorKind::InvalidData, e);
    let len = bincode::serialized_size(msg).map_err(bad)? as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut frame = Vec::with_capacity(4 + len);
    frame.extend_from_slice(&(len as u32).to_be_bytes());
    bincode::serialize_into(&mut frame, msg).map_err(bad)?;
    Ok(Bytes::from(frame))
}

/// Writes one frame.
pub async fn send<W: AsyncWrite + Unpin, M: Serialize>(w: &mut W, msg: &M) -> io::Result<()> {
    w.write_all(&encode(msg)?).await
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn recv<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> io::Result<Option<M>> {
    Ok(recv_frame(r).await?.map(|(m, _)| m))
}

/// Reads one frame and returns it decoded and as it came (length and body), so that a
/// message for the children can be passed on without encoding it again.
pub async fn recv_frame<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> io::Result<Option<(M, Bytes)>> {
    let mut len_bytes = [0u8; 4];
    match r.read_exact(&mut len_bytes).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len_bytes) as usize;
    if len > FRAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut frame = vec![0u8; 4 + len];
    frame[..4].copy_from_slice(&len_bytes);
    r.read_exact(&mut frame[4..]).await?;
    let m = bincode::deserialize(&frame[4..])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Some((m, Bytes::from(frame))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::msg::Up;

    #[test]
    fn frames_round_trip_and_bad_frames_are_refused() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let msg = Up::Fence {
                epoch: 3,
                delta: crate::kvs::Packed::from_pairs([("k", "v")]),
            };
            let mut buf = Vec::new();
            send(&mut buf, &msg).await.unwrap();
            let got: Up = recv(&mut &buf[..]).await.unwrap().unwrap();
            assert_eq!(got, msg);
            // the frame as it came is the frame that was sent: it can be passed on as is
            let (got, frame): (Up, Bytes) = recv_frame(&mut &buf[..]).await.unwrap().unwrap();
            assert_eq!((got, &frame[..]), (msg.clone(), &encode(&msg).unwrap()[..]));
            let none: Option<Up> = recv(&mut &b""[..]).await.unwrap();
            assert!(none.is_none());
            let huge = [0xffu8, 0xff, 0xff, 0xff];
            assert!(recv::<_, Up>(&mut &huge[..]).await.is_err());
            let garbage = [0u8, 0, 0, 3, 200, 201, 202];
            assert!(recv::<_, Up>(&mut &garbage[..]).await.is_err());
        });
    }
}
