//! Recovering the IPv4 identification a packet's ICRC was sealed with.
//!
//! The ICRC covers the 16-bit identification of the IPv4 header, which a
//! UDP socket neither sets nor shows to a receiver. The CRC is linear over
//! GF(2): for two packets of one length that differ only there, the ICRCs
//! differ by `L(id_a ^ id_b)`, where `L` is a linear map from 16 bits to
//! 32 that depends only on how many covered bytes follow the field. So a
//! receiver computes the ICRC as if the identification were 0, takes the
//! difference `d` from the ICRC that arrived, and solves `L(x) = d`:
//!
//! * a solution exists: the packet is intact except, perhaps, for what the
//!   identification explains, and `x` is the identification it was sealed
//!   with (unique: `L` has rank 16);
//! * none exists: the packet is corrupt.
//!
//! **Strength.** Only 2^16 of the 2^32 differences have a solution, so a
//! random corruption passes with probability 2^-16 instead of 2^-32. Every
//! single-bit error is still caught in packets whose covered bytes after
//! the identification field, ICRC included, number up to
//! [`SINGLE_BIT_ERRORS_CAUGHT_WITHIN`] (about 26 KB; RoCE's largest MTU is
//! 4 KiB), as the tests check exhaustively.
//!
//! **How `L` is solved cheaply.** Appending a zero byte to a message
//! multiplies the CRC register by x^8 modulo the CRC polynomial `P`, an
//! invertible map. So `L = Z^n ∘ L0`, where `L0` maps an identification to
//! the register after the two identification bytes alone (from a zero
//! register) and `Z^n` is "n zero bytes follow". The receiver undoes `Z^n`
//! on the difference (a multiplication by x^(-8n) mod P, as two factors
//! read from tables of 256 powers) and solves the fixed system `L0`, whose echelon
//! form is computed at compile time: two 32-step multiplications and a
//! 16-step elimination per packet, no cache, no allocation.
//!
//! Register values are in the bit order of the reflected CRC-32 that zlib
//! and `crc32fast` compute: bit 31 holds the coefficient of x^0, bit 0 that
//! of x^31.

/// The CRC-32 polynomial in the register's (reflected) bit order, without
/// its x^32 term.
const POLY: u32 = 0xEDB8_8320;

/// The polynomial 1 in the register's bit order.
const ONE: u32 = 1 << 31;

/// Single-bit errors are caught in every packet with at most this many
/// covered bytes after the identification field (the rest of the IPv4
/// header, UDP header, BTH to pad, and the ICRC itself): the first byte at
/// which one flipped bit can pass for another identification is the next
/// one.
pub const SINGLE_BIT_ERRORS_CAUGHT_WITHIN: usize = 26_766;

/// `r * x mod P`: the register after one more zero bit.
const fn times_x(r: u32) -> u32 {
    (r >> 1) ^ (POLY & (r & 1).wrapping_neg())
}

/// `r / x mod P`, the inverse of [`times_x`]. A step that reduced left
/// bit 31 set (POLY has it, a shifted register never does), so that bit
/// tells which case to undo.
const fn div_x(r: u32) -> u32 {
    if r & ONE == 0 {
        r << 1
    } else {
        ((r ^ POLY) << 1) | 1
    }
}

/// `a * b mod P`: the sum of `b * x^k` over the terms x^k of `a`
/// (without branches: a mispredicted one per term would cost more than
/// the arithmetic).
const fn mul_mod(a: u32, b: u32) -> u32 {
    let (mut product, mut b_xk, mut k) = (0, b, 0);
    while k < 32 {
        let term = (a >> (31 - k)) & 1;
        product ^= b_xk & term.wrapping_neg();
        b_xk = times_x(b_xk);
        k += 1;
    }
    product
}

/// The register after CRCing `bytes` from a zero register (no initial
/// value, no final inversion): the linear part of the CRC.
const fn linear_crc(bytes: &[u8]) -> u32 {
    let (mut r, mut i) = (0u32, 0);
    while i < bytes.len() {
        r ^= bytes[i] as u32;
        let mut bit = 0;
        while bit < 8 {
            r = times_x(r);
            bit += 1;
        }
        i += 1;
    }
    r
}

