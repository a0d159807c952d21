//! Matrix products: `mm`, `addmm`, `bmm`, `baddbmm`, `addbmm`, `mv`,
//! `addmv`, `dot`.
//!
//! Every product is a batched `out[b] = beta * input[b] + alpha * (a[b] @ b[b])`
//! ([`baddbmm`]); the 2-d and 1-d ops view their operands as one-batch 3-d
//! views (unit dimensions with any stride). Operands keep their strides:
//! transposed or sliced matrices are read in place.
//!
//! - float32 / float64: the `gemm` crate (packed AVX-512 / AVX2 micro-kernels,
//!   rayon threads), which takes row and column strides for all three
//!   matrices.
//! - bfloat16 on CPUs with AVX512_BF16: a packed `vdpbf16ps` kernel with
//!   float32 accumulators (`linalg/bf16_gemm.rs`), rounded once.
//! - float16 / bfloat16 elsewhere: operands are widened to float32, multiplied
//!   with the float32 kernel and rounded once, as torch CPU accumulates in
//!   float32.
//! - integers: a blocked kernel in wrapping 64-bit arithmetic, truncated to
//!   the element type (the same bits as wrapping arithmetic in that type).
//!   bool is refused, as on CPU.
//!
//! Determinism: each element of the product accumulates over `k` in an order
//! fixed by the shapes (the gemm crate splits only `m` and `n` across
//! threads), so results do not depend on the thread count.

// Lane and tile loops index their accumulators on purpose (they vectorize).
#![allow(clippy::needless_range_loop)]

use super::copy::{self, Scalar};
use super::parallel;
use super::{KernelError, Strided};
use crate::dtype::DType;
use half::{bf16, f16};

mod bf16_gemm;
mod few_rows;
#[cfg(target_arch = "x86_64")]
pub(crate) use bf16_gemm::vpack::{first_lanes, transpose16};

/// A Python scalar coefficient (`beta`, `alpha`), as a float and as an int:
/// integer tensors use `i`, floating tensors use `f`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Coef {
    pub f: f64,
    pub i: i64,
}

impl Coef {
    pub const ZERO: Coef = Coef { f: 0.0, i: 0 };
    pub const ONE: Coef = Coef { f: 1.0, i: 1 };

    /// A float coefficient (an integer tensor sees it truncated).
    pub fn float(f: f64) -> Coef {
        Coef { f, i: f as i64 }
    }

    /// An integer coefficient.
    pub fn int(i: i64) -> Coef {
        Coef { f: i as f64, i }
    }

    fn is_zero_for(self, dtype: DType) -> bool {
        if dtype.is_floating() || dtype.is_complex() {
            self.f == 0.0
        } else {
            self.i == 0
        }
    }
}

/// Default of [`par_gemm`].
pub const PAR_GEMM_DEFAULT: usize = 1 << 23;

/// Work (m * n * k) from which one product is split across threads
/// (`FOO_RS_PAR_GEMM` overrides it); smaller products run on the calling
/// thread (handing work to a second thread costs more than it saves below
/// about 200^3 on a 2-core machine, far more when the other core is busy),
/// and batches of them run in parallel over the batch instead. Results do not
/// depend on it.
pub fn par_gemm() -> usize {
    static V: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if super::parallel::num_threads() <= 1 {
        return usize::MAX;
    }
    *V.get_or_init(|| super::parallel::env_usize("FOO_RS_PAR_GEMM", PAR_GEMM_DEFAULT))
}

/// Work (m * n * k) from which a lone product (no batch to spread) is split
/// into row or column blocks over foo's pool, each block one single-threaded
/// gemm call. The gemm crate's own threading (rayon) wakes its workers for
/// every call: at 256x256x256 float32 it ran 1.4x faster on 2 threads than on
/// one, against 1.9x for torch CPU's BLAS, and products under [`par_gemm`]
/// ran on one thread (an MLP with 256-wide layers trained at 1.5x CPU's
/// step time). A `FOO_RS_PAR_GEMM` below it starts threading earlier.
/// bfloat16 products (`bf16_gemm`, blocks on the same pool) thread from
/// here too: a Linear to 10 classes (256 x 1024 x 10) had run on one thread
/// against CPU's two.
pub const SPLIT_WORK: usize = 1 << 20;
/// Narrowest block of a split product.
const SPLIT_MIN_LEN: usize = 32;

/// Dimensions and strides (in elements) of one matrix of a batch.
#[derive(Clone, Copy, Debug)]
struct Mat {
    rs: isize,
    cs: isize,
    /// Stride between matrices of the batch.
    bs: isize,
}

impl Mat {
    fn of(t: &Strided) -> Mat {
        Mat {
            bs: t.strides[0],
            rs: t.strides[1],
            cs: t.strides[2],
        }
    }
}

#[derive(Clone, Copy)]
struct SendPtr(usize);

fn unsupported(op: &'static str, dtype: DType) -> KernelError {
    KernelError::UnsupportedDtype { op, dtype }
}

fn shape_err(msg: String) -> KernelError {
    KernelError::ShapeMismatch(msg)
}

/// `out = beta * input + alpha * (a @ b)`, batched: `out` is `[B, M, N]`,
/// `a` is `[B, M, K]`, `b` is `[B, K, N]`, `input` broadcasts to `[B, M, N]`
/// (ignored when `beta` is zero, NaNs included, as in BLAS). All of one dtype.
/// `out` must not overlap `a` or `b` (it may be `input` itself).
pub fn baddbmm(
    out: &Strided,
    input: Option<&Strided>,
    a: &Strided,
    b: &Strided,
    beta: Coef,
    alpha: Coef,
) -> Result<(), KernelError> {
    baddbmm_op("bmm", out, input, a, b, beta, alpha)
}

fn check_3d(
    out: &Strided,
    a: &Strided,
    b: &Strided,
) -> Result<(usize, usize, usize, usize), KernelError> {
    if out.ndim() != 3 || a.ndim() != 3 || b.ndim() != 3 {
        return Err(shape_err(
            "foo: batched matrix product expects 3-d tensors".into(),
        ));
    }
    let (bn, m, k) = (a.sizes[0], a.sizes[1], a.sizes[2]);
    if b.sizes[0] != bn || b.sizes[1] != k {
        return Err(shape_err(format!(
            "Expected size for first two dimensions of batch2 tensor to be: [{bn}, {k}] but got: [{}, {}].",
            b.sizes[0], b.sizes[1]
        )));
    }
    let n = b.sizes[2];
    if out.sizes[..] != [bn, m, n] {
        return Err(shape_err(format!(
            "foo: output of shape {:?} for a product of shape [{bn}, {m}, {n}]",
            out.sizes
        )));
    }
    if a.dtype != b.dtype || out.dtype != a.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "expected m1 and m2 to have the same dtype, but got: {} != {} (output {})",
            a.dtype.name(),
            b.dtype.name(),
            out.dtype.name()
        )));
    }
    Ok((bn, m, n, k))
}

fn baddbmm_op(
    op: &'static str,
    out: &Strided,
    input: Option<&Strided>,
    a: &Strided,
    b: &Strided,
    beta: Coef,
    alpha: Coef,
) -> Result<(), KernelError> {
    let (bn, m, n, k) = check_3d(out, a, b)?;
    let dtype = out.dtype;
    if dtype == DType::Bool {
        return Err(unsupported(op, dtype));
    }
    let input = input.filter(|_| !beta.is_zero_for(dtype));
    // the input read by the bfloat16 kernel where it is (a bias), not copied
    // into the output first
    let mut addend = None;
    if let Some(inp) = input {
        if inp.dtype != dtype {
            return Err(KernelError::InvalidArgument(format!(
                "foo: input of dtype {} for a product of dtype {}",
                inp.dtype.name(),
                dtype.name()
            )));
        }
        if !(inp.ptr == out.ptr && inp.sizes == out.sizes && inp.strides == out.strides) {
            addend = bf16_addend(out, inp, k, alpha)?;
            if addend.is_none() {
                broadcast_into(out, inp)?;
            }
        }
    }
    if out.numel() == 0 {
        return Ok(());
    }
    let read = input.is_some();
    if k == 0 || alpha.is_zero_for(dtype) {
        return if read {
            scale(out, beta)
        } else {
            copy::fill(out, 0.0, 0, true)
        };
    }
    let (om, am, bm) = (Mat::of(out), Mat::of(a), Mat::of(b));
    let shape = Shape { bn, m, n, k };
    match dtype {
        DType::F32 => float_bmm::<f32>(
            out.ptr,
            om,
            a.ptr,
            am,
            b.ptr,
            bm,
            shape,
            read,
            beta.f as f32,
            alpha.f as f32,
        ),
        DType::F64 => float_bmm::<f64>(
            out.ptr, om, a.ptr, am, b.ptr, bm, shape, read, beta.f, alpha.f,
        ),
        DType::F16 => half_bmm::<f16>(
            out.ptr,
            om,
            a.ptr,
            am,
            b.ptr,
            bm,
            shape,
            read,
            beta.f as f32,
            alpha.f as f32,
        ),
        DType::BF16 if bf16_gemm::available() => bf16_gemm::bmm(
            out.ptr,
            om,
            a.ptr,
            am,
            b.ptr,
            bm,
            shape,
            addend.or(read.then_some((out.ptr, om))),
            beta.f as f32,
            alpha.f as f32,
        ),
        DType::BF16 => half_bmm::<bf16>(
            out.ptr,
            om,
            a.ptr,
            am,
            b.ptr,
            bm,
            shape,
            read,
            beta.f as f32,
            alpha.f as f32,
        ),
        DType::U8 => int_bmm::<u8>(
            out.ptr, om, a.ptr, am, b.ptr, bm, shape, read, beta.i, alpha.i,
        ),
        DType::I8 => int_bmm::<i8>(
            out.ptr, om, a.ptr, am, b.ptr, bm, shape, read, beta.i, alpha.i,
        ),
        DType::I16 => int_bmm::<i16>(
            out.ptr, om, a.ptr, am, b.ptr, bm, shape, read, beta.i, alpha.i,
        ),
        DType::I32 => int_bmm::<i32>(
            out.ptr, om, a.ptr, am, b.ptr, bm, shape, read, beta.i, alpha.i,
        ),
        DType::I64 => int_bmm::<i64>(
            out.ptr, om, a.ptr, am, b.ptr, bm, shape, read, beta.i, alpha.i,
        ),
        // Complex: gemm's c32/c64 kernels (real coefficients; the caller
        // resolves conjugate/negative bits and complex coefficients).
        DType::C64 => float_bmm::<gemm::c32>(
            out.ptr,
            om,
            a.ptr,
            am,
            b.ptr,
            bm,
            shape,
            read,
            gemm::c32::new(beta.f as f32, 0.0),
            gemm::c32::new(alpha.f as f32, 0.0),
        ),
        DType::C128 => float_bmm::<gemm::c64>(
            out.ptr,
            om,
            a.ptr,
            am,
            b.ptr,
            bm,
            shape,
            read,
            gemm::c64::new(beta.f, 0.0),
            gemm::c64::new(alpha.f, 0.0),
        ),
        DType::Bool => unreachable!(),
    }
    Ok(())
}

