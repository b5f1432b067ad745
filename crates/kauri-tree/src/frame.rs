//! A link's framing: a 4-byte big-endian length, then a bincode body of at most
//! [`FRAME_MAX`] bytes. Encodes a message once ([`encode`]) so that one frame can go to many
//! children, and hands a received frame back as it came ([`recv_frame`]) so it can be passed
//! on without encoding it again.
//!
//! It reads from and writes to whatever stream it is given; it owns no socket and knows no
//! message in particular (any serde type frames the same way).

use bytes::{BufMut, Bytes, BytesMut};
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
    recv_limited(r, FRAME_MAX).await
}

/// The largest frame read before the peer has proved it holds the job key: a `Challenge` or
/// a `Hello` (a nonce, an id, a host name, a 32-byte MAC) is well under this, and a peer that
/// has not authenticated must not make a link allocate or read [`FRAME_MAX`] bytes.
pub const HANDSHAKE_FRAME_MAX: usize = 4096;

/// Reads one frame of at most `max` bytes (after its length); a longer one is refused before
/// its body is read. `Ok(None)` at a clean end of stream.
pub async fn recv_limited<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
    max: usize,
) -> io::Result<Option<M>> {
    Ok(read_frame(r, max).await?.map(|(m, _)| m))
}

/// Reads one frame and returns it decoded and as it came (length and body), so that a
/// message for the children can be passed on without encoding it again.
pub async fn recv_frame<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> io::Result<Option<(M, Bytes)>> {
    read_frame(r, FRAME_MAX).await
}

/// Reads one frame whose body is at most `max` bytes; the length is checked before anything
/// is allocated for the body or read of it.
async fn read_frame<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
    r: &mut R,
    max: usize,
) -> io::Result<Option<(M, Bytes)>> {
    FrameReader::default().next(r, max).await
}

/// The smallest frame a [`FrameReader`] reads into a buffer it may reuse: smaller ones come
/// from the allocator's free lists as cheaply, and must not pin a big buffer.
const REUSE_MIN: usize = 16 * 1024;

/// The largest buffer a [`FrameReader`] keeps for reuse: a bigger frame (rare, and a link
/// may never see another) is read into memory of its own and not held once it is used.
const REUSE_MAX: usize = 16 * 1024 * 1024;

/// One link's reader of frames. Each frame is read into a buffer of its own and handed out
/// as it came (`Bytes`, which the message decoded from it shares); the reader remembers the
/// last two big ones and reads the next big frame into one of them that nobody holds any
/// more. An agent reads its parent's link with one. (A parent's links to its children do
/// not: a root with a thousand children would keep two buffers for each, and what comes up
/// is small contributions and output that is handed on at once.) The big frames from a
/// parent are fence results: a PMI fence's merged delta, which the store keeps until the next
/// fence's replaces it (so two buffers take turns), and a PMIx fence's blobs, dropped once
/// the server has them. Read into reused memory, a fence's data lands in pages already
/// mapped and warm, not in a fresh allocation that the kernel must fault in and clear (which
/// at 83 KB or more glibc may map and unmap again each time).
#[derive(Default)]
pub struct FrameReader {
    /// The last big frames read, newest first; at most two.
    recent: Vec<Bytes>,
    /// Buffers it allocated for big frames (the rest were reused).
    #[cfg(test)]
    fresh: usize,
}

impl FrameReader {
    /// Reads one frame whose body is at most `max` bytes (refused by its length, before
    /// anything is allocated or read for its body) and returns it decoded and as it came.
    /// `Ok(None)` at a clean end of stream.
    pub async fn next<R: AsyncRead + Unpin, M: for<'de> Deserialize<'de>>(
        &mut self,
        r: &mut R,
        max: usize,
    ) -> io::Result<Option<(M, Bytes)>> {
        match self.next_raw(r, max).await? {
            Some(frame) => decode_frame(frame).map(Some),
            None => Ok(None),
        }
    }

