//! Reflection and replication padding over 1, 2 or 3 spatial dims, and
//! their backward (`reflection_pad{1,2,3}d`, `replication_pad{1,2,3}d`).
//!
//! The views are the tensors ATen hands over: `k + 1` dims (channels, then
//! `k` spatial dims) or `k + 2` (batch first); they are read as 5-d
//! `[batch, channels, depth, height, width]` with size-1 dims added. The
//! padding is ATen's list, pairs from the last dim inwards: `(left, right)`
//! of the width first, then the height's, then the depth's. A pair may be
//! negative (that side is cropped); ATen's checks, which the glue runs
//! first, keep a reflection's pads under the input's size.
//!
//! Output position `j` of a padded dim reads input position `v = j - lo`
//! (`lo` the dim's first pad), reflected (`-v` before the start, `2(n-1) - v`
//! past the end) or clamped to `[0, n)`: ATen's `ReflectionPad::index` and
//! `ReplicationPad::index`. The forward copies (no arithmetic, so any of the
//! float types gives CPU's values exactly); the backward sums each output
//! gradient into its source position in `Acc` (float32 for the 16-bit
//! types), output positions in row-major order as CPU's kernel adds them,
//! then stores. Work is split over planes (batch x channels) by index only,
//! so results do not depend on the thread count.

use super::norm::dispatch_float;
use super::pool::{two_planes, PoolT};
use super::{KernelError, Sizes, Strided, Strides};

/// How a padded dim reads the input beyond its edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    /// The input mirrored about its first and last element (`reflection_pad`).
    Reflect,
    /// The edge element repeated (`replication_pad`).
    Replicate,
}

impl PadMode {
    fn op(self, backward: bool) -> &'static str {
        match (self, backward) {
            (PadMode::Reflect, false) => "reflection_pad",
            (PadMode::Reflect, true) => "reflection_pad_backward",
            (PadMode::Replicate, false) => "replication_pad",
            (PadMode::Replicate, true) => "replication_pad_backward",
        }
    }
}

/// `s` (`k + 1` or `k + 2` dims) as a 5-d view `[batch, channels, d, h, w]`.
fn lift(op: &str, what: &str, s: &Strided, k: usize) -> Result<Strided, KernelError> {
    let nd = s.ndim();
    if !(1..=3).contains(&k) || (nd != k + 1 && nd != k + 2) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: {op}: {what} must have {} or {} dims for {k} padded dims, got {:?}",
            k + 1,
            k + 2,
            s.sizes
        )));
    }
    let lead = nd - k;
    let (mut sizes, mut strides) = (Sizes::new(), Strides::new());
    let mut push = |n: usize, st: isize| {
        sizes.push(n);
        strides.push(st);
    };
    if lead == 1 {
        push(1, 0);
    }
    for d in 0..lead {
        push(s.sizes[d], s.strides[d]);
    }
    for _ in k..3 {
        push(1, 0);
    }
    for d in lead..nd {
        push(s.sizes[d], s.strides[d]);
    }
    Ok(Strided::new(s.ptr, s.dtype, sizes, strides))
}

/// The input position each of a dim's `n_out` outputs reads, for an input
/// of `n_in` and pads `lo`, `hi` (checked: `n_out = n_in + lo + hi`, every
/// position inside the input).
fn sources(
    op: &str,
    mode: PadMode,
    n_in: usize,
    (lo, hi): (i64, i64),
    n_out: usize,
) -> Result<Vec<usize>, KernelError> {
    let bad = || {
        KernelError::InvalidArgument(format!(
            "foo: {op}: padding ({lo}, {hi}) of a dim of {n_in} does not give {n_out} positions"
        ))
    };
    let n = i64::try_from(n_in).map_err(|_| bad())?;
    if n.checked_add(lo).and_then(|v| v.checked_add(hi)) != i64::try_from(n_out).ok() {
        return Err(bad());
    }
    (0..n_out as i64)
        .map(|j| {
            let v = j - lo;
            let i = match mode {
                PadMode::Reflect if v < 0 => -v,
                PadMode::Reflect if v >= n => 2 * (n - 1) - v,
                PadMode::Reflect => v,
                PadMode::Replicate => v.clamp(0, n - 1),
            };
            if (0..n).contains(&i) {
                Ok(i as usize)
            } else {
                Err(bad())
            }
        })
        .collect()
}

