//! float32 <-> float16 / bfloat16 conversions of one value, on the raw
//! 16 bits, branch-free so loops over them vectorize. The scalar rule that
//! [`super::cast`] (element conversions), [`super::simd`] (its bulk tables'
//! portable and tail paths) and the ops that round through a 16-bit type all
//! use. It imports nothing from the engine: `cast` uses `simd`, and both use
//! this module, so dependencies go one way.

/// float32 -> bfloat16 bits, round to nearest even, NaN kept quiet
/// (what `c10::BFloat16(float)` does). Branch-free so it vectorizes.
#[inline(always)]
pub(crate) fn f32_to_bf16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
    if v.is_nan() {
        ((b >> 16) as u16) | 0x0040
    } else {
        rounded
    }
}

#[inline(always)]
pub(crate) fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// float32 -> float16 bits, round to nearest even (IEEE), branch-free.
#[inline(always)]
pub(crate) fn f32_to_f16_bits(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let a = x & 0x7FFF_FFFF;
    // NaN / Inf
    let nan_inf = if a > 0x7F80_0000 {
        0x7E00u16 | ((a >> 13) as u16 & 0x3FF)
    } else {
        0x7C00
    };
    // Normal range: rebias and round to nearest even on the 13 dropped bits.
    let norm = {
        let r = a.wrapping_sub(0x3800_0000); // exponent 127 -> 15
        let r = r.wrapping_add(0x0FFF + ((r >> 13) & 1));
        (r >> 13) as u16
    };
    // Subnormal result: scale with a float add (exact round-to-nearest-even).
    let sub = {
        let f = f32::from_bits(a) + 0.5;
        (f.to_bits() - 0x3F00_0000) as u16
    };
    let mag = if a >= 0x7F80_0000 {
        nan_inf
    } else if a >= 0x4780_0000 {
        0x7C00 // overflows to infinity (>= 65536 before rounding)
    } else if a >= 0x3880_0000 {
        norm // normal half (>= 2^-14); rounding may carry into infinity, as IEEE wants
    } else {
        sub
    };
    sign | mag
}

#[inline(always)]
pub(crate) fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let a = (h & 0x7FFF) as u32;
    let mag = if a >= 0x7C00 {
        // Inf / NaN
        0x7F80_0000 | ((a & 0x3FF) << 13)
    } else if a >= 0x0400 {
        (a << 13) + 0x3800_0000
    } else {
        // zero or subnormal: exact through a float multiply
        (a as f32 * f32::from_bits(0x3380_0000)).to_bits() // 2^-24
    };
    f32::from_bits(sign | mag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn f16_conversions_match_half_crate() {
        for bits in 0..=u16::MAX {
            let h = f16::from_bits(bits);
            let ours = f16_bits_to_f32(bits);
            let theirs = h.to_f32();
            assert!(
                ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
                "{bits:#x}"
            );
        }
        let mut x: u32 = 0;
        // Every 97th float32 bit pattern plus the boundaries.
        while x < u32::MAX - 97 {
            let f = f32::from_bits(x);
            let ours = f32_to_f16_bits(f);
            let theirs = f16::from_f32(f).to_bits();
            if f.is_nan() {
                assert!(f16::from_bits(ours).is_nan());
            } else {
                assert_eq!(ours, theirs, "{f:e} ({x:#x})");
            }
            x += 97;
        }
        for f in [
            65504.0f32,
            65519.99,
            65520.0,
            6.1035156e-5,
            5.96e-8,
            2.98e-8,
            2.99e-8,
            -0.0,
            f32::INFINITY,
        ] {
            assert_eq!(f32_to_f16_bits(f), f16::from_f32(f).to_bits(), "{f:e}");
        }
    }

    #[test]
    fn bf16_conversions_match_half_crate() {
        let mut x: u32 = 0;
        while x < u32::MAX - 89 {
            let f = f32::from_bits(x);
            let ours = f32_to_bf16_bits(f);
            let theirs = bf16::from_f32(f).to_bits();
            if f.is_nan() {
                assert!(bf16::from_bits(ours).is_nan());
            } else {
                assert_eq!(ours, theirs, "{f:e}");
            }
            x += 89;
        }
    }
}