    /// [`FrameReader::next`] without the decoding: the frame (length and body) as it came.
    pub async fn next_raw<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        max: usize,
    ) -> io::Result<Option<Bytes>> {
        let mut len_bytes = [0u8; 4];
        match r.read_exact(&mut len_bytes).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes(len_bytes) as usize;
        if len > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame of {len} bytes, more than {max}"),
            ));
        }
        let want = 4 + len;
        let reuse = (REUSE_MIN..=REUSE_MAX).contains(&want);
        let mut frame = if reuse {
            self.buffer(want)
        } else {
            BytesMut::with_capacity(want)
        };
        frame.extend_from_slice(&len_bytes);
        read_body(r, &mut frame, len).await?;
        let frame = frame.freeze();
        if reuse {
            self.recent.insert(0, frame.clone());
            self.recent.truncate(2);
        }
        Ok(Some(frame))
    }

    /// An empty buffer of at least `want` bytes: a remembered one that nobody else holds and
    /// that is big enough, or a new one. A remembered buffer nobody holds that is too small
    /// is let go.
    fn buffer(&mut self, want: usize) -> BytesMut {
        while let Some(i) = self.recent.iter().position(Bytes::is_unique) {
            if let Ok(mut m) = self.recent.remove(i).try_into_mut() {
                if m.capacity() >= want {
                    m.clear();
                    return m;
                }
            }
        }
        #[cfg(test)]
        {
            self.fresh += 1;
        }
        BytesMut::with_capacity(want)
    }
}