/// The checked 5-d operands (the input-sized one first) and the source
/// positions of the depth, height and width.
type Plan = ([Strided; 2], [Vec<usize>; 3]);

fn plan(
    op: &str,
    input: (&str, &Strided),
    output: (&str, &Strided),
    pads: &[(i64, i64)],
    mode: PadMode,
) -> Result<Plan, KernelError> {
    let k = pads.len();
    let i = lift(op, input.0, input.1, k)?;
    let o = lift(op, output.0, output.1, k)?;
    if i.sizes[..2] != o.sizes[..2] || i.dtype != o.dtype {
        return Err(KernelError::ShapeMismatch(format!(
            "foo: {op}: {} {:?} ({}) and {} {:?} ({}) differ in batch, channels or dtype",
            input.0,
            input.1.sizes,
            i.dtype.name(),
            output.0,
            output.1.sizes,
            o.dtype.name()
        )));
    }
    let mut src: [Vec<usize>; 3] = [vec![0], vec![0], vec![0]];
    for (p, &pair) in pads.iter().enumerate() {
        let d = 4 - p;
        src[2 - p] = sources(op, mode, i.sizes[d], pair, o.sizes[d])?;
    }
    Ok(([i, o], src))
}

/// The outputs `[a, b)` of a padded dim that read the input in order, from
/// position `s0` on (the rest go one by one).
fn interior(src: &[usize], lo: i64, n_in: usize) -> (usize, usize, usize) {
    let n_out = src.len() as i64;
    let a = lo.clamp(0, n_out);
    let b = (lo + n_in as i64).clamp(a, n_out);
    (a as usize, b as usize, (a - lo) as usize)
}

/// Pads `x` into `out` (`pads`: ATen's padding list as pairs, last dim
/// first; `out` has the padded sizes).
pub fn pad(
    out: &Strided,
    x: &Strided,
    pads: &[(i64, i64)],
    mode: PadMode,
) -> Result<(), KernelError> {
    let op = mode.op(false);
    let ([x, out], src) = plan(op, ("input", x), ("output", out), pads, mode)?;
    let run = interior(&src[2], pads[0].0, x.sizes[4]);
    dispatch_float!(op, x.dtype, pad_typed, &out, &x, &src, run)
}

fn pad_typed<T: PoolT>(
    out: &Strided,
    x: &Strided,
    [sd, sh, sw]: &[Vec<usize>; 3],
    (a, b, s0): (usize, usize, usize),
) -> Result<(), KernelError> {
    let (ih, iw, ow) = (x.sizes[3], x.sizes[4], sw.len());
    two_planes::<T, T>(
        x,
        out,
        out.numel(),
        #[inline(always)]
        |xs, os| {
            let mut rows = os.chunks_exact_mut(ow);
            for &d in sd {
                for &h in sh {
                    let row = &xs[(d * ih + h) * iw..][..iw];
                    let Some(o) = rows.next() else { return };
                    for (o, &s) in o[..a].iter_mut().zip(&sw[..a]) {
                        *o = row[s];
                    }
                    o[a..b].copy_from_slice(&row[s0..s0 + (b - a)]);
                    for (o, &s) in o[b..].iter_mut().zip(&sw[b..]) {
                        *o = row[s];
                    }
                }
            }
        },
    )
}

/// Gradient of [`pad`]: `grad_input` (the input's sizes) receives the sum
/// of the gradients of the outputs that read each position.
pub fn pad_backward(
    grad_input: &Strided,
    grad_output: &Strided,
    pads: &[(i64, i64)],
    mode: PadMode,
) -> Result<(), KernelError> {
    let op = mode.op(true);
    let ([gi, go], src) = plan(
        op,
        ("grad_input", grad_input),
        ("grad_output", grad_output),
        pads,
        mode,
    )?;
    dispatch_float!(op, gi.dtype, pad_back_typed, &gi, &go, &src)
}

