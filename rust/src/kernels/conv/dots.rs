//! float32 dot products of row pairs on AVX-512, for weight gradients
//! whose matrix is too small for [`super::igemm`]'s register tile (a stem's,
//! a 1x1 layer's) and for Linear's `x @ W.t()` with few rows of `x`
//! (`linalg/few_rows.rs`): `C[o][r] = sum over rows and columns of A_o *
//! B_r`, `O x R` sums at a time, each a 16-lane accumulator that is summed
//! across its lanes at the end.
//!
//! Hand-written: the sums run along the rows of both operands (a gradient
//! row and an input row at the same output position), which is a product
//! `A @ B^T` with both operands "transposed" for a BLAS micro-kernel; the
//! gemm crate and [`super::igemm`] would need one of them packed (a
//! transpose per element) to put the few output channels in a register
//! tile they fill by a third to a half (mobilenet_v3_small's 3 -> 16 stem:
//! 16 x 27 sums over 100k positions).

#![allow(clippy::too_many_arguments)]

/// Rows of A per tile (output channels).
pub const O: usize = 4;
/// Rows of B per tile (input channel and tap): `O * R` accumulators, `O`
/// A vectors and one B vector in 29 of the 32 registers; 10 loads per 24
/// multiply-adds.
pub const R: usize = 6;

/// Whether the CPU runs [`tile`].
pub fn available() -> bool {
    super::igemm::wide()
}

/// `c[o * ldc + r] = (acc ? c[o * ldc + r] : 0) + sum over i < rows, j <
/// cols of a[o * a_plane + i * a_row + j] * b[b_offs[r] + i * b_row + j]`
/// for `o < o_n` (at most
/// [`O`]) and `r < b_offs.len()` (at most [`R`]). Lane `l` of each
/// accumulator sums the columns `j = l (mod 16)` of every row in order;
/// the lanes are then summed in a fixed tree: the same bits for the same
/// operands, whatever calls it.
///
/// # Safety
/// [`available`] holds; every A row and B row named addresses `cols`
/// readable floats (the masked loads of a last partial vector touch no
/// more); `c` holds the `o_n x r_n` block at stride `ldc`.
pub unsafe fn tile(
    o_n: usize,
    rows: usize,
    cols: usize,
    a: *const f32,
    a_plane: usize,
    a_row: usize,
    b: *const f32,
    b_offs: &[isize],
    b_row: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    macro_rules! go {
        ($(($o:literal, $r:literal))*) => {
            match (o_n, b_offs.len()) {
                $(($o, $r) => dots::<$o, $r>(rows, cols, a, a_plane, a_row, b, b_offs, b_row, c, ldc, acc),)*
                _ => unreachable!("tile {o_n} x {}", b_offs.len()),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    go!(
        (1, 1)(1, 2)(1, 3)(1, 4)(1, 5)(1, 6)(2, 1)(2, 2)(2, 3)(2, 4)(2, 5)(2, 6)(3, 1)(3, 2)(3, 3)(
            3, 4
        )(3, 5)(3, 6)(4, 1)(4, 2)(4, 3)(4, 4)(4, 5)(4, 6)
    );
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("the AVX-512 convolution kernels run on x86_64 only")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dots<const ON: usize, const RN: usize>(
    rows: usize,
    cols: usize,
    a: *const f32,
    a_plane: usize,
    a_row: usize,
    b: *const f32,
    b_offs: &[isize],
    b_row: usize,
    c: *mut f32,
    ldc: usize,
    add: bool,
) {
    use crate::kernels::linalg::first_lanes;
    use std::arch::x86_64::*;
    let mut offs = [0isize; RN];
    offs.copy_from_slice(&b_offs[..RN]);
    let mut acc = [[_mm512_setzero_ps(); RN]; ON];
    for i in 0..rows {
        let (ar, br) = (a.add(i * a_row), b.add(i * b_row));
        for j in (0..cols).step_by(16) {
            // Lanes past the row's end load zeros from both operands.
            let m = first_lanes(cols - j);
            let mut av = [_mm512_setzero_ps(); ON];
            for (o, v) in av.iter_mut().enumerate() {
                *v = _mm512_maskz_loadu_ps(m, ar.add(o * a_plane + j));
            }
            for (r, &off) in offs.iter().enumerate() {
                let bv = _mm512_maskz_loadu_ps(m, br.offset(off).add(j));
                for o in 0..ON {
                    acc[o][r] = _mm512_fmadd_ps(av[o], bv, acc[o][r]);
                }
            }
        }
    }
    for (o, row) in acc.iter().enumerate() {
        for (r, &v) in row.iter().enumerate() {
            let at = c.add(o * ldc + r);
            *at = if add { *at + lane_sum(v) } else { lane_sum(v) };
        }
    }
}

/// The sum of `v`'s 16 lanes, in a fixed tree of 512-bit shuffles. Not
/// `_mm512_reduce_add_ps`: its 256- and 128-bit halves take VEX-encoded
/// instructions, which reach only registers 0-15 without AVX512VL, so the
/// compiler kept the accumulators feeding it in those 16 and spilled the
/// rest of a 4 x 6 tile's 24 in the loop (a load and a store per
/// multiply-add; 3x slower).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn lane_sum(v: std::arch::x86_64::__m512) -> f32 {
    use std::arch::x86_64::*;
    let v = _mm512_add_ps(v, _mm512_shuffle_f32x4::<0b01_00_11_10>(v, v));
    let v = _mm512_add_ps(v, _mm512_shuffle_f32x4::<0b10_11_00_01>(v, v));
    let v = _mm512_add_ps(v, _mm512_permute_ps::<0b01_00_11_10>(v));
    let v = _mm512_add_ps(v, _mm512_permute_ps::<0b10_11_00_01>(v));
    _mm512_cvtss_f32(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tile shape against a float64 loop, with partial vectors,
    /// plane and row strides, and negative B offsets; written, then added to.
    #[test]
    fn matches_reference() {
        if !available() {
            return;
        }
        let (rows, cols, a_row, b_row, a_plane) = (3, 37, 40, 45, 130);
        let a: Vec<f32> = (0..O * a_plane)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let b: Vec<f32> = (0..400).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
        let base = 60usize;
        for on in 1..=O {
            for rn in 1..=R {
                let offs: Vec<isize> = (0..rn as isize).map(|r| 3 * r - 7).collect();
                let mut c = vec![f32::NAN; O * R];
                // Written, then added to (the sums are small integers:
                // exact in float32).
                for acc in [false, true] {
                    // SAFETY: rows and columns stay inside a and b (base +
                    // the most negative offset >= 0, the last read < 400).
                    unsafe {
                        tile(
                            on,
                            rows,
                            cols,
                            a.as_ptr(),
                            a_plane,
                            a_row,
                            b.as_ptr().add(base),
                            &offs,
                            b_row,
                            c.as_mut_ptr(),
                            R,
                            acc,
                        )
                    };
                }
                for o in 0..on {
                    for (r, &off) in offs.iter().enumerate() {
                        let mut want = 0.0f64;
                        for i in 0..rows {
                            for j in 0..cols {
                                let bi = (base as isize + off) as usize + i * b_row + j;
                                want += a[o * a_plane + i * a_row + j] as f64 * b[bi] as f64;
                            }
                        }
                        assert_eq!(c[o * R + r] as f64, 2.0 * want, "{on} x {rn}: ({o}, {r})");
                    }
                }
            }
        }
    }
}
