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
//! 16-step elimination, about 80 ns.
//!
//! **Per length, once.** Undoing and solving together are one linear map
//! from the 32 bits of the difference to an identification and a residue
//! (zero when a solution exists), fixed by the length alone. A packet
//! stream has few lengths (full segments, the last one, ACKs), so each
//! thread keeps that map for a few lengths as tables of its values on
//! every 4-bit nibble: eight lookups a packet. A length is tabled the
//! second time it is seen among the last few, so traffic whose lengths
//! never repeat pays the direct computation only.
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

/// `x^(-8 * bytes_after) mod P`: the factor that brings a difference
/// which arrived with `bytes_after` covered bytes after the
/// identification field back to the field.
fn undo_factor(bytes_after: u16) -> u32 {
    let [high, low] = bytes_after.to_be_bytes();
    mul_mod(
        UNDO_BYTES[usize::from(low)],
        UNDO_256_BYTES[usize::from(high)],
    )
}

/// The difference `d`, which arrived with `bytes_after` covered bytes
/// after the identification field, as it would be with none: `d *
/// x^(-8 * bytes_after)`. `None` beyond an IPv4 datagram's length.
#[cfg(test)]
fn undo_zero_bytes(difference: u32, bytes_after: usize) -> Option<u32> {
    let n = u16::try_from(bytes_after).ok()?;
    Some(mul_mod(difference, undo_factor(n)))
}

/// Eliminates `r` against `L0`'s echelon form: the identification the
/// pivots account for, and what is left (zero exactly when `r` is in the
/// image of `L0`).
fn reduce(mut r: u32) -> (u16, u32) {
    let mut identification = 0;
    for row in &ECHELON {
        if r & row.pivot != 0 {
            r ^= row.vector;
            identification ^= row.ids;
        }
    }
    (identification, r)
}

/// Solves `L0(x) = r`: `Some(x)` when `r` is in the image of `L0`.
fn solve(r: u32) -> Option<u16> {
    let (identification, residue) = reduce(r);
    (residue == 0).then_some(identification)
}

/// A reduction as one word: the identification above the residue.
fn packed((identification, residue): (u16, u32)) -> u64 {
    u64::from(identification) << 32 | u64::from(residue)
}

/// The inverse of [`packed`], as [`solve`] answers.
fn unpacked(word: u64) -> Option<u16> {
    // Truncations intended: the two halves of the word.
    (word as u32 == 0).then_some((word >> 32) as u16)
}

/// "Undo `bytes_after` zero bytes, then reduce" for one length, tabled by
/// nibble: entry `[k][v]` is the packed reduction of the difference whose
/// only bits are `v` in nibble `k`. Both steps are linear, so a
/// difference's reduction is the XOR of its eight nibbles' entries.
struct LengthMap {
    by_nibble: [[u64; 16]; 8],
}

impl LengthMap {
    fn new(bytes_after: u16) -> Self {
        // Register bit `b` is the coefficient of x^(31 - b): its image is
        // the undo factor times x^(31 - b), one `times_x` per power.
        let mut images = [0u64; 32];
        let mut factor_xj = undo_factor(bytes_after);
        for j in 0..32 {
            images[31 - j] = packed(reduce(factor_xj));
            factor_xj = times_x(factor_xj);
        }
        let mut by_nibble = [[0u64; 16]; 8];
        for (k, table) in by_nibble.iter_mut().enumerate() {
            for v in 1..16usize {
                let low = v & v.wrapping_neg();
                table[v] = table[v ^ low] ^ images[4 * k + low.trailing_zeros() as usize];
            }
        }
        Self { by_nibble }
    }

    fn solve(&self, difference: u32) -> Option<u16> {
        let word = (0..8).fold(0, |word, k| {
            word ^ self.by_nibble[k][(difference >> (4 * k)) as usize & 0xF]
        });
        unpacked(word)
    }
}

/// How many lengths a thread keeps tabled, and how many recent lengths it
/// remembers to tell a repeated one.
const TABLED_LENGTHS: usize = 4;
const REMEMBERED_LENGTHS: usize = 8;

/// One thread's tabled lengths ([`LengthMap`], 1 KiB each).
struct LengthMaps {
    tabled: [Option<(u16, Box<LengthMap>)>; TABLED_LENGTHS],
    next_tabled: usize,
    /// Lengths seen lately, `u32::MAX` for none.
    seen: [u32; REMEMBERED_LENGTHS],
    next_seen: usize,
}

impl LengthMaps {
    const fn new() -> Self {
        Self {
            tabled: [None, None, None, None],
            next_tabled: 0,
            seen: [u32::MAX; REMEMBERED_LENGTHS],
            next_seen: 0,
        }
    }