/// The input of a bfloat16 product to be read in place by its kernel's
/// last step (`bf16_gemm::Addend`) rather than copied into the output
/// first ([`broadcast_into`]): when the kernel runs here, the product has
/// work (`k` and `alpha` not zero), the input's broadcast rows are
/// contiguous and it does not overlap the output. A Linear's bias: 1024 x
/// 256 -> 1024 at one thread had spent about a fifth of its time over CPU's
/// writing the bias rows and reading them back from memory.
fn bf16_addend(
    out: &Strided,
    inp: &Strided,
    k: usize,
    alpha: Coef,
) -> Result<Option<(*mut u8, Mat)>, KernelError> {
    if out.dtype != DType::BF16
        || !bf16_gemm::available()
        || k == 0
        || alpha.is_zero_for(out.dtype)
        || out.numel() == 0
        || inp.overlaps(out)
    {
        return Ok(None);
    }
    let st = copy::broadcast_strides(inp, &out.sizes)?;
    Ok((st[2] == 1).then_some((
        inp.ptr,
        Mat {
            bs: st[0],
            rs: st[1],
            cs: st[2],
        },
    )))
}

/// `out[b, i, j] = inp[b, i, j]` (broadcast) for 3-d `out` and an input of
/// the same dtype: row by row, as a memcpy (or a fill, for a broadcast row)
/// when rows are contiguous. The bias of `addmm` takes this path, except
/// where the bfloat16 kernel reads it in place ([`bf16_addend`]).
fn broadcast_into(out: &Strided, inp: &Strided) -> Result<(), KernelError> {
    let st = copy::broadcast_strides(inp, &out.sizes)?;
    fn go<T: Copy + Send + Sync>(out: &Strided, inp: &Strided, st: &[isize]) {
        let (bn, m, n) = (out.sizes[0], out.sizes[1], out.sizes[2]);
        let (o, i) = (SendPtr(out.ptr as usize), SendPtr(inp.ptr as usize));
        let os = [out.strides[0], out.strides[1], out.strides[2]];
        let row = |r: usize| {
            let (b, rr) = (r / m, r % m);
            // SAFETY: row (b, rr) of both views (broadcast strides for the input).
            unsafe {
                let dst = (o.0 as *mut T).offset(b as isize * os[0] + rr as isize * os[1]);
                let src = (i.0 as *const T).offset(b as isize * st[0] + rr as isize * st[1]);
                if os[2] == 1 && st[2] == 1 {
                    std::ptr::copy_nonoverlapping(src, dst, n);
                } else if os[2] == 1 && st[2] == 0 {
                    std::slice::from_raw_parts_mut(dst, n).fill(*src);
                } else {
                    for j in 0..n as isize {
                        *dst.offset(j * os[2]) = *src.offset(j * st[2]);
                    }
                }
            }
        };
        let rows = bn * m;
        if rows > 1 && rows * n >= super::reduce::par_min() {
            parallel::for_range(rows, (super::GRAIN_SIZE / n.max(1)).max(1), row);
        } else {
            (0..rows).for_each(row);
        }
    }
    if out.numel() == 0 {
        return Ok(());
    }
    match out.dtype.size() {
        1 => go::<u8>(out, inp, &st),
        2 => go::<u16>(out, inp, &st),
        4 => go::<u32>(out, inp, &st),
        8 => go::<u64>(out, inp, &st),
        _ => go::<[u64; 2]>(out, inp, &st),
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    bn: usize,
    m: usize,
    n: usize,
    k: usize,
}

impl Shape {
    fn work(&self) -> usize {
        self.m.saturating_mul(self.n).saturating_mul(self.k)
    }
    /// Whether to split the batch across threads (each product on one
    /// thread) rather than split each product.
    fn batch_parallel(&self) -> bool {
        self.bn > 1
            && self.work() < par_gemm()
            && self.bn.saturating_mul(self.work()) >= par_gemm() / 8
    }
}

/// Runs `f(batch, parallel_inside)` for every batch: in parallel over the
/// batch for small products, in order (each product threaded) for large ones.
fn for_batches(shape: Shape, f: impl Fn(usize, bool) + Sync) {
    if shape.batch_parallel() {
        parallel::parallel_for(shape.bn, |i| f(i, false));
    } else {
        let par = shape.work() >= par_gemm().min(SPLIT_WORK);
        for i in 0..shape.bn {
            f(i, par);
        }
    }
}

/// Column strides that are a multiple of this many bytes make a right
/// operand's columns fall into few L1 sets: 64 columns 4 KiB apart share
/// one set, 2 KiB apart two (a 512-wide float32 weight).
const ALIAS_BYTES: usize = 2048;

/// Fewest rows of the left operand for which [`relay_plan`] re-lays a right
/// operand of column stride `stride` bytes: fewer rows read each column
/// fewer times than the copy costs. At 2 KiB strides (AMD EPYC, F.linear
/// 512 -> 512, alternating with reading in place): 64 and 96 rows lost
/// (1.07-1.13x the time), 128 won (0.72-0.82x); 4 KiB strides win from 64
/// (measured on an Intel Sapphire Rapids core).
fn relay_rows(stride: usize) -> usize {
    if stride.is_multiple_of(2 * ALIAS_BYTES) {
        64
    } else {
        128
    }
}

thread_local! {
    /// Scratch for [`gemm_one`]'s re-laid right operands, reused per thread.
    static RELAID: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Most rows of a re-laid right operand one chunk of [`Relay`] copies: the
/// gemm crate's own depth block (it sums at least 512 products into a
/// register before adding them to the output), so the chunks make as many
/// runs per output as the crate's own blocking would. Chunks of 256 would
/// cut the float32 error at k = 1024 from 1.62x to 1.16x torch CPU's RMS
/// error on an AMD EPYC (MKL on AVX2), but took 1.00-1.10x the time of 512
/// at 128-512 x 512-3072 -> 512-4096 (one thread, medians of 11
/// alternating in one process).
const RELAY_DEPTH: usize = 512;

/// How [`gemm_one`] re-lays a column-major `k x n` right operand (Linear's
/// `x @ W.t()`, row stride 1) whose column stride `cs` is a multiple of 2
/// KiB (a 512- or 1024-wide float32 weight): the crate turns the product
/// around (`dst^T = W @ x^T`) and packs `W` by gathering 64 of its rows at
/// a time, and 64 rows 4 KiB apart fall into one L1 set, 2 KiB apart into
/// two. Each thread's block of the product copies `kb` rows of its columns
/// at a time to a scratch of column stride `ld` (an odd number of cache
/// lines: 64 consecutive columns in 64 sets) and adds that chunk's product
/// (`beta` on the first, 1 after).
///
/// Before (one copy of the whole operand on the calling thread, then the
/// product), F.linear at one thread took 1.12-1.44x torch CPU's time at
/// 128-512 x 1024 -> 1024 and 1.25x at 256 x 3072 -> 768, and 1.27-1.68x at
/// two threads (the copy serial, the scratch out of cache); in chunks, per
/// block: 1.09-1.29x at one thread, 0.96-1.18x at two (medians of 11,
/// alternating in one process, an Intel Sapphire Rapids core; on an AMD
/// EPYC, whose torch CPU takes MKL's AVX2 path, foo's `x @ W.t()` is about
/// 0.5x CPU's time and the relay 1.00-1.10x the time of reading a padded
/// weight in place). 2 KiB strides, re-laid against read in place on the
/// AMD EPYC (F.linear, 128-1024 rows, 512 -> 128-2048): 0.78-0.95x the
/// time at one thread, 0.45-0.72x at two, within 5% of a padded weight's.
/// Float types only (a chunk after the first adds with beta 1); other
/// types copy all `k` rows in one chunk.
#[derive(Clone, Copy)]
struct Relay {
    kb: usize,
    ld: usize,
}

/// The [`Relay`] for an `m x k` by `k x n` product with right operand
/// strides `rs`, `cs`, or `None` to read the operand in place. Decided from
/// the whole product (not a thread's block), so the chunks, and with them
/// the summation order, do not depend on the thread count.
fn relay_plan(
    (m, k, n): (usize, usize, usize),
    rs: isize,
    cs: isize,
    size: usize,
    chunked: bool,
) -> Option<Relay> {
    let cs = usize::try_from(cs).ok()?;
    let stride = cs * size;
    if m < relay_rows(stride)
        || rs != 1
        || n < 16
        || k < 64
        || cs < k
        || !stride.is_multiple_of(ALIAS_BYTES)
    {
        return None;
    }
    let pad = 64 / size;
    let kb = if chunked {
        // Balanced: k = 1324 is three chunks of 448, 448 and 428.
        k.div_ceil(k.div_ceil(RELAY_DEPTH))
            .next_multiple_of(pad)
            .min(k)
    } else {
        k
    };
    let mut ld = kb.next_multiple_of(pad);
    if (ld / pad).is_multiple_of(2) {
        ld += pad;
    }
    // Very large operands (a 32000 x 4096 output head) are read in place
    // rather than held twice.
    (ld * n * size <= RELAY_MAX_BYTES).then_some(Relay { kb, ld })
}

/// 1 as `T` when `T` is float32 or float64.
fn float_one<T: 'static + Copy>() -> Option<T> {
    use std::any::TypeId;
    // SAFETY: each branch reads a value of exactly type T.
    unsafe {
        if TypeId::of::<T>() == TypeId::of::<f32>() {
            Some(std::mem::transmute_copy(&1f32))
        } else if TypeId::of::<T>() == TypeId::of::<f64>() {
            Some(std::mem::transmute_copy(&1f64))
        } else {
            None
        }
    }
}

thread_local! {
    /// Scratch for [`gemm_one`]'s column-major outputs ([`transposed_output`]).
    static TRANSPOSED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Most rows [`transposed_output`] products take one row at a time.
/// Measured (1 thread, `F.linear` alternating with torch CPU in one
/// process): 2 x 1024 -> 1024 146 us a row at a time against 353 us through
/// the scratch (CPU 192-357 us); 4 x 512 -> 2000 250 against 347; at 8 rows
/// (784 -> 1024) the two are even.
const GEMV_ROWS: usize = 4;
/// Most output rows [`transposed_output`] takes: at 128 rows the copy
/// costs about what the crate loses (128 x 256 -> 1024: 877 against 845 us
/// at one thread, 620 against 495 at two; 128 x 784 -> 1024 2253 against
/// 2489 and even), at 96 rows and fewer the scratch wins (96 x 512 -> 512
/// 651 against 1027 us).
const TRANSPOSED_ROWS: usize = 96;

/// Whether [`gemm_one`] computes a product with a column-major right
/// operand (Linear's `x @ W.t()`) and a row-major output into a
/// column-major scratch and copies it out (or, up to [`GEMV_ROWS`] rows,
/// one row at a time). The gemm crate turns a row-major output into the
/// transposed problem (`dst^T = W @ x^T`), whose left operand is then `W`
/// read along its rows, and with few rows of `x` that ran at a fraction of
/// the machine's rate: one thread, `F.linear` 16 x 1024 -> 256 854 us
/// (torch CPU 147), 16 x 256 -> 1024 292 (126), 4 x 512 -> 2000 2144 (254).
/// With a column-major output the crate keeps the problem as given: 102,
/// 104 and 250 us (the last a row at a time). The copies cost a pass over
/// the output each (two with a bias read), at most 96 rows of it.
fn transposed_output(
    (m, n): (usize, usize),
    (dst_rs, dst_cs): (isize, isize),
    (rhs_rs, rhs_cs): (isize, isize),
) -> bool {
    (2..=TRANSPOSED_ROWS).contains(&m)
        && n >= 16
        && dst_cs == 1
        && rhs_rs == 1
        && rhs_cs != 1
        && dst_rs != 0
}

/// The largest right operand [`gemm_one`] re-lays, and the largest
/// [`transposed_output`] scratch it keeps (both stay allocated per thread).
const RELAY_MAX_BYTES: usize = 32 << 20;

/// Products of at most this many multiply-adds (m * n * k) take
/// [`small_gemm`]; ATen's small-bmm cut-off is 400, but the gemm crate's
/// fixed cost per call (below) is higher than BLAS's.
const SMALL_PRODUCT: usize = 2048;
/// The widest output row [`small_gemm`] accumulates on the stack.
const SMALL_ROW: usize = 128;

/// [`gemm_one`] for a small float32/float64 product, as ATen's small-bmm
/// kernel (`baddbmm_cpu_kernel`): each output element sums its `k` products
/// in order, then `dst = beta * dst (if read) + alpha * sum`. The gemm crate
/// allocates and zeroes its packing buffers on every call (about 2,700
/// instructions, more than a 4x8x4 product's arithmetic), which a batch of
/// attention-sized matrices pays per matrix. False if not such a product.
#[allow(clippy::too_many_arguments)]
unsafe fn small_gemm<T: 'static + Copy>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    dst_cs: isize,
    read: bool,
    lhs: *const T,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const T,
    rhs_rs: isize,
    rhs_cs: isize,
    beta: T,
    alpha: T,
) -> bool {
    use std::any::TypeId;
    use std::ops::{Add, Mul};
    #[allow(clippy::too_many_arguments)]
    unsafe fn go<F: Copy + Default + Add<Output = F> + Mul<Output = F>>(
        m: usize,
        n: usize,
        k: usize,
        dst: *mut F,
        (dst_rs, dst_cs): (isize, isize),
        read: bool,
        lhs: *const F,
        (lhs_rs, lhs_cs): (isize, isize),
        rhs: *const F,
        (rhs_rs, rhs_cs): (isize, isize),
        beta: F,
        alpha: F,
    ) {
        let mut acc = [F::default(); SMALL_ROW];
        for i in 0..m as isize {
            let acc = &mut acc[..n];
            acc.fill(F::default());
            for p in 0..k as isize {
                let a = *lhs.offset(i * lhs_rs + p * lhs_cs);
                let row = rhs.offset(p * rhs_rs);
                for (j, s) in acc.iter_mut().enumerate() {
                    *s = *s + a * *row.offset(j as isize * rhs_cs);
                }
            }
            for (j, &s) in acc.iter().enumerate() {
                let d = dst.offset(i * dst_rs + j as isize * dst_cs);
                *d = if read {
                    beta * *d + alpha * s
                } else {
                    alpha * s
                };
            }
        }
    }
    if m * n * k > SMALL_PRODUCT || n > SMALL_ROW {
        return false;
    }
    // The one body for each float type T may be (T is exactly the type the
    // pointers and coefficients are reinterpreted as).
    macro_rules! as_float {
        ($F:ty) => {
            if TypeId::of::<T>() == TypeId::of::<$F>() {
                let f = |v: T| *(&v as *const T as *const $F);
                go::<$F>(
                    m,
                    n,
                    k,
                    dst as *mut $F,
                    (dst_rs, dst_cs),
                    read,
                    lhs as *const $F,
                    (lhs_rs, lhs_cs),
                    rhs as *const $F,
                    (rhs_rs, rhs_cs),
                    f(beta),
                    f(alpha),
                );
                return true;
            }
        };
    }
    as_float!(f32);
    as_float!(f64);
    false
}

/// dst = beta * dst (if read) + alpha * lhs @ rhs, with the gemm crate
/// ([`small_gemm`] for a small float product).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_one<T: 'static + Copy>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    dst_cs: isize,
    read: bool,
    lhs: *const T,
    lhs_rs: isize,
    lhs_cs: isize,
    rhs: *const T,
    rhs_rs: isize,
    rhs_cs: isize,
    beta: T,
    alpha: T,
    par: bool,
) {
    if small_gemm(
        m, n, k, dst, dst_rs, dst_cs, read, lhs, lhs_rs, lhs_cs, rhs, rhs_rs, rhs_cs, beta, alpha,
    ) {
        return;
    }
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && few_rows::takes((m, n, k), (lhs_rs, lhs_cs), (rhs_rs, rhs_cs))
    {
        let f = |v: T| *(&v as *const T as *const f32);
        few_rows::gemm(
            m,
            n,
            k,
            (dst as *mut f32, dst_rs, dst_cs),
            read,
            (lhs as *const f32, lhs_rs),
            (rhs as *const f32, rhs_cs),
            f(beta),
            f(alpha),
            par,
        );
        return;
    }
    let size = std::mem::size_of::<T>();
    if transposed_output((m, n), (dst_rs, dst_cs), (rhs_rs, rhs_cs)) {
        if m <= GEMV_ROWS {
            // A row at a time: each a matrix-vector product, which the
            // crate reads `W` for row by row (bandwidth-bound) where a
            // 16-row micro-kernel would waste most of its lanes.
            for i in 0..m {
                gemm_one(
                    1,
                    n,
                    k,
                    dst.offset(i as isize * dst_rs),
                    dst_rs,
                    dst_cs,
                    read,
                    lhs.offset(i as isize * lhs_rs),
                    lhs_rs,
                    lhs_cs,
                    rhs,
                    rhs_rs,
                    rhs_cs,
                    beta,
                    alpha,
                    par,
                );
            }
            return;
        }
        let words = (m * n * size).div_ceil(8);
        let run = |buf: &mut Vec<u64>| {
            if buf.len() < words {
                buf.resize(words, 0);
            }
            // Element (i, j) of the product at t[i + j * m].
            let t = buf.as_mut_ptr() as *mut T;
            if read {
                for i in 0..m {
                    let row = dst.offset(i as isize * dst_rs);
                    for j in 0..n {
                        *t.add(i + j * m) = *row.add(j);
                    }
                }
            }
            gemm_one(
                m, n, k, t, 1, m as isize, read, lhs, lhs_rs, lhs_cs, rhs, rhs_rs, rhs_cs, beta,
                alpha, par,
            );
            for i in 0..m {
                let row = dst.offset(i as isize * dst_rs);
                for j in 0..n {
                    *row.add(j) = *t.add(i + j * m);
                }
            }
        };
        // An output too large to keep (a vocabulary head) takes a scratch
        // freed after the call, as `relay_plan` bounds its own.
        TRANSPOSED.with(|b| match b.try_borrow_mut() {
            Ok(mut buf) if words * 8 <= RELAY_MAX_BYTES => run(&mut buf),
            _ => run(&mut Vec::new()),
        });
        return;
    }
    let one = float_one::<T>();
    let relay = relay_plan((m, k, n), rhs_rs, rhs_cs, size, one.is_some());
    // One gemm crate call on `mm x nn` of the product, `d`, `l`, `r` its
    // output and operands, over `kk` of `k` (`first`: the first chunk).
    // gemm's convention: dst := alpha * dst + beta * lhs * rhs.
    let crate_call = |mm, nn, kk, d: *mut T, l: *const T, r: *const T, rcs, first: bool, par| {
        let (read, beta) = match one {
            Some(one) if !first => (true, one),
            _ => (read, beta),
        };
        gemm::gemm(
            mm, nn, kk, d, dst_cs, dst_rs, read, l, lhs_cs, lhs_rs, r, rcs, rhs_rs, beta, alpha,
            false, false, false, par,
        )
    };
    // The whole of `k`, or chunk by chunk through this thread's scratch.
    let crate_gemm = |mm: usize, nn: usize, d: *mut T, l: *const T, r: *const T, par| {
        let Some(Relay { kb, ld }) = relay else {
            return crate_call(mm, nn, k, d, l, r, rhs_cs, true, par);
        };
        let words = (ld * nn * size).div_ceil(8);
        let run = |buf: &mut Vec<u64>| {
            if buf.len() < words {
                buf.resize(words, 0);
            }
            let p = buf.as_mut_ptr() as *mut T;
            for k0 in (0..k).step_by(kb) {
                let kk = kb.min(k - k0);
                for j in 0..nn {
                    // SAFETY: rows k0..k0+kk of column j of rhs (row stride
                    // 1); the buffer holds nn columns of ld >= kb.
                    std::ptr::copy_nonoverlapping(
                        r.offset(j as isize * rhs_cs + k0 as isize),
                        p.add(j * ld),
                        kk,
                    );
                }
                let l = l.offset(k0 as isize * lhs_cs);
                crate_call(mm, nn, kk, d, l, p, ld as isize, k0 == 0, par);
            }
        };
        // A nested call on this thread (work stealing inside the product)
        // finds the scratch busy and takes its own.
        RELAID.with(|b| match b.try_borrow_mut() {
            Ok(mut buf) => run(&mut buf),
            Err(_) => run(&mut Vec::new()),
        });
    };
    if par {
        struct Args<F>(F);
        // SAFETY: blocks write disjoint parts of the output; the operands
        // outlive for_output_blocks, which returns when all ran.
        unsafe impl<F> Sync for Args<F> {}
        let call = Args(&crate_gemm);
        let split = for_output_blocks(
            m,
            n,
            (dst, dst_rs, dst_cs),
            (lhs, lhs_rs),
            (rhs, rhs_rs, rhs_cs),
            |b| {
                // The Sync wrapper, not its field. A block of the caller's
                // matrices (gemm_one's safety contract, which `crate_gemm`'s
                // unchecked call relies on).
                let call = &call;
                (call.0)(b.m, b.n, b.dst, b.lhs, b.rhs, gemm::Parallelism::None)
            },
        );
        if split {
            return;
        }
    }
    // A product too narrow to split (both sides under 64): the crate's own
    // threading (rayon) from par_gemm's work, else this thread alone.
    let threads = super::parallel::num_threads();
    let parallelism = if par && threads > 1 && m * n * k >= par_gemm() {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    crate_gemm(m, n, dst, lhs, rhs, parallelism);
}

/// Splits an `m x n` product's output into a grid of row and column blocks,
/// at most one per thread of foo's pool, and runs `f` on the pool for each
/// ([`Block`]: its size and where it starts in `dst`, `lhs` and `rhs`, each
/// given as a pointer and strides in elements); returns false (running
/// nothing) when the product has too few rows and columns for two blocks. Every block is one single-threaded
/// product over the whole of `k`; the gemm crate blocks `k` by `k` alone,
/// so every output element sums in the same order whatever the grid, and
/// results do not depend on the thread count.
///
/// The grid packs the least: a block packs its rows of the left operand and
/// its columns of the right one, so `pr x pc` blocks pack the left operand
/// `pc` times and the right one `pr` times; on a tie the column-major right
/// operand (row stride 1: Linear's `x @ W.t()`, whose packing is a
/// transposing read) is split rather than repeated. On two threads this is
/// rows when there are more rows than columns, else columns.
///
/// Every product that splits runs here, large ones too: the gemm crate's own
/// threading (rayon, whose packed right operand is shared between threads)
/// was as fast or slower at every size measured and is a second pool of
/// threads beside foo's, which spin against each other on a small machine:
/// 2 threads, medians of 7 alternating with torch CPU, foo/CPU rayon ->
/// split: 256x784x1024 1.27 -> 0.81, 256x1024x1024 1.17 -> 0.85, 1024^3
/// 0.93 -> 0.90, 2048^3 0.90 -> 0.88, 8192x1024x1024 0.81 -> 0.78.
pub(crate) fn for_output_blocks<T>(
    m: usize,
    n: usize,
    dst: (*mut T, isize, isize),
    lhs: (*const T, isize),
    rhs: (*const T, isize, isize),
    f: impl Fn(Block<T>) + Sync,
) -> bool {
    let (pr, pc) = output_grid(m, n, super::parallel::num_threads(), rhs.1 == 1);
    if pr * pc <= 1 {
        return false;
    }
    let (rs, cs) = (
        m.div_ceil(pr).next_multiple_of(16),
        n.div_ceil(pc).next_multiple_of(16),
    );
    let (br, bc) = (m.div_ceil(rs), n.div_ceil(cs));
    // Addresses as integers: raw pointers are not Sync.
    let (d, l, r) = (dst.0 as usize, lhs.0 as usize, rhs.0 as usize);
    super::parallel::parallel_for(br * bc, |t| {
        let (i0, j0) = ((t % br) * rs, (t / br) * cs);
        let (d, l, r) = (d as *mut T, l as *const T, r as *const T);
        f(Block {
            m: rs.min(m - i0),
            n: cs.min(n - j0),
            dst: d.wrapping_offset(i0 as isize * dst.1 + j0 as isize * dst.2),
            lhs: l.wrapping_offset(i0 as isize * lhs.1),
            rhs: r.wrapping_offset(j0 as isize * rhs.2),
        })
    });
    true
}

/// One block of a [`for_output_blocks`] product: its rows and columns and
/// where its output, its rows of the left operand and its columns of the
/// right one start (the caller's strides apply).
pub(crate) struct Block<T> {
    pub m: usize,
    pub n: usize,
    pub dst: *mut T,
    pub lhs: *const T,
    pub rhs: *const T,
}

/// [`for_output_blocks`]'s grid `(row blocks, column blocks)`: as many
/// blocks as threads allow (each side at least [`SPLIT_MIN_LEN`]), the
/// least packing among those.
fn output_grid(m: usize, n: usize, threads: usize, rhs_col_major: bool) -> (usize, usize) {
    let (most_r, most_c) = ((m / SPLIT_MIN_LEN).max(1), (n / SPLIT_MIN_LEN).max(1));
    let mut best = (1, 1);
    let mut best_key = (0, 0, false);
    for pr in 1..=threads.max(1).min(most_r) {
        let pc = (threads / pr).clamp(1, most_c);
        // More blocks first, then less packing, then the tie rule.
        let tie = if rhs_col_major { pc >= pr } else { pr >= pc };
        let key = (pr * pc, usize::MAX - (m * pc + n * pr), tie);
        if key > best_key {
            (best, best_key) = ((pr, pc), key);
        }
    }
    best
}

#[allow(clippy::too_many_arguments)]
fn float_bmm<T: 'static + Copy + Send + Sync>(
    out: *mut u8,
    om: Mat,
    a: *mut u8,
    am: Mat,
    b: *mut u8,
    bm: Mat,
    s: Shape,
    read: bool,
    beta: T,
    alpha: T,
) {
    let (o, a, b) = (
        SendPtr(out as usize),
        SendPtr(a as usize),
        SendPtr(b as usize),
    );
    for_batches(s, |i, par| {
        let i = i as isize;
        // SAFETY: the views were checked against their shapes; each batch's
        // output matrix is written by one call.
        unsafe {
            gemm_one::<T>(
                s.m,
                s.n,
                s.k,
                (o.0 as *mut T).offset(i * om.bs),
                om.rs,
                om.cs,
                read,
                (a.0 as *const T).offset(i * am.bs),
                am.rs,
                am.cs,
                (b.0 as *const T).offset(i * bm.bs),
                bm.rs,
                bm.cs,
                beta,
                alpha,
                par,
            )
        }
    });
}

