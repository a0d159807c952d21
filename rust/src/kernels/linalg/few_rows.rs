//! float32 `x @ W.t()` for a left operand of few rows (Linear at a small
//! batch: decoding, a small evaluation batch), on AVX-512: each output is a
//! dot product of a row of `x` and a row of `W`, both contiguous, and `W`
//! is streamed from memory once.
//!
//! Why not the gemm crate: with few rows of `x` the product is bound by
//! reading `W`, and the crate's path (a matrix-vector product per row of
//! `x` up to [`super::GEMV_ROWS`] rows, a column-major scratch beyond)
//! reads `W` once per row or packs it; on an AVX-512 core (torch CPU taking
//! MKL's AVX-512 kernels) `F.linear` 2 x 1024 -> 1024 ran at 1.98x torch
//! CPU's time, 4 x 512 -> 2000 2.09x, 16 x 256 -> 1024 1.55x (one thread,
//! `python -m foo_rs.bench --group matmul --quick --threads 1`). Here
//! [`dots::tile`] (the weight-gradient kernel of the convolutions) sums
//! `4 x 6` dot products at a time: six rows of `W` stay in L1 while every
//! row of `x` passes them.
//!
//! Each output sums its `k` products in 16 lane-wise partial sums, added in
//! a fixed tree at the end: the order depends on `k` alone, so the bits do
//! not depend on the thread count or on which rows share a tile.

use crate::kernels::conv::dots;
use crate::kernels::parallel;

/// Most rows of `x` [`gemm`] takes. Alternating with the crate's path in
/// one process (one thread, `F.linear` with a bias), this one's time: 1
/// row 0.96 (the crate's matrix-vector product, also bound by `W`), 2-16
/// rows 0.47-0.88 (16 x 512 -> 512 1.03), 24-48 rows 1.23-1.62.
const MAX_ROWS: usize = 16;

/// Whether [`gemm`] takes an `m x n x k` product: AVX-512, at most
/// [`MAX_ROWS`] rows, both operands contiguous along `k` (`x` row-major,
/// the right operand a transposed row-major `W`) and enough columns to
/// fill the tiles.
pub(super) fn takes(
    (m, n, k): (usize, usize, usize),
    (lhs_rs, lhs_cs): (isize, isize),
    (rhs_rs, rhs_cs): (isize, isize),
) -> bool {
    dots::available()
        && m <= MAX_ROWS
        && n >= dots::R
        && k >= 16
        && (lhs_cs, rhs_rs) == (1, 1)
        && lhs_rs > 0
        && rhs_cs > 0
}

/// Rows of `W` per task: a multiple of [`dots::R`].
const BLOCK: usize = 16 * dots::R;

/// `dst[i, j] = alpha * (x[i] . w[j]) (+ beta * dst[i, j] when read)` for
/// `i < m`, `j < n`: `x`'s rows `x_rs` apart, `w`'s `w_cs` apart (the
/// right operand's column stride), both contiguous along `k`.
///
/// # Safety
/// [`takes`] holds; the pointers address such matrices; `dst` is `m x n`
/// at strides `(dst_rs, dst_cs)` and nothing else writes it meanwhile.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    m: usize,
    n: usize,
    k: usize,
    (dst, dst_rs, dst_cs): (*mut f32, isize, isize),
    read: bool,
    (x, x_rs): (*const f32, isize),
    (w, w_cs): (*const f32, isize),
    beta: f32,
    alpha: f32,
    par: bool,
) {
    let (d, x, w) = (dst as usize, x as usize, w as usize);
    let blocks = n.div_ceil(BLOCK);
    // Where each of a tile's W rows starts, from its first.
    let offs: [isize; dots::R] = std::array::from_fn(|r| r as isize * w_cs);
    let block = |b: usize| {
        let (d, x, w) = (d as *mut f32, x as *const f32, w as *const f32);
        let mut sums = [0f32; dots::O * dots::R];
        let j_end = ((b + 1) * BLOCK).min(n);
        let mut j0 = b * BLOCK;
        while j0 < j_end {
            let rn = dots::R.min(j_end - j0);
            let mut i0 = 0;
            while i0 < m {
                let on = dots::O.min(m - i0);
                // SAFETY: rows i0..i0+on of x and j0..j0+rn of w, k floats
                // each (the caller's matrices).
                unsafe {
                    dots::tile(
                        on,
                        1,
                        k,
                        x.offset(i0 as isize * x_rs),
                        x_rs as usize,
                        0,
                        w.offset(j0 as isize * w_cs),
                        &offs[..rn],
                        0,
                        sums.as_mut_ptr(),
                        dots::R,
                        false,
                    )
                };
                for o in 0..on {
                    for r in 0..rn {
                        let s = alpha * sums[o * dots::R + r];
                        // SAFETY: output (i0 + o, j0 + r), this task's.
                        unsafe {
                            let at =
                                d.offset((i0 + o) as isize * dst_rs + (j0 + r) as isize * dst_cs);
                            *at = if read { beta * *at + s } else { s };
                        }
                    }
                }
                i0 += on;
            }
            j0 += rn;
        }
    };
    if par && blocks > 1 && m * n * k >= PAR_WORK {
        parallel::parallel_for(blocks, block);
    } else {
        (0..blocks).for_each(block);
    }
}

/// Multiply-adds from which [`gemm`] splits `W`'s rows over foo's pool.
const PAR_WORK: usize = 1 << 16;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row count up to [`MAX_ROWS`] against a float64 loop: partial
    /// tiles of rows and columns, `k` off the vector width (700), operands with
    /// row strides past `k`, a transposed output read with `beta`, and the
    /// same bits split over the pool as in one task.
    #[test]
    fn matches_reference() {
        if !dots::available() {
            return;
        }
        let (n, k, ldx, ldw) = (103, 700, 703, 710);
        let x: Vec<f32> = (0..MAX_ROWS * ldx)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let w: Vec<f32> = (0..n * ldw).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
        for m in 1..=MAX_ROWS {
            assert!(takes((m, n, k), (ldx as isize, 1), (1, ldw as isize)));
            // Transposed output (column stride m), read: dst = 0.5 dst + 2 x.w
            let init: Vec<f32> = (0..m * n).map(|i| (i % 5) as f32).collect();
            let mut runs = Vec::new();
            for par in [false, true] {
                let mut dst = init.clone();
                // SAFETY: x holds m rows of ldx >= k floats, w n rows of
                // ldw >= k; dst holds m x n at strides (1, m).
                unsafe {
                    gemm(
                        m,
                        n,
                        k,
                        (dst.as_mut_ptr(), 1, m as isize),
                        true,
                        (x.as_ptr(), ldx as isize),
                        (w.as_ptr(), ldw as isize),
                        0.5,
                        2.0,
                        par,
                    )
                };
                runs.push(dst);
            }
            assert_eq!(runs[0], runs[1], "{m} rows: split and whole differ");
            for i in 0..m {
                for j in 0..n {
                    let dot: f64 = (0..k)
                        .map(|kk| x[i * ldx + kk] as f64 * w[j * ldw + kk] as f64)
                        .sum();
                    let want = 0.5 * init[i + j * m] as f64 + 2.0 * dot;
                    assert_eq!(runs[0][i + j * m] as f64, want, "{m} rows: ({i}, {j})");
                }
            }
        }
        assert!(!takes(
            (MAX_ROWS + 1, n, k),
            (ldx as isize, 1),
            (1, ldw as isize)
        ));
        assert!(!takes((4, n, k), (1, ldx as isize), (1, ldw as isize)));
    }
}
