//! The ACK Extended Transport Header and its syndrome.
//!
//! AETH (4 bytes): syndrome u8, MSN u24. The syndrome's bits 6:5 give its
//! type (bit 7 is reserved and must be 0): `00` ACK with a 5-bit credit
//! count, `01` RNR NAK with a 5-bit timer code, `11` NAK with a 5-bit code;
//! type `10` is reserved.

use crate::cursor::{Reader, Writer};
use crate::error::{HeaderKind, WireError};
use crate::header::Header;
use crate::u24::Msn;
use crate::AETH_LEN;

const TYPE_MASK: u8 = 0xE0;
const VALUE_MASK: u8 = 0x1F;
const TYPE_ACK: u8 = 0x00;
const TYPE_RNR_NAK: u8 = 0x20;
const TYPE_NAK: u8 = 0x60;

/// The reason a NAK gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder expected an earlier PSN; the
    /// requester resends from there (go-back-N).
    PsnSequenceError = 0,
    /// Invalid request (unsupported opcode, bad length, ...).
    InvalidRequest = 1,
    /// Remote access error (R_Key, bounds or permissions).
    RemoteAccessError = 2,
    /// Remote operational error.
    RemoteOperationalError = 3,
    /// Invalid RD request.
    InvalidRdRequest = 4,
}

impl NakCode {
    const fn from_bits(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::PsnSequenceError),
            1 => Some(Self::InvalidRequest),
            2 => Some(Self::RemoteAccessError),
            3 => Some(Self::RemoteOperationalError),
            4 => Some(Self::InvalidRdRequest),
            _ => None,
        }
    }
}

/// A decoded AETH syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with an end-to-end credit count code
    /// (0..=30, or [`Syndrome::NO_CREDIT_COUNT`]).
    Ack {
        /// 5-bit credit count code.
        credits: u8,
    },
    /// Receiver not ready: retry after the time given by the 5-bit timer
    /// code (see [`rnr_timer_micros`]).
    RnrNak {
        /// 5-bit RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// A reserved syndrome byte (AETH type 01, or a NAK code above 4):
    /// never sent, and a requester that receives one fails the request it
    /// answers with a remote operational error, as rxe does.
    Reserved(u8),
}

impl Syndrome {
    /// Credit count code meaning "no credit information" (used by
    /// responders that do not do end-to-end flow control, and on QPs with
    /// an SRQ).
    pub const NO_CREDIT_COUNT: u8 = 0x1F;

    /// Decodes a syndrome byte; reserved types and NAK codes are
    /// [`Syndrome::Reserved`].
    pub const fn decode(byte: u8) -> Self {
        let value = byte & VALUE_MASK;
        match byte & TYPE_MASK {
            TYPE_ACK => Self::Ack { credits: value },
            TYPE_RNR_NAK => Self::RnrNak { timer: value },
            TYPE_NAK => match NakCode::from_bits(value) {
                Some(code) => Self::Nak(code),
                None => Self::Reserved(byte),
            },
            _ => Self::Reserved(byte),
        }
    }

    /// Encodes the syndrome byte; fails if a credit or timer code does not
    /// fit in 5 bits.
    pub const fn encode(self) -> Result<u8, WireError> {
        match self {
            Self::Ack { credits } => with_type(TYPE_ACK, credits, "ACK credit count"),
            Self::RnrNak { timer } => with_type(TYPE_RNR_NAK, timer, "RNR NAK timer"),
            Self::Nak(code) => Ok(TYPE_NAK | code as u8),
            Self::Reserved(byte) => Err(WireError::ReservedSyndrome(byte)),
        }
    }

    /// Whether this is a NAK or RNR NAK.
    pub const fn is_nak(self) -> bool {
        !matches!(self, Self::Ack { .. })
    }
}

const fn with_type(kind: u8, value: u8, field: &'static str) -> Result<u8, WireError> {
    if value > VALUE_MASK {
        Err(WireError::FieldOutOfRange {
            field,
            value: value as u64,
            bits: 5,
        })
    } else {
        Ok(kind | value)
    }
}

/// Microseconds a requester waits after an RNR NAK (or that a responder
/// asks for via its minimum RNR timer) for each 5-bit timer code. Code 0 is
/// the longest, 655.36 ms.
const RNR_TIMER_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The delay an RNR timer code stands for, in microseconds; `None` for a
/// code wider than 5 bits.
pub fn rnr_timer_micros(code: u8) -> Option<u32> {
    RNR_TIMER_MICROS.get(usize::from(code)).copied()
}