/// Gathers a strided `rows x cols` matrix into a row-major float32 buffer.
unsafe fn gather_f32<T: Scalar + ToF32>(
    p: *const T,
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
    dst: &mut [f32],
) {
    for r in 0..rows {
        let row = p.offset(r as isize * rs);
        let d = &mut dst[r * cols..(r + 1) * cols];
        if cs == 1 {
            let src = std::slice::from_raw_parts(row, cols);
            for (o, &v) in d.iter_mut().zip(src) {
                *o = v.to_f32_();
            }
        } else {
            for (c, o) in d.iter_mut().enumerate() {
                *o = (*row.offset(c as isize * cs)).to_f32_();
            }
        }
    }
}

/// Widening to float32 for the half types (exact).
pub(crate) trait ToF32: Copy {
    fn to_f32_(self) -> f32;
    fn from_f32_(v: f32) -> Self;
}
impl ToF32 for f16 {
    #[inline(always)]
    fn to_f32_(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_f32_(v: f32) -> Self {
        f16::from_f32(v)
    }
}
impl ToF32 for bf16 {
    #[inline(always)]
    fn to_f32_(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
    #[inline(always)]
    fn from_f32_(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

#[allow(clippy::too_many_arguments)]
fn half_bmm<T: Scalar + ToF32>(
    out: *mut u8,
    om: Mat,
    a: *mut u8,
    am: Mat,
    b: *mut u8,
    bm: Mat,
    s: Shape,
    read: bool,
    beta: f32,
    alpha: f32,
) {
    let (o, a, b) = (
        SendPtr(out as usize),
        SendPtr(a as usize),
        SendPtr(b as usize),
    );
    for_batches(s, |i, par| {
        let i = i as isize;
        let mut abuf = vec![0f32; s.m * s.k];
        let mut bbuf = vec![0f32; s.k * s.n];
        let mut dbuf = vec![0f32; s.m * s.n];
        // SAFETY: as in float_bmm; the buffers are row-major and private.
        unsafe {
            let op = (o.0 as *mut T).offset(i * om.bs);
            gather_f32(
                (a.0 as *const T).offset(i * am.bs),
                s.m,
                s.k,
                am.rs,
                am.cs,
                &mut abuf,
            );
            gather_f32(
                (b.0 as *const T).offset(i * bm.bs),
                s.k,
                s.n,
                bm.rs,
                bm.cs,
                &mut bbuf,
            );
            if read {
                gather_f32(op, s.m, s.n, om.rs, om.cs, &mut dbuf);
            }
            gemm_one::<f32>(
                s.m,
                s.n,
                s.k,
                dbuf.as_mut_ptr(),
                s.n as isize,
                1,
                read,
                abuf.as_ptr(),
                s.k as isize,
                1,
                bbuf.as_ptr(),
                s.n as isize,
                1,
                beta,
                alpha,
                par,
            );
            for r in 0..s.m {
                for c in 0..s.n {
                    *op.offset(r as isize * om.rs + c as isize * om.cs) =
                        T::from_f32_(dbuf[r * s.n + c]);
                }
            }
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn int_bmm<T: Scalar>(
    out: *mut u8,
    om: Mat,
    a: *mut u8,
    am: Mat,
    b: *mut u8,
    bm: Mat,
    s: Shape,
    read: bool,
    beta: i64,
    alpha: i64,
) {
    let (o, a, b) = (
        SendPtr(out as usize),
        SendPtr(a as usize),
        SendPtr(b as usize),
    );
    for_batches(s, |i, par| {
        let i = i as isize;
        // SAFETY: as in float_bmm.
        unsafe {
            let op = SendPtr((o.0 as *mut T).offset(i * om.bs) as usize);
            let ap = SendPtr((a.0 as *const T).offset(i * am.bs) as usize);
            let bp = (b.0 as *const T).offset(i * bm.bs);
            // b transposed to [n][k] in i64, so that each dot product reads two rows.
            let mut bt = vec![0i64; s.n * s.k];
            for p in 0..s.k {
                for c in 0..s.n {
                    bt[c * s.k + p] =
                        (*bp.offset(p as isize * bm.rs + c as isize * bm.cs)).to_i64();
                }
            }
            let row = |r: usize| {
                let mut arow = vec![0i64; s.k];
                for (p, v) in arow.iter_mut().enumerate() {
                    *v = (*(ap.0 as *const T).offset(r as isize * am.rs + p as isize * am.cs))
                        .to_i64();
                }
                let op = op.0 as *mut T;
                for c in 0..s.n {
                    let bc = &bt[c * s.k..(c + 1) * s.k];
                    let mut acc = 0i64;
                    for (&x, &y) in arow.iter().zip(bc) {
                        acc = acc.wrapping_add(x.wrapping_mul(y));
                    }
                    let dst = op.offset(r as isize * om.rs + c as isize * om.cs);
                    let mut v = alpha.wrapping_mul(acc);
                    if read {
                        v = v.wrapping_add(beta.wrapping_mul((*dst).to_i64()));
                    }
                    *dst = T::from_i64(v);
                }
            };
            if par {
                parallel::parallel_for(s.m, row);
            } else {
                (0..s.m).for_each(row);
            }
        }
    });
}

/// out *= beta (the `k == 0` and `alpha == 0` cases).
fn scale(out: &Strided, beta: Coef) -> Result<(), KernelError> {
    if out.dtype.is_complex() {
        // A real coefficient scales both parts.
        scale(&out.complex_part(0), beta)?;
        return scale(&out.complex_part(1), beta);
    }
    fn go<T: Scalar>(out: &Strided, beta: Coef) {
        let p = out.ptr as *mut T;
        let float = T::is_float();
        copy::for_each_offset(&out.sizes, &out.strides, 0, out.numel(), |_, off| {
            // SAFETY: offsets of the view's own elements.
            unsafe {
                let v = *p.offset(off);
                *p.offset(off) = if float {
                    T::from_f64(v.to_f64() * beta.f)
                } else {
                    T::from_i64(v.to_i64().wrapping_mul(beta.i))
                };
            }
        });
    }
    crate::dispatch_dtype!(out.dtype, T => go::<T>(out, beta));
    Ok(())
}

fn as_batch(t: &Strided) -> Strided {
    let mut v = t.clone();
    v.sizes.insert(0, 1);
    v.strides.insert(0, 0);
    v
}

/// `out = beta * input + alpha * (mat1 @ mat2)` for 2-d `mat1` `[M, K]`,
/// `mat2` `[K, N]`, `out` `[M, N]`; `input` broadcasts to `[M, N]`.
pub fn addmm(
    out: &Strided,
    input: Option<&Strided>,
    mat1: &Strided,
    mat2: &Strided,
    beta: Coef,
    alpha: Coef,
) -> Result<(), KernelError> {
    if mat1.ndim() != 2 || mat2.ndim() != 2 || out.ndim() != 2 {
        return Err(shape_err("foo: mm expects 2-d tensors".into()));
    }
    if mat1.sizes[1] != mat2.sizes[0] {
        return Err(shape_err(format!(
            "mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})",
            mat1.sizes[0], mat1.sizes[1], mat2.sizes[0], mat2.sizes[1]
        )));
    }
    let inp = input.map(as_batch);
    baddbmm_op(
        "addmm_impl_cpu_",
        &as_batch(out),
        inp.as_ref(),
        &as_batch(mat1),
        &as_batch(mat2),
        beta,
        alpha,
    )
}

/// `out = mat1 @ mat2`.
pub fn mm(out: &Strided, mat1: &Strided, mat2: &Strided) -> Result<(), KernelError> {
    addmm(out, None, mat1, mat2, Coef::ZERO, Coef::ONE)
}

/// `out = beta * input + alpha * (mat @ vec)` for `mat` `[M, K]`, `vec` `[K]`,
/// `out` `[M]`; `input` broadcasts to `[M]`.
pub fn addmv(
    out: &Strided,
    input: Option<&Strided>,
    mat: &Strided,
    vec: &Strided,
    beta: Coef,
    alpha: Coef,
) -> Result<(), KernelError> {
    if mat.ndim() != 2
        || vec.ndim() != 1
        || out.ndim() != 1
        || mat.sizes[1] != vec.sizes[0]
        || out.sizes[0] != mat.sizes[0]
    {
        return Err(shape_err(format!(
            "size mismatch, got input ({}), mat ({}x{}), vec ({})",
            out.sizes.first().copied().unwrap_or(0),
            mat.sizes.first().copied().unwrap_or(0),
            mat.sizes.get(1).copied().unwrap_or(0),
            vec.sizes.first().copied().unwrap_or(0)
        )));
    }
    // [M] -> [1, M, 1]; [K] -> [1, K, 1].
    let col = |t: &Strided| {
        Strided::new(
            t.ptr,
            t.dtype,
            vec![1, t.sizes[0], 1],
            vec![0, t.strides[0], 1],
        )
    };
    let inp = input.map(|i| {
        let mut v = i.clone();
        v.sizes.insert(0, 1);
        v.strides.insert(0, 0);
        v.sizes.push(1);
        v.strides.push(1);
        v
    });
    baddbmm_op(
        "addmv_impl_cpu",
        &col(out),
        inp.as_ref(),
        &as_batch(mat),
        &col(vec),
        beta,
        alpha,
    )
}

/// `out = beta * input + alpha * sum_b(batch1[b] @ batch2[b])`: `out` `[M, N]`.
/// The batch is accumulated into `out` in order, one product at a time
/// (rounded to the element type after each, as torch CPU's `addbmm`).
pub fn addbmm(
    out: &Strided,
    input: Option<&Strided>,
    b1: &Strided,
    b2: &Strided,
    beta: Coef,
    alpha: Coef,
) -> Result<(), KernelError> {
    if b1.ndim() != 3 || b2.ndim() != 3 || out.ndim() != 2 {
        return Err(shape_err(
            "foo: addbmm expects 3-d batches and a 2-d output".into(),
        ));
    }
    let bn = b1.sizes[0];
    if b2.sizes[0] != bn || b2.sizes[1] != b1.sizes[2] {
        return Err(shape_err(format!(
            "Expected size for first two dimensions of batch2 tensor to be: [{bn}, {}] but got: [{}, {}].",
            b1.sizes[2], b2.sizes[0], b2.sizes[1]
        )));
    }
    let out3 = as_batch(out);
    let dtype = out.dtype;
    if dtype == DType::Bool {
        return Err(unsupported("addbmm", dtype));
    }
    let slice = |t: &Strided, i: usize| {
        Strided::new(
            // SAFETY: i < bn; offset inside the batch view.
            unsafe {
                t.ptr
                    .offset(i as isize * t.strides[0] * t.dtype.size() as isize)
            },
            t.dtype,
            vec![1, t.sizes[1], t.sizes[2]],
            vec![0, t.strides[1], t.strides[2]],
        )
    };
    if bn == 0 {
        let inp = input.map(as_batch);
        return baddbmm_op(
            "addbmm",
            &out3,
            inp.as_ref(),
            &slice_empty(b1),
            &slice_empty(b2),
            beta,
            Coef::ZERO,
        );
    }
    for i in 0..bn {
        if i == 0 {
            let inp = input.map(as_batch);
            baddbmm_op(
                "addbmm",
                &out3,
                inp.as_ref(),
                &slice(b1, i),
                &slice(b2, i),
                beta,
                alpha,
            )?;
        } else {
            let o = out3.clone();
            baddbmm_op(
                "addbmm",
                &out3,
                Some(&o),
                &slice(b1, i),
                &slice(b2, i),
                Coef::ONE,
                alpha,
            )?;
        }
    }
    Ok(())
}

fn slice_empty(t: &Strided) -> Strided {
    Strided::new(
        t.ptr,
        t.dtype,
        vec![1, t.sizes[1], t.sizes[2]],
        vec![0, t.strides[1], t.strides[2]],
    )
}

/// Accumulator lanes of [`dot`]: a fixed number, so the order of additions is
/// fixed by the length alone.
const DOT_LANES: usize = 16;
/// Elements per leaf of the pairwise tree of [`dot`].
const DOT_BLOCK: usize = 4096;

trait DotAcc: Copy + Send + Sync {
    const ZERO: Self;
    fn add(self, o: Self) -> Self;
}
impl DotAcc for f32 {
    const ZERO: f32 = 0.0;
    #[inline(always)]
    fn add(self, o: f32) -> f32 {
        self + o
    }
}
impl DotAcc for f64 {
    const ZERO: f64 = 0.0;
    #[inline(always)]
    fn add(self, o: f64) -> f64 {
        self + o
    }
}
impl DotAcc for i64 {
    const ZERO: i64 = 0;
    #[inline(always)]
    fn add(self, o: i64) -> i64 {
        self.wrapping_add(o)
    }
}

#[inline(always)]
fn dot_leaf<T: Copy, A: DotAcc>(
    a: *const T,
    sa: isize,
    b: *const T,
    sb: isize,
    lo: usize,
    hi: usize,
    mul: &impl Fn(T, T) -> A,
) -> A {
    let mut acc = [A::ZERO; DOT_LANES];
    let mut i = lo;
    // SAFETY: lo..hi lies inside both vectors.
    unsafe {
        if sa == 1 && sb == 1 {
            while i + DOT_LANES <= hi {
                for j in 0..DOT_LANES {
                    acc[j] = acc[j].add(mul(*a.add(i + j), *b.add(i + j)));
                }
                i += DOT_LANES;
            }
        }
        let mut j = 0;
        while i < hi {
            acc[j] = acc[j].add(mul(*a.offset(i as isize * sa), *b.offset(i as isize * sb)));
            i += 1;
            j = (j + 1) % DOT_LANES;
        }
    }
    let mut w = DOT_LANES;
    while w > 1 {
        w /= 2;
        for j in 0..w {
            acc[j] = acc[j].add(acc[j + w]);
        }
    }
    acc[0]
}

fn dot_tree<T: Copy + Send + Sync, A: DotAcc>(
    a: SendPtr,
    sa: isize,
    b: SendPtr,
    sb: isize,
    lo: usize,
    hi: usize,
    mul: &(impl Fn(T, T) -> A + Sync),
) -> A {
    let n = hi - lo;
    if n <= DOT_BLOCK {
        return dot_leaf(a.0 as *const T, sa, b.0 as *const T, sb, lo, hi, mul);
    }
    let blocks = n.div_ceil(DOT_BLOCK);
    let mid = lo + blocks.div_ceil(2) * DOT_BLOCK;
    let (l, r) = if n >= super::reduce::par_min() {
        parallel::join(
            || dot_tree(a, sa, b, sb, lo, mid, mul),
            || dot_tree(a, sa, b, sb, mid, hi, mul),
        )
    } else {
        (
            dot_tree(a, sa, b, sb, lo, mid, mul),
            dot_tree(a, sa, b, sb, mid, hi, mul),
        )
    };
    l.add(r)
}

/// `out[()] = sum_i a[i] * b[i]` for 1-d `a`, `b` of one dtype; float32 and
/// the half types accumulate in float32, float64 in float64, integers in
/// wrapping 64-bit arithmetic. A fixed pairwise tree: deterministic.
pub fn dot(out: &Strided, a: &Strided, b: &Strided) -> Result<(), KernelError> {
    if a.ndim() != 1 || b.ndim() != 1 {
        return Err(shape_err(format!(
            "1D tensors expected, but got {}D and {}D tensors",
            a.ndim(),
            b.ndim()
        )));
    }
    if a.sizes[0] != b.sizes[0] {
        return Err(shape_err(format!(
            "inconsistent tensor size, expected tensor [{}] and src [{}] to have the same number of elements, but got {} and {} elements respectively",
            a.sizes[0], b.sizes[0], a.sizes[0], b.sizes[0]
        )));
    }
    if a.dtype != b.dtype || out.dtype != a.dtype {
        return Err(KernelError::InvalidArgument(format!(
            "dot : expected both vectors to have same dtype, but found {} and {}",
            a.dtype.name(),
            b.dtype.name()
        )));
    }
    if out.numel() != 1 {
        return Err(shape_err("foo: dot writes a 0-d output".into()));
    }
    if a.dtype.is_complex() {
        // [1, 1, n] @ [1, n, 1] through the complex gemm.
        let row = Strided::new(
            a.ptr,
            a.dtype,
            vec![1, 1, a.sizes[0]],
            vec![0, 0, a.strides[0]],
        );
        let col = Strided::new(
            b.ptr,
            b.dtype,
            vec![1, b.sizes[0], 1],
            vec![0, b.strides[0], 0],
        );
        let o = Strided::new(out.ptr, out.dtype, vec![1, 1, 1], vec![0, 0, 0]);
        return baddbmm_op("dot", &o, None, &row, &col, Coef::ZERO, Coef::ONE);
    }
    let n = a.sizes[0];
    let (pa, pb) = (SendPtr(a.ptr as usize), SendPtr(b.ptr as usize));
    let (sa, sb) = (a.strides[0], b.strides[0]);
    fn store<T: Copy>(out: &Strided, v: T) {
        // SAFETY: a one-element output.
        unsafe { *(out.ptr as *mut T) = v };
    }
    match a.dtype {
        DType::Bool => return Err(unsupported("dot", DType::Bool)),
        DType::F32 => store(
            out,
            dot_tree::<f32, f32>(pa, sa, pb, sb, 0, n, &|x, y| x * y),
        ),
        DType::F64 => store(
            out,
            dot_tree::<f64, f64>(pa, sa, pb, sb, 0, n, &|x, y| x * y),
        ),
        DType::F16 => store(
            out,
            f16::from_f32(dot_tree::<f16, f32>(pa, sa, pb, sb, 0, n, &|x, y| {
                x.to_f32_() * y.to_f32_()
            })),
        ),
        DType::BF16 => store(
            out,
            bf16::from_f32(dot_tree::<bf16, f32>(pa, sa, pb, sb, 0, n, &|x, y| {
                x.to_f32_() * y.to_f32_()
            })),
        ),
        d => {
            crate::dispatch_dtype!(d, T => {
                let v = dot_tree::<T, i64>(pa, sa, pb, sb, 0, n, &|x: T, y: T| x.to_i64().wrapping_mul(y.to_i64()));
                store(out, T::from_i64(v))
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::contiguous_strides;

    fn view<T>(v: &mut [T], dtype: DType, sizes: &[usize]) -> Strided {
        Strided::new(
            v.as_mut_ptr() as *mut u8,
            dtype,
            sizes.to_vec(),
            contiguous_strides(sizes),
        )
    }

    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    fn data(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) % 2001) as f64 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn mm_f32_matches_naive_with_transposed_operands() {
        let (m, k, n) = (37, 53, 29);
        let a64 = data(m * k, 1);
        let b64 = data(k * n, 2);
        // a stored transposed ([k, m] row-major), read as [m, k] with strides (1, m).
        let mut at: Vec<f32> = vec![0.0; m * k];
        for i in 0..m {
            for p in 0..k {
                at[p * m + i] = a64[i * k + p] as f32;
            }
        }
        let mut b: Vec<f32> = b64.iter().map(|&x| x as f32).collect();
        let mut c = vec![0f32; m * n];
        let av = Strided::new(
            at.as_mut_ptr() as *mut u8,
            DType::F32,
            vec![m, k],
            vec![1, m as isize],
        );
        mm(
            &view(&mut c, DType::F32, &[m, n]),
            &av,
            &view(&mut b, DType::F32, &[k, n]),
        )
        .unwrap();
        let want = naive(&a64, &b64, m, k, n);
        for (x, y) in c.iter().zip(&want) {
            assert!((*x as f64 - y).abs() < 1e-4, "{x} vs {y}");
        }
    }

    #[test]
    fn addmm_beta_alpha_broadcast_bias_f64() {
        let (m, k, n) = (4, 3, 5);
        let mut a = data(m * k, 3);
        let mut b = data(k * n, 4);
        let mut bias = data(n, 5);
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![0f64; m * n];
        addmm(
            &view(&mut c, DType::F64, &[m, n]),
            Some(&view(&mut bias, DType::F64, &[n])),
            &view(&mut a, DType::F64, &[m, k]),
            &view(&mut b, DType::F64, &[k, n]),
            Coef::float(0.5),
            Coef::float(2.0),
        )
        .unwrap();
        for i in 0..m {
            for j in 0..n {
                let w = 0.5 * bias[j] + 2.0 * want[i * n + j];
                assert!((c[i * n + j] - w).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn beta_zero_ignores_nan_input() {
        let mut a = vec![1f32; 4];
        let mut b = vec![1f32; 4];
        let mut bias = vec![f32::NAN; 4];
        let mut c = vec![0f32; 4];
        addmm(
            &view(&mut c, DType::F32, &[2, 2]),
            Some(&view(&mut bias, DType::F32, &[2, 2])),
            &view(&mut a, DType::F32, &[2, 2]),
            &view(&mut b, DType::F32, &[2, 2]),
            Coef::ZERO,
            Coef::ONE,
        )
        .unwrap();
        assert_eq!(c, vec![2.0; 4]);
    }

    #[test]
    fn k_zero_gives_scaled_input() {
        let mut a: Vec<f32> = vec![];
        let mut bias = vec![3f32; 4];
        let mut c = vec![7f32; 4];
        let e = Strided::new(
            a.as_mut_ptr() as *mut u8,
            DType::F32,
            vec![2, 0],
            vec![1, 1],
        );
        let e2 = Strided::new(
            a.as_mut_ptr() as *mut u8,
            DType::F32,
            vec![0, 2],
            vec![2, 1],
        );
        addmm(
            &view(&mut c, DType::F32, &[2, 2]),
            Some(&view(&mut bias, DType::F32, &[2, 2])),
            &e,
            &e2,
            Coef::float(2.0),
            Coef::ONE,
        )
        .unwrap();
        assert_eq!(c, vec![6.0; 4]);
        mm(&view(&mut c, DType::F32, &[2, 2]), &e, &e2).unwrap();
        assert_eq!(c, vec![0.0; 4]);
    }

    #[test]
    fn shape_errors_name_the_shapes() {
        let mut a = vec![0f32; 6];
        let mut b = vec![0f32; 20];
        let mut c = vec![0f32; 10];
        let e = mm(
            &view(&mut c, DType::F32, &[2, 5]),
            &view(&mut a, DType::F32, &[2, 3]),
            &view(&mut b, DType::F32, &[4, 5]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"
        );
    }

    #[test]
    fn integer_mm_wraps_like_the_element_type() {
        let mut a: Vec<i8> = vec![100, 100, 1, 2];
        let mut b: Vec<i8> = vec![2, 0, 1, 1];
        let mut c = vec![0i8; 4];
        mm(
            &view(&mut c, DType::I8, &[2, 2]),
            &view(&mut a, DType::I8, &[2, 2]),
            &view(&mut b, DType::I8, &[2, 2]),
        )
        .unwrap();
        // row 0: [100*2 + 100*1, 100] = [300 -> 44, 100]
        assert_eq!(c, vec![44, 100, 4, 2]);
        let (mut b1, mut b2, mut b3) = ([true; 4], [true; 4], [true; 4]);
        let r = mm(
            &view(&mut b1, DType::Bool, &[2, 2]),
            &view(&mut b2, DType::Bool, &[2, 2]),
            &view(&mut b3, DType::Bool, &[2, 2]),
        );
        assert!(matches!(r, Err(KernelError::UnsupportedDtype { .. })));
    }

    #[test]
    fn bf16_and_f16_round_once_from_f32() {
        let (m, k, n) = (8, 40, 6);
        let a64 = data(m * k, 7);
        let b64 = data(k * n, 8);
        let mut a: Vec<bf16> = a64.iter().map(|&x| bf16::from_f64(x)).collect();
        let mut b: Vec<bf16> = b64.iter().map(|&x| bf16::from_f64(x)).collect();
        let ar: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        let br: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
        let want = naive(&ar, &br, m, k, n);
        let mut c = vec![bf16::ZERO; m * n];
        mm(
            &view(&mut c, DType::BF16, &[m, n]),
            &view(&mut a, DType::BF16, &[m, k]),
            &view(&mut b, DType::BF16, &[k, n]),
        )
        .unwrap();
        for (x, y) in c.iter().zip(&want) {
            assert!(
                (x.to_f64() - y).abs() <= 1e-2 * y.abs() + 1e-2,
                "{x} vs {y}"
            );
        }
        let mut a: Vec<f16> = a64.iter().map(|&x| f16::from_f64(x)).collect();
        let mut b: Vec<f16> = b64.iter().map(|&x| f16::from_f64(x)).collect();
        let ar: Vec<f64> = a.iter().map(|x| x.to_f64()).collect();
        let br: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
        let want = naive(&ar, &br, m, k, n);
        let mut c = vec![f16::ZERO; m * n];
        mm(
            &view(&mut c, DType::F16, &[m, n]),
            &view(&mut a, DType::F16, &[m, k]),
            &view(&mut b, DType::F16, &[k, n]),
        )
        .unwrap();
        for (x, y) in c.iter().zip(&want) {
            assert!(
                (x.to_f64() - y).abs() <= 2e-3 * y.abs() + 2e-3,
                "{x} vs {y}"
            );
        }
    }

    #[test]
    fn bmm_and_addbmm() {
        let (bn, m, k, n) = (5, 3, 4, 2);
        let mut a = data(bn * m * k, 9);
        let mut b = data(bn * k * n, 10);
        let mut c = vec![0f64; bn * m * n];
        baddbmm(
            &view(&mut c, DType::F64, &[bn, m, n]),
            None,
            &view(&mut a, DType::F64, &[bn, m, k]),
            &view(&mut b, DType::F64, &[bn, k, n]),
            Coef::ZERO,
            Coef::ONE,
        )
        .unwrap();
        let mut total = vec![0f64; m * n];
        for i in 0..bn {
            let w = naive(
                &a[i * m * k..(i + 1) * m * k],
                &b[i * k * n..(i + 1) * k * n],
                m,
                k,
                n,
            );
            for j in 0..m * n {
                assert!((c[i * m * n + j] - w[j]).abs() < 1e-12);
                total[j] += w[j];
            }
        }
        let mut s = vec![0f64; m * n];
        addbmm(
            &view(&mut s, DType::F64, &[m, n]),
            None,
            &view(&mut a, DType::F64, &[bn, m, k]),
            &view(&mut b, DType::F64, &[bn, k, n]),
            Coef::ZERO,
            Coef::ONE,
        )
        .unwrap();
        for j in 0..m * n {
            assert!((s[j] - total[j]).abs() < 1e-12);
        }
    }

    #[test]
    fn mv_and_dot() {
        let (m, k) = (7, 5000);
        let mut a = data(m * k, 11);
        let mut v = data(k, 12);
        let mut o = vec![0f64; m];
        addmv(
            &view(&mut o, DType::F64, &[m]),
            None,
            &view(&mut a, DType::F64, &[m, k]),
            &view(&mut v, DType::F64, &[k]),
            Coef::ZERO,
            Coef::ONE,
        )
        .unwrap();
        for i in 0..m {
            let w: f64 = (0..k).map(|p| a[i * k + p] * v[p]).sum();
            assert!((o[i] - w).abs() < 1e-9);
        }
        let mut d = vec![0f64; 1];
        let row = Strided::new(a.as_mut_ptr() as *mut u8, DType::F64, vec![k], vec![1]);
        dot(
            &Strided::new(d.as_mut_ptr() as *mut u8, DType::F64, vec![], vec![]),
            &row,
            &view(&mut v, DType::F64, &[k]),
        )
        .unwrap();
        assert!((d[0] - o[0]).abs() < 1e-9);
        let mut xi: Vec<i32> = (0..100).collect();
        let mut di = vec![0i32];
        let xv = view(&mut xi, DType::I32, &[100]);
        dot(
            &Strided::new(di.as_mut_ptr() as *mut u8, DType::I32, vec![], vec![]),
            &xv,
            &xv,
        )
        .unwrap();
        assert_eq!(di[0], (0..100).map(|x| x * x).sum::<i32>());
    }

    /// A transposed right operand (Linear's `x @ W.t()`) gives the product,
    /// for f32 and f64, ragged edges, and the same bits on 1 and 2 threads.
    #[test]
    fn transposed_rhs_matches_reference() {
        for &(m, k, n) in &[
            (40usize, 200usize, 100usize),
            (33, 129, 131),
            (64, 784, 300),
        ] {
            let mut a: Vec<f64> = data(m * k, 21);
            let mut w: Vec<f64> = data(n * k, 22); // W: n x k row-major; rhs = W^T
            let mut c = vec![0f64; m * n];
            let rhs = Strided::new(
                w.as_mut_ptr() as *mut u8,
                DType::F64,
                vec![k, n],
                vec![1, k as isize],
            );
            mm(
                &view(&mut c, DType::F64, &[m, n]),
                &view(&mut a, DType::F64, &[m, k]),
                &rhs,
            )
            .unwrap();
            for i in 0..m {
                for j in 0..n {
                    let e: f64 = (0..k).map(|p| a[i * k + p] * w[j * k + p]).sum();
                    assert!(
                        (c[i * n + j] - e).abs() <= 1e-9 * (1.0 + e.abs()),
                        "f64 {m}x{k}x{n} at ({i},{j})"
                    );
                }
            }
            let mut a32: Vec<f32> = a.iter().map(|&x| x as f32).collect();
            let mut w32: Vec<f32> = w.iter().map(|&x| x as f32).collect();
            let run = |threads: usize, a32: &mut Vec<f32>, w32: &mut Vec<f32>| {
                let mut c32 = vec![0f32; m * n];
                let rhs = Strided::new(
                    w32.as_mut_ptr() as *mut u8,
                    DType::F32,
                    vec![k, n],
                    vec![1, k as isize],
                );
                super::super::parallel::with_threads(threads, || {
                    mm(
                        &view(&mut c32, DType::F32, &[m, n]),
                        &view(a32, DType::F32, &[m, k]),
                        &rhs,
                    )
                    .unwrap()
                });
                c32
            };
            let one = run(1, &mut a32, &mut w32);
            let two = run(2, &mut a32, &mut w32);
            assert!(one
                .iter()
                .zip(&two)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
            for i in 0..m {
                for j in 0..n {
                    let e: f64 = (0..k)
                        .map(|p| a32[i * k + p] as f64 * w32[j * k + p] as f64)
                        .sum();
                    assert!(
                        (one[i * n + j] as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()),
                        "f32 {m}x{k}x{n} at ({i},{j})"
                    );
                }
            }
        }
    }

    /// A right operand whose column stride is a multiple of 4 KiB, re-laid in
    /// chunks of its rows ([`relay_plan`]): k = 1324 in three chunks, the
    /// output read (beta 0.5, alpha -2), against float64; the same bits at
    /// 1, 2 and 3 threads (blocks of rows and columns take the same chunks).
    /// The plan's bounds: rows (64 at 4 KiB strides, 128 at 2 KiB), strides
    /// off 2 KiB read in place, one chunk for non-float types.
    #[test]
    fn relayed_rhs_in_chunks_matches_reference() {
        let (m, k, n, cs) = (100usize, 1324usize, 70usize, 2048usize);
        let plan = relay_plan((m, k, n), 1, cs as isize, 4, true).unwrap();
        assert_eq!(plan.kb, 448);
        assert!(plan.ld >= plan.kb && (plan.ld * 4 / 64) % 2 == 1);
        assert!(relay_plan((63, k, n), 1, cs as isize, 4, true).is_none());
        // 2 KiB strides from 128 rows.
        assert!(relay_plan((128, 512, n), 1, 512, 4, true).is_some());
        assert!(relay_plan((127, 512, n), 1, 512, 4, true).is_none());
        assert!(relay_plan((64, 256, n), 1, 512, 8, true).is_some());
        assert!(relay_plan((m, k, n), 1, 1040, 4, true).is_none());
        assert_eq!(
            relay_plan((m, k, n), 1, cs as isize, 8, false).unwrap().kb,
            k
        );
        let a: Vec<f32> = data(m * k, 31).iter().map(|&x| x as f32).collect();
        let w: Vec<f32> = data(n * cs, 32).iter().map(|&x| x as f32).collect();
        let c0: Vec<f32> = data(m * n, 33).iter().map(|&x| x as f32).collect();
        let run = |threads: usize| {
            let mut c = c0.clone();
            super::parallel::with_threads(threads, || unsafe {
                gemm_one::<f32>(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                    true,
                    a.as_ptr(),
                    k as isize,
                    1,
                    w.as_ptr(),
                    1,
                    cs as isize,
                    0.5,
                    -2.0,
                    true,
                )
            });
            c
        };
        let one = run(1);
        for i in 0..m {
            for j in 0..n {
                let e: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * w[j * cs + p] as f64)
                    .sum::<f64>()
                    * -2.0
                    + 0.5 * c0[i * n + j] as f64;
                let got = one[i * n + j] as f64;
                assert!(
                    (got - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "({i},{j}): {got} vs {e}"
                );
            }
        }
        for t in [2, 3] {
            let c = run(t);
            assert!(
                one.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{t} threads"
            );
        }
    }

    /// The output grid of a split product: one block per thread where the
    /// sides allow, along the larger side on two threads (the column-major
    /// right operand's side on a tie), two ways on four when that packs
    /// less, unsplit when neither side has two blocks' worth.
    #[test]
    fn output_grid_uses_every_thread_and_packs_least() {
        assert_eq!(output_grid(1024, 256, 2, false), (2, 1));
        assert_eq!(output_grid(256, 1024, 2, true), (1, 2));
        assert_eq!(output_grid(512, 512, 2, false), (2, 1));
        assert_eq!(output_grid(512, 512, 2, true), (1, 2));
        assert_eq!(output_grid(1024, 1024, 4, false), (2, 2));
        assert_eq!(output_grid(8192, 64, 4, false), (4, 1));
        assert_eq!(output_grid(40, 5000, 2, false), (1, 2));
        assert_eq!(output_grid(40, 40, 4, false), (1, 1));
        assert_eq!(output_grid(4096, 4096, 1, false), (1, 1));
        // Three threads: three blocks along the larger side.
        assert_eq!(output_grid(300, 3000, 3, false), (1, 3));
    }

    /// The same bits with 1 and with several threads, for shapes that take
    /// the threaded path and ragged edges.
    #[test]
    fn deterministic_across_thread_counts() {
        // Split by columns, rows, both square, a single row, below the split.
        for &(m, k, n) in &[
            (300usize, 257usize, 301usize),
            (700, 300, 64),
            (256, 256, 256),
            (1, 5000, 300),
            (513, 64, 1),
        ] {
            let mut a: Vec<f32> = data(m * k, 13).iter().map(|&x| x as f32).collect();
            let mut b: Vec<f32> = data(k * n, 14).iter().map(|&x| x as f32).collect();
            let run = |threads: usize, a: &mut Vec<f32>, b: &mut Vec<f32>| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut c = vec![0f32; m * n];
                pool.install(|| {
                    super::parallel::with_threads(threads, || {
                        mm(
                            &view(&mut c, DType::F32, &[m, n]),
                            &view(a, DType::F32, &[m, k]),
                            &view(b, DType::F32, &[k, n]),
                        )
                        .unwrap()
                    })
                });
                c
            };
            let one = run(1, &mut a, &mut b);
            for t in [2, 3, 4] {
                let c = run(t, &mut a, &mut b);
                assert!(
                    one.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{m}x{k}x{n} with {t} threads"
                );
            }
        }
    }
}