/// `L0` applied to one identification: the register after its two bytes
/// (big-endian, as in the header).
const fn column(identification: u16) -> u32 {
    linear_crc(&identification.to_be_bytes())
}

/// One row of the echelon form of `L0`: `vector` is the image of the
/// identification bits in `ids`, its lowest set bit `pivot` is clear in
/// every later row.
#[derive(Clone, Copy)]
struct Row {
    pivot: u32,
    vector: u32,
    ids: u16,
}

/// Gaussian elimination of the 16 columns of `L0`, in order.
const fn echelon() -> [Row; 16] {
    let mut rows = [Row {
        pivot: 0,
        vector: 0,
        ids: 0,
    }; 16];
    let mut j = 0;
    while j < 16 {
        let mut ids = 1u16 << j;
        let mut vector = column(ids);
        let mut k = 0;
        while k < j {
            if vector & rows[k].pivot != 0 {
                vector ^= rows[k].vector;
                ids ^= rows[k].ids;
            }
            k += 1;
        }
        // Never zero: the columns are independent (x^k * id(x) mod P is
        // zero only for id = 0, P having a constant term); the assertion
        // runs at compile time.
        assert!(vector != 0, "L0 has rank 16");
        rows[j] = Row {
            pivot: vector & vector.wrapping_neg(),
            vector,
            ids,
        };
        j += 1;
    }
    rows
}

const ECHELON: [Row; 16] = echelon();

/// `x^(-8n) mod P` for `n` in 0..256: undoes `n` zero bytes.
const UNDO_BYTES: [u32; 256] = undo_table(div_x_8(ONE));

/// `x^(-2048n) mod P` for `n` in 0..256: undoes `256 * n` zero bytes.
const UNDO_256_BYTES: [u32; 256] = undo_table(mul_mod(UNDO_BYTES[255], UNDO_BYTES[1]));

const fn div_x_8(r: u32) -> u32 {
    let (mut r, mut i) = (r, 0);
    while i < 8 {
        r = div_x(r);
        i += 1;
    }
    r
}

/// The powers 0..256 of `step`.
const fn undo_table(step: u32) -> [u32; 256] {
    let mut table = [ONE; 256];
    let mut n = 1;
    while n < 256 {
        table[n] = mul_mod(table[n - 1], step);
        n += 1;
    }
    table
}

/// The difference `d`, which arrived with `bytes_after` covered bytes
/// after the identification field, as it would be with none: `d *
/// x^(-8 * bytes_after)`. `None` beyond an IPv4 datagram's length.
fn undo_zero_bytes(difference: u32, bytes_after: usize) -> Option<u32> {
    let n = u16::try_from(bytes_after).ok()?;
    let [high, low] = n.to_be_bytes();
    let low = mul_mod(difference, UNDO_BYTES[usize::from(low)]);
    Some(mul_mod(low, UNDO_256_BYTES[usize::from(high)]))
}

/// Solves `L0(x) = r`: `Some(x)` when `r` is in the image of `L0`.
fn solve(mut r: u32) -> Option<u16> {
    let mut identification = 0;
    for row in &ECHELON {
        if r & row.pivot != 0 {
            r ^= row.vector;
            identification ^= row.ids;
        }
    }
    (r == 0).then_some(identification)
}