fn pad_back_typed<T: PoolT>(
    gi: &Strided,
    go: &Strided,
    [sd, sh, sw]: &[Vec<usize>; 3],
) -> Result<(), KernelError> {
    let (ih, iw) = (gi.sizes[3], gi.sizes[4]);
    two_planes::<T, T>(
        go,
        gi,
        gi.numel() + go.numel(),
        #[inline(always)]
        |gs, gis| {
            let mut acc = vec![T::ZERO; gis.len()];
            let mut g = gs.iter();
            for &d in sd {
                for &h in sh {
                    let row = &mut acc[(d * ih + h) * iw..][..iw];
                    for (&w, v) in sw.iter().zip(g.by_ref()) {
                        row[w] = T::add(row[w], v.acc());
                    }
                }
            }
            for (o, a) in gis.iter_mut().zip(acc) {
                *o = T::from_acc(a);
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use half::bf16;

    fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize]) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, dtype, sizes)
    }

    #[test]
    fn sources_reflect_and_clamp() {
        let r = |n, p, m| sources("t", m, n, p, (n as i64 + p.0 + p.1) as usize).unwrap();
        assert_eq!(r(4, (2, 3), PadMode::Reflect), [2, 1, 0, 1, 2, 3, 2, 1, 0]);
        assert_eq!(
            r(4, (2, 3), PadMode::Replicate),
            [0, 0, 0, 1, 2, 3, 3, 3, 3]
        );
        // Negative pads crop; a far crop with a reflected end still lands inside.
        assert_eq!(r(4, (-1, 2), PadMode::Reflect), [1, 2, 3, 2, 1]);
        assert_eq!(r(4, (-3, 3), PadMode::Reflect), [3, 2, 1, 0]);
        assert_eq!(r(4, (-5, 3), PadMode::Replicate), [3, 3]);
        // Sizes that do not add up, or a reflection past the input, refuse.
        assert!(sources("t", PadMode::Reflect, 4, (1, 1), 5).is_err());
        assert!(sources("t", PadMode::Reflect, 2, (2, 0), 4).is_err());
    }

    #[test]
    fn pad1d_unbatched_matches_index_rule() {
        let mut x: Vec<f32> = (0..10).map(|v| v as f32).collect(); // (2, 5)
        let mut out = vec![0f32; 2 * 8];
        pad(
            &view(&mut out, DType::F32, &[2, 8]),
            &view(&mut x, DType::F32, &[2, 5]),
            &[(2, 1)],
            PadMode::Reflect,
        )
        .unwrap();
        let want = [2., 1., 0., 1., 2., 3., 4., 3.];
        assert_eq!(out[..8], want);
        assert_eq!(out[8..], want.map(|v| v + 5.0));
    }

    #[test]
    fn pad2d_backward_sums_into_sources() {
        // (1, 1, 2, 3) padded (1, 1, 1, 0) by replication: (1, 1, 3, 5).
        let mut go = vec![1f64; 15];
        let mut gi = vec![7f64; 6];
        pad_backward(
            &view(&mut gi, DType::F64, &[1, 1, 2, 3]),
            &view(&mut go, DType::F64, &[1, 1, 3, 5]),
            &[(1, 1), (1, 0)],
            PadMode::Replicate,
        )
        .unwrap();
        assert_eq!(gi, [4., 2., 4., 2., 1., 2.]);
        assert_eq!(gi.iter().sum::<f64>(), 15.0);
    }

    #[test]
    fn pad3d_bf16_strided_planes() {
        // Channels-last (1, 2, 1, 2, 2) input: planes are not row-major.
        let vals = [1.0f32, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0];
        let mut x: Vec<bf16> = vals.iter().map(|&v| bf16::from_f32(v)).collect();
        let xv = Strided::new(
            x.as_mut_ptr() as *mut u8,
            DType::BF16,
            [1usize, 2, 1, 2, 2].as_slice(),
            [8isize, 1, 8, 4, 2].as_slice(),
        );
        let mut out = vec![bf16::ZERO; 2 * 4 * 3];
        pad(
            &view(&mut out, DType::BF16, &[1, 2, 1, 4, 3]),
            &xv,
            &[(1, 0), (1, 1), (0, 0)],
            PadMode::Reflect,
        )
        .unwrap();
        let c0: Vec<f32> = out[..12].iter().map(|v| v.to_f32()).collect();
        assert_eq!(c0, [4., 3., 4., 2., 1., 2., 4., 3., 4., 2., 1., 2.]);
        assert_eq!(out[12].to_f32(), 40.0);
    }
}
