//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = (a as u64) * (b as u64);
    ((p >> 32) as u32, p as u32)
}

/// Ten rounds of Philox4x32 on `counter` with `key`.
#[inline(always)]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo(M0, c[0]);
        let (hi1, lo1) = mulhilo(M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// A Philox stream for one kernel call: the key is the seed, the counter's
/// high 64 bits are the block index.
#[derive(Clone, Copy, Debug)]
pub struct Philox {
    key: [u32; 2],
}

impl Philox {
    pub fn new(seed: u64) -> Philox {
        Philox {
            key: [seed as u32, (seed >> 32) as u32],
        }
    }

    /// The four 32-bit words of block `block`.
    #[inline(always)]
    pub fn block(&self, block: u64) -> [u32; 4] {
        philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], self.key)
    }
}

/// A float in [0, 1) from the top 24 bits of `x`.
#[inline(always)]
pub fn uniform_f32(x: u32) -> f32 {
    (x >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// A double in [0, 1) from 53 bits of `(hi, lo)`.
#[inline(always)]
pub fn uniform_f64(hi: u32, lo: u32) -> f64 {
    let bits = ((hi as u64) << 32 | lo as u64) >> 11;
    bits as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Known-answer tests from the Random123 distribution (kat_vectors).
    #[test]
    fn known_answers() {
        assert_eq!(
            philox4x32_10([0, 0, 0, 0], [0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([0xffff_ffff; 4], [0xffff_ffff; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn uniforms_in_unit_interval() {
        assert_eq!(uniform_f32(0), 0.0);
        assert!(uniform_f32(u32::MAX) < 1.0);
        assert_eq!(uniform_f64(0, 0), 0.0);
        assert!(uniform_f64(u32::MAX, u32::MAX) < 1.0);
    }
}