/// A decoded AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    /// ACK, RNR NAK or NAK.
    pub syndrome: Syndrome,
    /// Message sequence number of the last completed message.
    pub msn: Msn,
}

impl Header for Aeth {
    const LEN: usize = AETH_LEN;
    const KIND: HeaderKind = HeaderKind::Aeth;

    /// Decodes an AETH; a reserved syndrome is [`Syndrome::Reserved`]
    /// (writing one is [`WireError::ReservedSyndrome`]).
    fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, Self::KIND, Self::LEN)?;
        let syndrome = Syndrome::decode(r.u8()?);
        let msn = Msn::new_masked(r.u24()?);
        Ok(Self { syndrome, msn })
    }

    fn write(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let syndrome = self.syndrome.encode()?;
        let mut w = Writer::new(buf, Self::KIND, Self::LEN)?;
        w.u8(syndrome)?;
        w.u24(self.msn.get())?;
        Ok(Self::LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_from_the_documentation() {
        use NakCode::*;
        let cases = [
            (0x00, Syndrome::Ack { credits: 0 }),
            (0x1F, Syndrome::Ack { credits: 0x1F }),
            (0x20, Syndrome::RnrNak { timer: 0 }),
            (0x3F, Syndrome::RnrNak { timer: 31 }),
            (0x60, Syndrome::Nak(PsnSequenceError)),
            (0x61, Syndrome::Nak(InvalidRequest)),
            (0x62, Syndrome::Nak(RemoteAccessError)),
            (0x63, Syndrome::Nak(RemoteOperationalError)),
            (0x64, Syndrome::Nak(InvalidRdRequest)),
        ];
        for (byte, syndrome) in cases {
            assert_eq!(Syndrome::decode(byte), syndrome, "{byte:#x}");
            assert_eq!(syndrome.encode(), Ok(byte));
        }
    }

    #[test]
    fn every_byte_round_trips_or_is_reserved() {
        let mut valid = 0;
        for byte in 0..=u8::MAX {
            match Syndrome::decode(byte) {
                Syndrome::Reserved(b) => {
                    assert_eq!(b, byte);
                    assert_eq!(
                        Syndrome::Reserved(b).encode(),
                        Err(WireError::ReservedSyndrome(byte))
                    );
                }
                s => {
                    valid += 1;
                    assert_eq!(s.encode(), Ok(byte));
                }
            }
        }
        // 32 ACK + 32 RNR NAK + 5 NAK codes.
        assert_eq!(valid, 69);
        assert_eq!(Syndrome::decode(0x40), Syndrome::Reserved(0x40));
        assert_eq!(Syndrome::decode(0x65), Syndrome::Reserved(0x65));
        assert_eq!(Syndrome::decode(0x80), Syndrome::Reserved(0x80));
    }

    #[test]
    fn encode_rejects_wide_values() {
        assert!(Syndrome::Ack { credits: 32 }.encode().is_err());
        assert!(Syndrome::RnrNak { timer: 32 }.encode().is_err());
        let aeth = Aeth {
            syndrome: Syndrome::RnrNak { timer: 40 },
            msn: Msn::ZERO,
        };
        assert!(matches!(
            aeth.write(&mut [0u8; 4]),
            Err(WireError::FieldOutOfRange { bits: 5, .. })
        ));
    }

    #[test]
    fn aeth_round_trip_and_layout() {
        let aeth = Aeth {
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
            msn: Msn::new_masked(0x01_0203),
        };
        let mut buf = [0u8; 4];
        assert_eq!(aeth.write(&mut buf), Ok(4));
        assert_eq!(buf, [0x62, 0x01, 0x02, 0x03]);
        assert_eq!(Aeth::parse(&buf), Ok(aeth));
        assert!(!Syndrome::Ack { credits: 3 }.is_nak());
        assert!(Syndrome::RnrNak { timer: 3 }.is_nak());
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(rnr_timer_micros(0), Some(655_360));
        assert_eq!(rnr_timer_micros(1), Some(10));
        assert_eq!(rnr_timer_micros(14), Some(1_280));
        assert_eq!(rnr_timer_micros(31), Some(491_520));
        assert_eq!(rnr_timer_micros(32), None);
    }
}
