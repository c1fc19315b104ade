//! Bounds-checked big-endian readers and writers over byte slices.
//!
//! Headers are decoded field by field through these instead of by indexing,
//! so that no input can make a parser panic: the length is checked once when
//! the cursor is created, and every later step still returns an error
//! rather than trusting that check.

use crate::error::{HeaderKind, WireError};

/// Reads big-endian fields from the front of a slice.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    header: HeaderKind,
    needed: usize,
    available: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading `header`, which needs `needed` bytes of `buf`.
    pub(crate) fn new(buf: &'a [u8], header: HeaderKind, needed: usize) -> Result<Self, WireError> {
        let available = buf.len();
        if available < needed {
            return Err(WireError::Truncated {
                header,
                needed,
                available,
            });
        }
        Ok(Self {
            rest: buf,
            header,
            needed,
            available,
        })
    }

    fn short(&self) -> WireError {
        WireError::Truncated {
            header: self.header,
            needed: self.needed,
            available: self.available,
        }
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let (head, tail) = self.rest.split_first_chunk::<N>().ok_or(self.short())?;
        self.rest = tail;
        Ok(*head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        self.array().map(u16::from_be_bytes)
    }

    pub(crate) fn u24(&mut self) -> Result<u32, WireError> {
        let [a, b, c] = self.array::<3>()?;
        Ok(u32::from_be_bytes([0, a, b, c]))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        self.array().map(u32::from_be_bytes)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        self.array().map(u64::from_be_bytes)
    }
}

/// Writes big-endian fields to the front of a mutable slice.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    rest: &'a mut [u8],
    header: HeaderKind,
    needed: usize,
    available: usize,
}

impl<'a> Writer<'a> {
    /// Starts writing `header`, which needs `needed` bytes of `buf`.
    pub(crate) fn new(
        buf: &'a mut [u8],
        header: HeaderKind,
        needed: usize,
    ) -> Result<Self, WireError> {
        let available = buf.len();
        if available < needed {
            return Err(WireError::BufferTooSmall {
                header,
                needed,
                available,
            });
        }
        Ok(Self {
            rest: buf,
            header,
            needed,
            available,
        })
    }

    pub(crate) fn array<const N: usize>(&mut self, bytes: [u8; N]) -> Result<(), WireError> {
        let err = WireError::BufferTooSmall {
            header: self.header,
            needed: self.needed,
            available: self.available,
        };
        let rest = core::mem::take(&mut self.rest);
        let (head, tail) = rest.split_first_chunk_mut::<N>().ok_or(err)?;
        *head = bytes;
        self.rest = tail;
        Ok(())
    }

    pub(crate) fn u8(&mut self, v: u8) -> Result<(), WireError> {
        self.array([v])
    }

    pub(crate) fn u16(&mut self, v: u16) -> Result<(), WireError> {
        self.array(v.to_be_bytes())
    }

    /// Writes the low 24 bits of `v`; callers pass validated 24-bit values.
    pub(crate) fn u24(&mut self, v: u32) -> Result<(), WireError> {
        let [_, a, b, c] = v.to_be_bytes();
        self.array([a, b, c])
    }

    pub(crate) fn u32(&mut self, v: u32) -> Result<(), WireError> {
        self.array(v.to_be_bytes())
    }

    pub(crate) fn u64(&mut self, v: u64) -> Result<(), WireError> {
        self.array(v.to_be_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_checks_length_up_front() {
        let err = Reader::new(&[1, 2, 3], HeaderKind::Reth, 4).unwrap_err();
        assert_eq!(
            err,
            WireError::Truncated {
                header: HeaderKind::Reth,
                needed: 4,
                available: 3
            }
        );
    }

    #[test]
    fn reader_reads_big_endian() {
        let buf = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let mut r = Reader::new(&buf, HeaderKind::Bth, 10).unwrap();
        assert_eq!(r.u8().unwrap(), 1);
        assert_eq!(r.u24().unwrap(), 0x02_0304);
        assert_eq!(r.u16().unwrap(), 0x0506);
        assert_eq!(r.u32().unwrap(), 0x0708_090A);
        assert!(r.u8().is_err());
    }

    #[test]
    fn writer_writes_big_endian_and_stops_at_end() {
        let mut buf = [0u8; 6];
        let mut w = Writer::new(&mut buf, HeaderKind::Bth, 6).unwrap();
        w.u24(0xAA_BBCC).unwrap();
        w.u16(0x0102).unwrap();
        w.u8(7).unwrap();
        assert!(w.u64(0).is_err());
        assert_eq!(buf, [0xAA, 0xBB, 0xCC, 1, 2, 7]);
        assert!(Writer::new(&mut buf, HeaderKind::Bth, 7).is_err());
    }
}
