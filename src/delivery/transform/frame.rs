//! The frames hookbox and its transform process speak over the child's
//! stdin and stdout: a little-endian `u32` length, then that many bytes.
//!
//! * First, hookbox sends the programs: a JSON array of their texts; the
//!   process answers with an empty reply once it has compiled them.
//! * Then each request: `u32` program index, `u32` length of the event's
//!   metadata (JSON, the program's `$event`), the metadata, the body.
//! * Each answer: a tag byte ([`Reply`]'s variant) and its bytes.

use std::io::{self, Read, Write};

use super::eval::Reply;

/// The largest frame either side accepts: well past any body hookbox
/// stores (`server.max_body_bytes`), short of a length read from garbage.
pub const MAX_FRAME: usize = 1 << 30;

const JSON: u8 = 0;
const TEXT: u8 = 1;
const NOTHING: u8 = 2;
const FAILED: u8 = 3;

/// A request's payload: which program, `$event`, the body.
pub fn request(program: u32, event: &[u8], body: &[u8]) -> Vec<u8> {
    let len = 8 + event.len() + body.len();
    let mut frame = Vec::with_capacity(4 + len);
    frame.extend_from_slice(&(len as u32).to_le_bytes());
    frame.extend_from_slice(&program.to_le_bytes());
    frame.extend_from_slice(&(event.len() as u32).to_le_bytes());
    frame.extend_from_slice(event);
    frame.extend_from_slice(body);
    frame
}

/// Splits a request's payload into program, `$event` and body.
pub fn parse_request(payload: &[u8]) -> Option<(u32, &[u8], &[u8])> {
    let program = u32::from_le_bytes(payload.get(0..4)?.try_into().ok()?);
    let event_len = u32::from_le_bytes(payload.get(4..8)?.try_into().ok()?) as usize;
    let event = payload.get(8..8usize.checked_add(event_len)?)?;
    Some((program, event, &payload[8 + event_len..]))
}

/// A reply's frame, length included.
pub fn reply(reply: &Reply) -> Vec<u8> {
    let (tag, bytes): (u8, &[u8]) = match reply {
        Reply::Json(b) => (JSON, b),
        Reply::Text(b) => (TEXT, b),
        Reply::Nothing => (NOTHING, &[]),
        Reply::Failed(why) | Reply::Unavailable(why) => (FAILED, why.as_bytes()),
    };
    let mut frame = Vec::with_capacity(5 + bytes.len());
    frame.extend_from_slice(&(bytes.len() as u32 + 1).to_le_bytes());
    frame.push(tag);
    frame.extend_from_slice(bytes);
    frame
}

/// A reply's payload (tag and bytes) as a [`Reply`].
pub fn parse_reply(mut payload: Vec<u8>) -> Option<Reply> {
    if payload.is_empty() {
        return None;
    }
    let tag = payload.remove(0);
    Some(match tag {
        JSON => Reply::Json(payload),
        TEXT => Reply::Text(payload),
        NOTHING => Reply::Nothing,
        FAILED => Reply::Failed(String::from_utf8_lossy(&payload).into_owned()),
        _ => return None,
    })
}

/// A frame with its length: the programs' list, sent first.
pub fn with_length(payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Reads one frame's payload; `None` at the end of the stream.
pub fn read_sync(from: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match from.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "frame too long"));
    }
    let mut payload = vec![0u8; len];
    from.read_exact(&mut payload)?;
    Ok(Some(payload))
}

/// Whether `buffered` starts with a whole frame.
pub fn whole_in(buffered: &[u8]) -> bool {
    match buffered.get(..4) {
        Some(len) => {
            let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
            buffered.len() - 4 >= len
        }
        None => false,
    }
}

/// Writes a whole frame and flushes it.
pub fn write_sync(to: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    to.write_all(frame)?;
    to.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_read_back_as_written() {
        let frame = request(3, b"{\"id\":1}", b"body bytes");
        let payload = read_sync(&mut &frame[..]).unwrap().unwrap();
        assert_eq!(
            parse_request(&payload),
            Some((3, &b"{\"id\":1}"[..], &b"body bytes"[..]))
        );
        assert_eq!(parse_request(&[1, 0, 0, 0, 200, 0, 0, 0]), None);
        for r in [
            Reply::Json(b"{}".to_vec()),
            Reply::Text(b"hi".to_vec()),
            Reply::Nothing,
            Reply::Failed("why".into()),
        ] {
            let frame = reply(&r);
            let payload = read_sync(&mut &frame[..]).unwrap().unwrap();
            assert_eq!(parse_reply(payload), Some(r));
        }
        assert_eq!(read_sync(&mut &[][..]).unwrap(), None);
    }

    #[test]
    fn a_whole_frame_is_told_from_part_of_one() {
        let frame = request(0, b"{}", b"body");
        assert!(whole_in(&frame));
        assert!(whole_in(&[frame.clone(), frame.clone()].concat()));
        assert!(!whole_in(&frame[..frame.len() - 1]));
        assert!(!whole_in(&frame[..3]));
        assert!(!whole_in(&[]));
        assert!(whole_in(&[0, 0, 0, 0]));
    }
}