/// The identification a packet was sealed with, given the ICRC computed
/// with identification 0 (`computed_with_zero`), the ICRC that arrived
/// (`found`) and how many covered bytes follow the identification field
/// (`bytes_after`: the rest of the IPv4 header from byte 6, the UDP
/// header, and BTH through pad). `None` when no identification explains
/// the difference: the packet is corrupt. See the module docs for the
/// strength of this check.
pub fn recover(computed_with_zero: u32, found: u32, bytes_after: usize) -> Option<u16> {
    solve(undo_zero_bytes(computed_with_zero ^ found, bytes_after)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The finalized CRC of the pseudo-packet LRH | a fixed IPv4 prefix |
    /// identification | `rest`, with crc32fast, independently of the
    /// algebra above.
    fn crc_with(identification: u16, rest: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&[0xFF; 8]);
        h.update(&[0x45, 0xFF, 0x01, 0x23]);
        h.update(&identification.to_be_bytes());
        h.update(rest);
        h.finalize()
    }

    #[test]
    fn algebra_matches_the_register() {
        assert_eq!(div_x(times_x(0x1234_5678)), 0x1234_5678);
        assert_eq!(times_x(div_x(0x8765_4321)), 0x8765_4321);
        assert_eq!(mul_mod(ONE, 0xDEAD_BEEF), 0xDEAD_BEEF);
        assert_eq!(mul_mod(0xDEAD_BEEF, ONE), 0xDEAD_BEEF);
        // A zero byte multiplies the register by x^8.
        let x8 = ONE >> 8;
        assert_eq!(linear_crc(&[0x5A, 0]), mul_mod(linear_crc(&[0x5A]), x8));
        assert_eq!(mul_mod(UNDO_BYTES[1], x8), ONE);
        let undo_256 = (0..256).fold(ONE, |r, _| mul_mod(r, UNDO_BYTES[1]));
        assert_eq!(UNDO_256_BYTES[1], undo_256);
    }

    #[test]
    fn recovers_every_identification_at_every_length_class() {
        let rest: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        for (len, id) in [(0, 1), (1, 0x8000), (255, 0xFFFF), (256, 0x1234), (4999, 7)] {
            let rest = &rest[..len];
            let d = crc_with(0, rest) ^ crc_with(id, rest);
            assert_eq!(solve(undo_zero_bytes(d, len).unwrap()), Some(id), "{len}");
            assert_eq!(
                recover(crc_with(0, rest), crc_with(id, rest), len),
                Some(id)
            );
        }
        for id in 0..=u16::MAX {
            assert_eq!(solve(column(id)), Some(id));
        }
        assert_eq!(undo_zero_bytes(1, 65_536), None);
    }

    /// `x^e` is the difference a single flipped bit makes once brought
    /// back to the identification field, where `e` falls by one per bit
    /// of distance: the field's own bits are x^32..x^47, the bits before
    /// it x^48 and up, the bit right after it x^31 and down from there.
    fn caught(x_e: u32) -> bool {
        solve(x_e).is_none()
    }

    #[test]
    fn every_single_bit_error_is_caught_within_the_documented_length() {
        // The bits before the field: 8 bytes of LRH, 4 of IPv4 header.
        let mut x_e = (0..48).fold(ONE, |r, _| times_x(r));
        for e in 48..48 + 8 * 12 {
            assert!(caught(x_e), "x^{e}");
            x_e = times_x(x_e);
        }
        // The bits after it, up to the documented limit; then the first
        // miss is right past it.
        let mut x_e = (0..31).fold(ONE, |r, _| times_x(r));
        let mut first_miss = None;
        for bit in 0..8 * (SINGLE_BIT_ERRORS_CAUGHT_WITHIN + 1) {
            if !caught(x_e) {
                first_miss = Some(bit);
                break;
            }
            x_e = div_x(x_e);
        }
        assert_eq!(
            first_miss.map(|bit| bit / 8),
            Some(SINGLE_BIT_ERRORS_CAUGHT_WITHIN)
        );
    }

    #[test]
    fn a_flipped_bit_elsewhere_is_not_taken_for_an_identification() {
        let rest: Vec<u8> = (0..1500u32).map(|i| (i * 13) as u8).collect();
        let good = crc_with(0x4242, &rest);
        for byte in 0..rest.len() {
            for bit in 0..8 {
                let mut bad = rest.clone();
                bad[byte] ^= 1 << bit;
                let computed = crc_with(0, &bad);
                assert_eq!(recover(computed, good, rest.len()), None, "{byte}.{bit}");
            }
        }
        for bit in 0..32 {
            let computed = crc_with(0, &rest);
            assert_eq!(recover(computed, good ^ (1 << bit), rest.len()), None);
        }
    }
}
