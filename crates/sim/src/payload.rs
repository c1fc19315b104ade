//! The bytes of every message, derived from (workload seed, stream, op)
//! alone, so the sender can fill its buffers and the checker can recompute
//! what must arrive without either keeping copies.
//!
//! A message of 8 bytes or more starts with a header naming its stream and
//! op number, which makes a misdelivered message obvious in a trace; the
//! rest is pseudo-random so that two messages practically never agree.

/// What a buffer holds: the data a SEND or WRITE carries, or the data a
/// READ fetches from the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Sent by SEND or WRITE.
    Message,
    /// The remote source of a READ.
    ReadSource,
}

/// Length of the stream/op header.
pub const HEADER_LEN: usize = 8;

/// The `len` bytes of op `op` of stream `stream` in workload `seed`.
pub fn bytes(seed: u64, stream: usize, op: usize, kind: Kind, len: usize) -> Vec<u8> {
    let tag: u8 = match kind {
        Kind::Message => b'M',
        Kind::ReadSource => b'R',
    };
    let mut rng = fastrand::Rng::with_seed(mix(seed, stream as u64, op as u64, tag.into()));
    let mut out = vec![0; len];
    rng.fill(&mut out);
    if len >= HEADER_LEN {
        out[0] = tag;
        out[1] = 0xA5;
        out[2..4].copy_from_slice(&(stream as u16).to_be_bytes());
        out[4..8].copy_from_slice(&(op as u32).to_be_bytes());
    }
    out
}

/// Parses a header: (stream, op), for traces.
pub fn header(data: &[u8]) -> Option<(u16, u32)> {
    let h = data.get(..HEADER_LEN)?;
    (h[1] == 0xA5).then(|| {
        (
            u16::from_be_bytes([h[2], h[3]]),
            u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
        )
    })
}

fn mix(seed: u64, stream: u64, op: u64, tag: u64) -> u64 {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    for v in [stream, op, tag] {
        x = (x ^ v).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 31;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_distinct() {
        let a = bytes(1, 2, 3, Kind::Message, 100);
        assert_eq!(a, bytes(1, 2, 3, Kind::Message, 100));
        assert_ne!(a, bytes(1, 2, 4, Kind::Message, 100));
        assert_ne!(a, bytes(1, 3, 3, Kind::Message, 100));
        assert_ne!(a, bytes(2, 2, 3, Kind::Message, 100));
        assert_ne!(a, bytes(1, 2, 3, Kind::ReadSource, 100));
        assert_eq!(header(&a), Some((2, 3)));
        assert_eq!(bytes(1, 2, 3, Kind::Message, 0), Vec::<u8>::new());
        assert_eq!(bytes(1, 2, 3, Kind::Message, 5).len(), 5);
    }
}