    fn solve(&mut self, difference: u32, bytes_after: u16) -> Option<u16> {
        let tabled = self.tabled.iter().flatten();
        if let Some((_, map)) = tabled.into_iter().find(|(n, _)| *n == bytes_after) {
            return map.solve(difference);
        }
        if self.seen.contains(&u32::from(bytes_after)) {
            let map = Box::new(LengthMap::new(bytes_after));
            let answer = map.solve(difference);
            self.tabled[self.next_tabled] = Some((bytes_after, map));
            self.next_tabled = (self.next_tabled + 1) % TABLED_LENGTHS;
            return answer;
        }
        self.seen[self.next_seen] = u32::from(bytes_after);
        self.next_seen = (self.next_seen + 1) % REMEMBERED_LENGTHS;
        solve_directly(difference, bytes_after)
    }
}

fn solve_directly(difference: u32, bytes_after: u16) -> Option<u16> {
    solve(mul_mod(difference, undo_factor(bytes_after)))
}

std::thread_local! {
    static LENGTH_MAPS: std::cell::RefCell<LengthMaps> =
        const { std::cell::RefCell::new(LengthMaps::new()) };
}

/// The identification a packet was sealed with, given the ICRC computed
/// with identification 0 (`computed_with_zero`), the ICRC that arrived
/// (`found`) and how many covered bytes follow the identification field
/// (`bytes_after`: the rest of the IPv4 header from byte 6, the UDP
/// header, and BTH through pad). `None` when no identification explains
/// the difference: the packet is corrupt. See the module docs for the
/// strength of this check.
pub fn recover(computed_with_zero: u32, found: u32, bytes_after: usize) -> Option<u16> {
    let bytes_after = u16::try_from(bytes_after).ok()?;
    let difference = computed_with_zero ^ found;
    // The tables are a cache: while the thread's are being torn down, or
    // (never, nothing here re-enters) borrowed, solve without them.
    let tabled = LENGTH_MAPS.try_with(|maps| {
        let mut maps = maps.try_borrow_mut().ok()?;
        Some(maps.solve(difference, bytes_after))
    });
    match tabled {
        Ok(Some(answer)) => answer,
        _ => solve_directly(difference, bytes_after),
    }
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

    /// Differences to try: every identification's at `len` (a solution
    /// exists) and a spread of others (almost all without one).
    fn differences(len: usize) -> Vec<u32> {
        let rest: Vec<u8> = (0..len as u32).map(|i| (i * 29 + 3) as u8).collect();
        let zero = crc_with(0, &rest);
        let solvable = (0..=u16::MAX)
            .step_by(97)
            .map(|id| zero ^ crc_with(id, &rest));
        let mut x = 0x9E37_79B9u32;
        let others = (0..2000).map(move |_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        });
        solvable.chain(others).chain([0, 1, u32::MAX]).collect()
    }

    #[test]
    fn a_tabled_length_answers_as_the_direct_computation() {
        for len in [0, 1, 15, 255, 256, 1_100, 4_140, 65_535] {
            let n = u16::try_from(len).unwrap();
            let map = LengthMap::new(n);
            let mut solvable = 0;
            for d in differences(len) {
                let direct = solve_directly(d, n);
                assert_eq!(map.solve(d), direct, "length {len}, difference {d:#x}");
                solvable += usize::from(direct.is_some());
            }
            assert!(solvable > 600, "length {len}: {solvable}");
        }
    }

    #[test]
    fn a_length_is_tabled_when_it_repeats_and_the_oldest_table_makes_room() {
        let tabled = |maps: &LengthMaps| -> Vec<u16> {
            maps.tabled.iter().flatten().map(|(n, _)| *n).collect()
        };
        let once = |maps: &mut LengthMaps, n: u16, d: u32| {
            assert_eq!(maps.solve(d, n), solve_directly(d, n), "length {n}");
        };
        let mut maps = LengthMaps::new();
        once(&mut maps, 100, 1);
        assert!(tabled(&maps).is_empty(), "a length seen once is not tabled");
        for d in differences(100) {
            once(&mut maps, 100, d);
        }
        assert_eq!(tabled(&maps), [100]);
        for n in [200, 300, 400, 500] {
            for d in differences(usize::from(n)).into_iter().step_by(20) {
                once(&mut maps, n, d);
            }
        }
        assert_eq!(tabled(&maps), [500, 200, 300, 400], "100's table made room");
        // Lengths that never repeat among the last few are never tabled.
        for n in 1_000..1_100 {
            once(&mut maps, n, 0x1234_5678);
        }
        assert_eq!(tabled(&maps), [500, 200, 300, 400]);
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