/// Appends the next `len` bytes of `r` to `buf`, read into its spare room as they come (not
/// zeroed first: a fence's merged delta is the biggest frame, and every agent reads it).
/// Reads nothing past them; a stream that ends before is an `UnexpectedEof`.
pub async fn read_body<R: AsyncRead + Unpin, B: Body>(
    r: &mut R,
    buf: &mut B,
    len: usize,
) -> io::Result<()> {
    let end = buf.filled() + len;
    buf.room_for(len);
    let mut body = r.take(len as u64);
    while buf.filled() < end {
        if body.read_buf(buf).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// A buffer that [`read_body`] appends to.
pub trait Body: BufMut {
    /// The bytes in it.
    fn filled(&self) -> usize;
    /// Makes room for `n` more bytes (exactly, where the buffer can say so).
    fn room_for(&mut self, n: usize);
}

impl Body for Vec<u8> {
    fn filled(&self) -> usize {
        self.len()
    }
    fn room_for(&mut self, n: usize) {
        self.reserve_exact(n);
    }
}

impl Body for BytesMut {
    fn filled(&self) -> usize {
        self.len()
    }
    fn room_for(&mut self, n: usize) {
        self.reserve(n);
    }
}

/// Decodes one whole frame (length and body) that is already in memory, and hands it back
/// for passing on. The key-value data in it (a fence's merged delta) is not copied out: the
/// message's [`kauri_proto::kvs::Packed`] shares the frame's buffer.
pub fn decode_frame<M: for<'de> Deserialize<'de>>(frame: Bytes) -> io::Result<(M, Bytes)> {
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let body = frame
        .get(4..)
        .ok_or_else(|| bad("a frame without its length".into()))?;
    let m = kauri_proto::kvs::from_frame(&frame, || bincode::deserialize(body))
        .map_err(|e| bad(e.to_string()))?;
    Ok((m, frame))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Up;

    fn hello(host_len: usize) -> Up {
        Up::Hello {
            id: 7,
            host: "h".repeat(host_len),
            mac: vec![1; 32],
        }
    }

    #[test]
    fn a_handshake_frame_over_the_limit_is_refused_before_its_body() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            // a Hello that fits passes
            let small = encode(&hello(64)).unwrap();
            let mut r = &small[..];
            let got: Option<Up> = recv_limited(&mut r, HANDSHAKE_FRAME_MAX).await.unwrap();
            assert_eq!(got, Some(hello(64)));
            // a well-formed Hello one byte over the limit is refused, its body left unread
            let big = encode(&hello(HANDSHAKE_FRAME_MAX)).unwrap();
            let len = big.len() - 4;
            assert!(len > HANDSHAKE_FRAME_MAX);
            let mut r = &big[..];
            let e = recv_limited::<_, Up>(&mut r, HANDSHAKE_FRAME_MAX)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert_eq!(r.len(), len, "the body was read");
            // exactly at the limit is fine
            let body = bincode::serialize(&hello(0)).unwrap();
            let at = encode(&hello(HANDSHAKE_FRAME_MAX - body.len())).unwrap();
            assert_eq!(at.len() - 4, HANDSHAKE_FRAME_MAX);
            let got: Option<Up> = recv_limited(&mut &at[..], HANDSHAKE_FRAME_MAX)
                .await
                .unwrap();
            assert!(got.is_some());
        });
    }

    /// The hub's and the agent's first read, over TCP: a peer that announces a large frame and
    /// then sends nothing is refused at once, not waited for (nor given the memory it asked).
    #[test]
    fn an_unauthenticated_peer_announcing_a_large_frame_is_refused_at_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let mut peer = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut sock, _) = listener.accept().await.unwrap();
            // 64 MiB announced (under FRAME_MAX), a few bytes sent, the connection held open
            peer.write_all(&(64u32 << 20).to_be_bytes()).await.unwrap();
            peer.write_all(b"abc").await.unwrap();
            let read = recv_limited::<_, Up>(&mut sock, HANDSHAKE_FRAME_MAX);
            let got = tokio::time::timeout(std::time::Duration::from_secs(2), read)
                .await
                .expect("waited for the body of an unauthenticated frame");
            let e = got.unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(
                e.to_string().contains(&HANDSHAKE_FRAME_MAX.to_string()),
                "{e}"
            );
            drop(peer);
        });
    }

    #[test]
    fn frames_round_trip_and_bad_frames_are_refused() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let msg = Up::Fence {
                epoch: 3,
                delta: kauri_proto::kvs::Packed::from_pairs([("k", "v")]),
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

    #[test]
    fn a_decoded_delta_shares_the_frame() {
        use crate::msg::Down;
        use kauri_proto::kvs::{Kvs, Packed};
        let msg = Down::FenceDone {
            epoch: 1,
            delta: Packed::from_pairs([("key", "value")]),
            same_keys: false,
        };
        let (got, frame): (Down, Bytes) = decode_frame(encode(&msg).unwrap()).unwrap();
        assert_eq!(got, msg);
        let Down::FenceDone { delta, .. } = got else {
            unreachable!()
        };
        let mut kvs = Kvs::default();
        kvs.commit_packed(&delta).unwrap();
        let v = kvs.get("key").unwrap();
        let (f, p) = (frame.as_ptr() as usize, v.as_ptr() as usize);
        assert!(p > f && p < f + frame.len(), "the value is a copy");
        // outside a frame's decoding, a delta is a copy, as before
        let copied: Down = bincode::deserialize(&frame[4..]).unwrap();
        assert_eq!(copied, msg);
        // a cut frame is an error, not a panic
        assert!(decode_frame::<Down>(frame.slice(..frame.len() - 1)).is_err());
        assert!(decode_frame::<Down>(frame.slice(..2)).is_err());
    }

    #[test]
    fn decoded_pmix_blobs_share_the_frame() {
        use crate::msg::{Down, Up};
        let blobs = Bytes::from_static(b"every host's blob");
        let within = |frame: &Bytes, data: &Bytes| {
            let (f, p) = (frame.as_ptr() as usize, data.as_ptr() as usize);
            p > f && p + data.len() <= f + frame.len()
        };
        let down = Down::PmixFenceDone {
            epoch: 3,
            data: blobs.clone(),
        };
        let (got, frame): (Down, Bytes) = decode_frame(encode(&down).unwrap()).unwrap();
        assert_eq!(got, down);
        let Down::PmixFenceDone { data, .. } = got else {
            unreachable!()
        };
        assert!(within(&frame, &data), "the blobs are a copy");
        let up = Up::PmixFence {
            epoch: 3,
            data: blobs,
        };
        let (got, frame): (Up, Bytes) = decode_frame(encode(&up).unwrap()).unwrap();
        assert_eq!(got, up);
        let Up::PmixFence { data, .. } = got else {
            unreachable!()
        };
        assert!(within(&frame, &data), "the contribution is a copy");
        // outside a frame's decoding they are a copy, and a cut frame is an error
        let copied: Up = bincode::deserialize(&frame[4..]).unwrap();
        assert_eq!(copied, up);
        assert!(decode_frame::<Up>(frame.slice(..frame.len() - 1)).is_err());
    }

    #[test]
    fn a_body_is_read_whole_and_nothing_past_it() {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut r = &b"headbodytail"[..];
                let mut buf = b"<".to_vec();
                read_body(&mut r, &mut buf, 8).await.unwrap();
                assert_eq!(buf, b"<headbody");
                assert_eq!(r, b"tail");
                read_body(&mut r, &mut buf, 0).await.unwrap();
                let cut = read_body(&mut r, &mut buf, 5).await.unwrap_err();
                assert_eq!(cut.kind(), io::ErrorKind::UnexpectedEof);
            });
    }

    /// Frames of `len`-byte bodies, each filled with its own byte, one after another.
    fn frames(bodies: &[(usize, u8)]) -> Vec<u8> {
        let mut s = Vec::new();
        for &(len, b) in bodies {
            s.extend_from_slice(&(len as u32).to_be_bytes());
            s.extend(std::iter::repeat_n(b, len));
        }
        s
    }

    /// Reads every frame of `stream`, holding frame `i` when `keep[i]` (as a store holds a
    /// fence's delta) until the next one kept replaces it; each frame's address, and how many
    /// buffers the reader allocated for big frames.
    fn read_all(stream: &[u8], keep: &[bool]) -> (Vec<usize>, usize) {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut r = stream;
                let (mut reader, mut held, mut at) = (FrameReader::default(), None, Vec::new());
                while let Some(f) = reader.next_raw(&mut r, FRAME_MAX).await.unwrap() {
                    // its bytes are its own, whoever had the buffer before
                    assert!(
                        f[4..].iter().all(|&b| b == f[4]),
                        "frame {} mixed",
                        at.len()
                    );
                    if keep.get(at.len()).copied().unwrap_or(false) {
                        held = Some(f.clone());
                    }
                    at.push(f.as_ptr() as usize);
                }
                drop(held);
                (at, reader.fresh)
            })
    }

    #[test]
    fn a_big_frame_nobody_holds_is_read_into_the_buffer_of_the_last() {
        let big = 100 * 1024;
        let (at, fresh) = read_all(&frames(&[(big, 1), (big, 2), (big - 10, 3)]), &[]);
        assert_eq!(fresh, 1);
        assert!(at.iter().all(|&a| a == at[0]));
        // a bigger one needs a bigger buffer
        let (_, fresh) = read_all(&frames(&[(big, 1), (big + 1, 2)]), &[]);
        assert_eq!(fresh, 2);
    }

    #[test]
    fn a_held_frame_is_never_read_into_and_two_buffers_take_turns() {
        let big = 100 * 1024;
        let stream = frames(&[(big, 1), (big, 2), (big, 3), (big, 4)]);
        let (at, fresh) = read_all(&stream, &[true; 4]);
        assert_eq!(fresh, 2);
        assert_ne!(at[0], at[1]);
        assert_eq!((at[0], at[1]), (at[2], at[3]));
    }

    #[test]
    fn small_frames_between_big_ones_take_no_buffer_of_theirs() {
        let big = 100 * 1024;
        let stream = frames(&[(big, 1), (8, 2), (big, 3), (8, 4), (0, 0), (big, 5)]);
        let (at, fresh) = read_all(&stream, &[true, false, true, false, false, true]);
        assert_eq!(fresh, 2);
        assert_ne!(at[0], at[2]);
        assert_eq!(at[0], at[5]);
        // and a frame bigger than the reader keeps is never kept
        let huge = REUSE_MAX;
        let (_, fresh) = read_all(&frames(&[(huge, 1), (huge, 2)]), &[]);
        assert_eq!(fresh, 0);
    }
    #[test]
    fn a_frame_over_the_reader_s_limit_is_refused_and_a_cut_one_is_an_error() {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let stream = frames(&[(64, 1)]);
                let mut reader = FrameReader::default();
                let err = reader.next_raw(&mut &stream[..], 63).await.unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::InvalidData);
                let cut = &stream[..stream.len() - 1];
                let err = reader.next_raw(&mut &cut[..], 64).await.unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
                assert!(reader.next_raw(&mut &b""[..], 64).await.unwrap().is_none());
            });
    }
}
