//! The byte codec shared by the structured targets: a reader that never
//! fails (missing bytes read as zero, so every input means something) and
//! the writer that the seed corpus is made with. Each field type is read
//! and written the same way, which is what lets a seed be built from typed
//! values and still decode to exactly those values.

/// Reads fields from fuzz input; past the end every byte is zero.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from the start of `data`.
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { rest: data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next field.
    pub fn take<T: Field>(&mut self) -> T {
        T::take(self)
    }

    /// Up to `len` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (head, tail) = self.rest.split_at(len.min(self.rest.len()));
        self.rest = tail;
        head
    }

    fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        let got = self.bytes(N);
        out[..got.len()].copy_from_slice(got);
        out
    }
}

/// Builds inputs in the format [`Reader`] reads.
#[derive(Debug, Default)]
pub struct Writer {
    /// The bytes written so far.
    pub out: Vec<u8>,
}

impl Writer {
    /// Appends a field.
    pub fn put<T: Field>(&mut self, value: T) {
        value.put(self);
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }
}

/// A fixed-size field: big-endian integers and one-byte booleans.
pub trait Field: Copy {
    /// Reads the field.
    fn take(r: &mut Reader<'_>) -> Self;
    /// Writes the field.
    fn put(self, w: &mut Writer);
}

macro_rules! int_field {
    ($($ty:ty),*) => {$(
        impl Field for $ty {
            fn take(r: &mut Reader<'_>) -> Self {
                <$ty>::from_be_bytes(r.array())
            }
            fn put(self, w: &mut Writer) {
                w.bytes(&self.to_be_bytes());
            }
        }
    )*};
}
int_field!(u8, i8, u16, u32, u64);

impl Field for bool {
    fn take(r: &mut Reader<'_>) -> Self {
        r.take::<u8>() & 1 == 1
    }
    fn put(self, w: &mut Writer) {
        w.put(u8::from(self));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_missing_bytes_read_as_zero() {
        let mut w = Writer::default();
        w.put(0xABu8);
        w.put(-3i8);
        w.put(0x1234u16);
        w.put(true);
        w.put(0xDEAD_BEEFu32);
        w.put(u64::MAX - 1);
        let mut r = Reader::new(&w.out);
        assert_eq!(r.take::<u8>(), 0xAB);
        assert_eq!(r.take::<i8>(), -3);
        assert_eq!(r.take::<u16>(), 0x1234);
        assert!(r.take::<bool>());
        assert_eq!(r.take::<u32>(), 0xDEAD_BEEF);
        assert_eq!(r.take::<u64>(), u64::MAX - 1);
        assert!(r.is_empty());
        assert_eq!(r.take::<u32>(), 0);

        let mut short = Reader::new(&[0x12]);
        assert_eq!(short.take::<u16>(), 0x1200);
        assert_eq!(short.bytes(4), &[] as &[u8]);
    }
}
