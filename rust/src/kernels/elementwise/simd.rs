//! Runtime SIMD dispatch for the elementwise inner loops.
//!
//! Every inner loop is written once, as a generic function over contiguous
//! raw pointers that processes `W` lanes at a time through local arrays (so
//! LLVM vectorizes it and an output may alias an input exactly), and is
//! instantiated three times: inside an AVX-512 `#[target_feature]` function,
//! inside an AVX2+FMA one, and without features. The level is detected once
//! (`OnceLock`); [`level`] picks the instantiation.
//!
//! No level changes results: Rust never contracts or reassociates float
//! arithmetic, so the vector body, the scalar tail and every level compute
//! the same bits. That is what makes results independent of how the engine
//! splits work across threads.
//!
//! Module direction: this module sits below the engine. Of the elementwise
//! modules it uses only `half_bits` (the one-value float16 / bfloat16
//! conversions its bulk tables share), and of the kernels' only the overlap
//! rule (`kernels::ranges_overlap`); `cast`, `iter` and the ops use it, never
//! the reverse.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// Instruction-set level of the inner loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SimdLevel {
    /// Baseline target features only.
    Portable = 0,
    /// AVX2 + FMA + F16C.
    Avx2 = 1,
    /// AVX-512 F/BW/DQ/VL (+ AVX2, FMA, F16C).
    Avx512 = 2,
}

impl SimdLevel {
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Portable => "portable",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
        }
    }

    pub(crate) fn from_u8(v: u8) -> SimdLevel {
        match v {
            2 => SimdLevel::Avx512,
            1 => SimdLevel::Avx2,
            _ => SimdLevel::Portable,
        }
    }
}

static DETECTED: OnceLock<SimdLevel> = OnceLock::new();
const UNSET: u8 = u8::MAX;
static ACTIVE: AtomicU8 = AtomicU8::new(UNSET);

fn detect_cpu() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c");
        let avx512 = avx2
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl");
        if avx512 {
            return SimdLevel::Avx512;
        }
        if avx2 {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Portable
}

/// The best level this CPU supports, capped by the `FOO_RS_SIMD`
/// environment variable (`portable`, `avx2` or `avx512`) if set.
pub fn detected() -> SimdLevel {
    *DETECTED.get_or_init(|| {
        let cpu = detect_cpu();
        match std::env::var("FOO_RS_SIMD")
            .ok()
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("portable") | Some("scalar") | Some("none") => SimdLevel::Portable,
            Some("avx2") => cpu.min(SimdLevel::Avx2),
            _ => cpu,
        }
    })
}

/// The level the inner loops currently use.
#[inline]
pub fn level() -> SimdLevel {
    let v = ACTIVE.load(Ordering::Relaxed);
    if v != UNSET {
        return SimdLevel::from_u8(v);
    }
    let d = detected();
    ACTIVE.store(d as u8, Ordering::Relaxed);
    d
}

/// Tests that switch the level ([`set_level`], process-wide) hold this for
/// writing ([`level_switch`]) and tests whose checks depend on the level
/// hold it for reading ([`level_held`]), so the two never overlap: a test
/// asserting that a path applies had seen another test's level.
#[cfg(test)]
static TEST_LEVEL: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// [`TEST_LEVEL`] for writing (a failed holder's poison ignored).
#[cfg(test)]
pub(crate) fn level_switch() -> std::sync::RwLockWriteGuard<'static, ()> {
    TEST_LEVEL.write().unwrap_or_else(|e| e.into_inner())
}

/// [`TEST_LEVEL`] for reading (a failed holder's poison ignored).
#[cfg(test)]
pub(crate) fn level_held() -> std::sync::RwLockReadGuard<'static, ()> {
    TEST_LEVEL.read().unwrap_or_else(|e| e.into_inner())
}

/// Selects the level used from now on (capped to what the CPU supports) and
/// returns the level actually set. For tests and benchmarks.
pub fn set_level(want: SimdLevel) -> SimdLevel {
    let l = want.min(detected());
    ACTIVE.store(l as u8, Ordering::Relaxed);
    l
}

/// Runs `body` compiled for the level in use ([`level`]): inside an AVX-512 or an AVX2 + FMA +
/// F16C `#[target_feature]` function, or as it is. A loop written once in `body` (inlined
/// into each copy) vectorizes at each width; as for the elementwise loops, no level changes
/// results unless `body` asks for fused multiply-adds itself. Callers write `body` as an
/// `#[inline(always)]` closure (and what it calls as `#[inline(always)]` functions): a closure
/// left to the inliner stays one baseline (SSE2) function that every copy merely calls, which
/// made SDPA 2.6x slower until it was marked.
#[inline(always)]
pub fn dispatch<R>(body: impl FnOnce() -> R) -> R {
    dispatch_at(level(), body)
}

/// [`dispatch`] at a level the caller read once with [`level`] (so every
/// piece of one kernel call runs at the same level), capped to what this
/// CPU supports. The one place outside the elementwise loops that enters a
/// `#[target_feature]` function.
#[inline(always)]
pub fn dispatch_at<R>(level: SimdLevel, body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
        unsafe fn v4<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn v3<R>(body: impl FnOnce() -> R) -> R {
            body()
        }
        // SAFETY: the level is capped to what this CPU supports.
        unsafe {
            match level.min(detected()) {
                SimdLevel::Avx512 => return v4(body),
                SimdLevel::Avx2 => return v3(body),
                SimdLevel::Portable => {}
            }
        }
    }
    let _ = level;
    body()
}

/// Whether `n` elements at `p` and `n` at `q` share a byte
/// ([`crate::kernels::ranges_overlap`] on their byte ranges).
#[inline(always)]
fn overlaps<P, Q>(p: *const P, q: *const Q, n: usize) -> bool {
    let range = |a: usize, es: usize| (a, a + n * es);
    crate::kernels::ranges_overlap(
        range(p as usize, std::mem::size_of::<P>()),
        range(q as usize, std::mem::size_of::<Q>()),
    )
}

/// Whether `o` is `a` itself: an in-place op (same address, elements of one
/// size), computed in one pass over one slice instead of through a chunk.
#[inline(always)]
fn is_self<R, A>(o: *mut R, a: *const A) -> bool {
    std::ptr::addr_eq(o, a) && std::mem::size_of::<R>() == std::mem::size_of::<A>()
}

/// `r`'s bits as an `A` (the element type of an in-place operand that `r`
/// overwrites; [`is_self`] checked the sizes are equal).
#[inline(always)]
fn bits<R: Copy, A: Copy>(r: R) -> A {
    debug_assert_eq!(std::mem::size_of::<R>(), std::mem::size_of::<A>());
    // SAFETY: equal sizes; every type mapped here is plain bits (numbers, bool
    // results only where the operand is bool too).
    unsafe { std::mem::transmute_copy(&r) }
}

/// Keeps LLVM's loop vectorizer off the loop this sits in (an empty asm
/// block cannot be widened), so a loop over blocks whose body is one
/// vector op stays that: left alone, it vectorized the loop over blocks as
/// well, into gathers and scatters 6-20x slower than the plain loop.
#[inline(always)]
fn keep_scalar_loop() {
    // SAFETY: an empty asm block: no instructions, no memory, no flags.
    unsafe { std::arch::asm!("", options(nomem, nostack, preserves_flags)) }
}

/// Lanes of a block of [`Rows`]'s broadcast loops: one AVX-512 register
/// of float32.
const BLOCK_LANES: usize = 16;

/// Elements per chunk when the output overlaps an input other than exactly
/// (see [`is_self`]).
const CHUNK: usize = 256;

// The loops are plain indexed loops over slices, which LLVM's loop vectorizer
// turns into full-width SIMD (slices passed as arguments are `noalias`).
// An in-place op (the output is an input, exactly) runs over that operand as
// one mutable slice; any other overlap goes through a stack chunk first, so no
// slice ever aliases another. (Every in-place op used to take the chunk: one
// more copy per element, 2.7x torch CPU's time for a 1M-element `mul_`.)
macro_rules! map_bodies {
    () => {
        #[inline(always)]
        fn i1<A: Copy, R: Copy, F: Fn(A) -> R>(s: &mut [A], f: &F) {
            for x in s.iter_mut() {
                *x = super::bits(f(*x));
            }
        }

        #[inline(always)]
        fn i2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(s: &mut [A], b: &[B], f: &F) {
            let n = s.len().min(b.len());
            for i in 0..n {
                s[i] = super::bits(f(s[i], b[i]));
            }
        }

        #[inline(always)]
        fn i3<A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R>(
            s: &mut [A],
            b: &[B],
            c: &[C],
            f: &F,
        ) {
            let n = s.len().min(b.len()).min(c.len());
            for i in 0..n {
                s[i] = super::bits(f(s[i], b[i], c[i]));
            }
        }

        #[inline(always)]
        fn i4<A: Copy, B: Copy, C: Copy, D: Copy, R: Copy, F: Fn(A, B, C, D) -> R>(
            s: &mut [A],
            b: &[B],
            c: &[C],
            d: &[D],
            f: &F,
        ) {
            let n = s.len().min(b.len()).min(c.len()).min(d.len());
            for i in 0..n {
                s[i] = super::bits(f(s[i], b[i], c[i], d[i]));
            }
        }
        #[inline(always)]
        fn s1<A: Copy, R: Copy, F: Fn(A) -> R>(o: &mut [R], a: &[A], f: &F) {
            let n = o.len().min(a.len());
            for i in 0..n {
                o[i] = f(a[i]);
            }
        }

        #[inline(always)]
        fn s2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(o: &mut [R], a: &[A], b: &[B], f: &F) {
            let n = o.len().min(a.len()).min(b.len());
            for i in 0..n {
                o[i] = f(a[i], b[i]);
            }
        }

        #[inline(always)]
        fn s3<A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R>(
            o: &mut [R],
            a: &[A],
            b: &[B],
            c: &[C],
            f: &F,
        ) {
            let n = o.len().min(a.len()).min(b.len()).min(c.len());
            for i in 0..n {
                o[i] = f(a[i], b[i], c[i]);
            }
        }

        #[inline(always)]
        fn s4<A: Copy, B: Copy, C: Copy, D: Copy, R: Copy, F: Fn(A, B, C, D) -> R>(
            o: &mut [R],
            a: &[A],
            b: &[B],
            c: &[C],
            d: &[D],
            f: &F,
        ) {
            let n = o.len().min(a.len()).min(b.len()).min(c.len()).min(d.len());
            for i in 0..n {
                o[i] = f(a[i], b[i], c[i], d[i]);
            }
        }

        /// Runs `body(start, len, tmp)` per chunk, then copies `tmp` to `o`.
        #[inline(always)]
        unsafe fn chunked<R: Copy>(n: usize, o: *mut R, mut body: impl FnMut(usize, &mut [R])) {
            let mut tmp = std::mem::MaybeUninit::<[R; super::CHUNK]>::uninit();
            let mut c = 0;
            while c < n {
                let m = (n - c).min(super::CHUNK);
                // SAFETY: `body` writes every element of the chunk before it is read.
                let t = std::slice::from_raw_parts_mut(tmp.as_mut_ptr() as *mut R, m);
                body(c, t);
                std::ptr::copy_nonoverlapping(t.as_ptr(), o.add(c), m);
                c += m;
            }
        }

        #[inline(always)]
        pub(super) unsafe fn map1<A: Copy, R: Copy, F: Fn(A) -> R>(
            n: usize,
            o: *mut R,
            a: *const A,
            f: &F,
        ) {
            use std::slice::{from_raw_parts as sl, from_raw_parts_mut as slm};
            if super::is_self(o, a) {
                i1(slm(o as *mut A, n), f)
            } else if super::overlaps(o, a, n) {
                chunked(n, o, |c, t| s1(t, sl(a.add(c), t.len()), f))
            } else {
                s1(slm(o, n), sl(a, n), f)
            }
        }

        #[inline(always)]
        pub(super) unsafe fn map2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(
            n: usize,
            o: *mut R,
            a: *const A,
            b: *const B,
            f: &F,
        ) {
            use std::slice::{from_raw_parts as sl, from_raw_parts_mut as slm};
            if super::is_self(o, a) && !super::overlaps(o, b, n) {
                i2(slm(o as *mut A, n), sl(b, n), f)
            } else if super::is_self(o, b) && !super::overlaps(o, a, n) {
                i2(slm(o as *mut B, n), sl(a, n), &|y: B, x: A| f(x, y))
            } else if super::overlaps(o, a, n) || super::overlaps(o, b, n) {
                chunked(n, o, |c, t| {
                    s2(t, sl(a.add(c), t.len()), sl(b.add(c), t.len()), f)
                })
            } else {
                s2(slm(o, n), sl(a, n), sl(b, n), f)
            }
        }

        #[inline(always)]
        pub(super) unsafe fn map3<A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R>(
            n: usize,
            o: *mut R,
            a: *const A,
            b: *const B,
            c: *const C,
            f: &F,
        ) {
            use std::slice::{from_raw_parts as sl, from_raw_parts_mut as slm};
            if super::is_self(o, a) && !super::overlaps(o, b, n) && !super::overlaps(o, c, n) {
                i3(slm(o as *mut A, n), sl(b, n), sl(c, n), f)
            } else if super::overlaps(o, a, n)
                || super::overlaps(o, b, n)
                || super::overlaps(o, c, n)
            {
                chunked(n, o, |k, t| {
                    s3(
                        t,
                        sl(a.add(k), t.len()),
                        sl(b.add(k), t.len()),
                        sl(c.add(k), t.len()),
                        f,
                    )
                })
            } else {
                s3(slm(o, n), sl(a, n), sl(b, n), sl(c, n), f)
            }
        }

        #[inline(always)]
        pub(super) unsafe fn map4<
            A: Copy,
            B: Copy,
            C: Copy,
            D: Copy,
            R: Copy,
            F: Fn(A, B, C, D) -> R,
        >(
            n: usize,
            o: *mut R,
            a: *const A,
            b: *const B,
            c: *const C,
            d: *const D,
            f: &F,
        ) {
            use std::slice::{from_raw_parts as sl, from_raw_parts_mut as slm};
            if super::is_self(o, a)
                && !super::overlaps(o, b, n)
                && !super::overlaps(o, c, n)
                && !super::overlaps(o, d, n)
            {
                i4(slm(o as *mut A, n), sl(b, n), sl(c, n), sl(d, n), f)
            } else if super::overlaps(o, a, n)
                || super::overlaps(o, b, n)
                || super::overlaps(o, c, n)
                || super::overlaps(o, d, n)
            {
                chunked(n, o, |k, t| {
                    s4(
                        t,
                        sl(a.add(k), t.len()),
                        sl(b.add(k), t.len()),
                        sl(c.add(k), t.len()),
                        sl(d.add(k), t.len()),
                        f,
                    )
                })
            } else {
                s4(slm(o, n), sl(a, n), sl(b, n), sl(c, n), sl(d, n), f)
            }
        }

        /// `o[i] = v` for `i < n`: the row of an input broadcast along it.
        #[inline(always)]
        unsafe fn fill<R: Copy>(n: usize, o: *mut R, v: R) {
            std::slice::from_raw_parts_mut(o, n).fill(v)
        }

        #[inline(always)]
        pub(super) unsafe fn rows1<A: Copy, R: Copy, F: Fn(A) -> R>(r: &super::Rows, f: &F) {
            for j in 0..r.rows {
                let (o, a) = (r.out::<R>(0, j), r.inp::<A>(0, j));
                if r.bcast & 1 != 0 {
                    fill(r.n, o, f(*a))
                } else {
                    map1(r.n, o, a, f)
                }
            }
        }

        /// One block of [`blocks1`]: references as arguments, which LLVM
        /// knows do not alias (inlined into the loop over blocks, it kept
        /// the block as sixteen scalar stores).
        #[inline(always)]
        fn block1<A: Copy, R: Copy, F: Fn(A) -> R, const L: usize>(
            o: &mut [R; L],
            a: &[A; L],
            f: &F,
        ) {
            for l in 0..L {
                o[l] = f(a[l]);
            }
        }

        /// `o[i] = f(a[i])` for `i < n`, in blocks of `BLOCK_LANES` lanes and
        /// then one at a time. `o` is `a` or overlaps none of it.
        #[inline(always)]
        unsafe fn blocks1<A: Copy, R: Copy, F: Fn(A) -> R>(
            n: usize,
            o: *mut R,
            a: *const A,
            f: &F,
        ) {
            use std::slice::{from_raw_parts as sl, from_raw_parts_mut as slm};
            const L: usize = super::BLOCK_LANES;
            if super::is_self(o, a) {
                let (blocks, rest) = slm(o as *mut A, n).as_chunks_mut::<L>();
                for b in blocks {
                    super::keep_scalar_loop();
                    for x in b.iter_mut() {
                        *x = super::bits(f(*x));
                    }
                }
                for x in rest {
                    *x = super::bits(f(*x));
                }
            } else {
                let (ob, or) = slm(o, n).as_chunks_mut::<L>();
                let (xb, xr) = sl(a, n).as_chunks::<L>();
                for (ob, xb) in ob.iter_mut().zip(xb) {
                    super::keep_scalar_loop();
                    block1(ob, xb, f);
                }
                for (o, &x) in or.iter_mut().zip(xr) {
                    *o = f(x);
                }
            }
        }

        /// A row of a binary op whose other input is one value, folded
        /// into `f`: in blocks ([`blocks1`]) unless `o` overlaps `a`
        /// other than exactly. LLVM's own loop runs 64 lanes at a time, then
        /// 8, then one, so a 49-element row (a squeeze-excite scale) took
        /// six 8-lane steps and a scalar one: 1.2-1.5x CPU's time.
        #[inline(always)]
        unsafe fn bcast_row<A: Copy, R: Copy, F: Fn(A) -> R>(
            n: usize,
            o: *mut R,
            a: *const A,
            f: &F,
        ) {
            if super::is_self(o, a) || !super::overlaps(o, a, n) {
                blocks1(n, o, a, f)
            } else {
                map1(n, o, a, f)
            }
        }

        // A broadcast input is one value for its whole row, held in a
        // register as ATen's vectorized loops hold a stride-0 operand.
        #[inline(always)]
        pub(super) unsafe fn rows2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(
            r: &super::Rows,
            f: &F,
        ) {
            let n = r.n;
            for j in 0..r.rows {
                let (o, a, b) = (r.out::<R>(0, j), r.inp::<A>(0, j), r.inp::<B>(1, j));
                match r.bcast & 3 {
                    0 => map2(n, o, a, b, f),
                    1 => {
                        let x = *a;
                        bcast_row(n, o, b, &|y| f(x, y))
                    }
                    2 => {
                        let y = *b;
                        bcast_row(n, o, a, &|x| f(x, y))
                    }
                    _ => fill(n, o, f(*a, *b)),
                }
            }
        }

        // Three inputs: a broadcast one is filled into a chunk once per row
        // (rare in models; one case instead of seven).
        #[inline(always)]
        pub(super) unsafe fn rows3<A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R>(
            r: &super::Rows,
            f: &F,
        ) {
            use std::mem::MaybeUninit;
            let mut ta = MaybeUninit::<[A; super::CHUNK]>::uninit();
            let mut tb = MaybeUninit::<[B; super::CHUNK]>::uninit();
            let mut tc = MaybeUninit::<[C; super::CHUNK]>::uninit();
            let (ta, tb, tc) = (
                ta.as_mut_ptr() as *mut A,
                tb.as_mut_ptr() as *mut B,
                tc.as_mut_ptr() as *mut C,
            );
            let n = r.n;
            for j in 0..r.rows {
                let o = r.out::<R>(0, j);
                let (a, b, c) = (r.inp::<A>(0, j), r.inp::<B>(1, j), r.inp::<C>(2, j));
                if r.bcast & 7 == 0 {
                    map3(n, o, a, b, c, f);
                    continue;
                }
                let m0 = n.min(super::CHUNK);
                let ma = r.bcast & 1 != 0;
                let mb = r.bcast & 2 != 0;
                let mc = r.bcast & 4 != 0;
                if ma {
                    fill(m0, ta, *a);
                }
                if mb {
                    fill(m0, tb, *b);
                }
                if mc {
                    fill(m0, tc, *c);
                }
                let mut k = 0;
                while k < n {
                    let m = (n - k).min(super::CHUNK);
                    map3(
                        m,
                        o.add(k),
                        if ma { ta } else { a.add(k) },
                        if mb { tb } else { b.add(k) },
                        if mc { tc } else { c.add(k) },
                        f,
                    );
                    k += m;
                }
            }
        }
    };
}

mod body {
    map_bodies!();
}

macro_rules! level_fns {
    ($modname:ident, $body:ident $(, $feat:literal)?) => {
        mod $modname {
            use super::$body as b;
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn map1<A: Copy, R: Copy, F: Fn(A) -> R>(
                n: usize, o: *mut R, a: *const A, f: &F,
            ) {
                b::map1(n, o, a, f)
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn map2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(
                n: usize, o: *mut R, a: *const A, bb: *const B, f: &F,
            ) {
                b::map2(n, o, a, bb, f)
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn map3<
                A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R,
            >(
                n: usize, o: *mut R, a: *const A, bb: *const B, c: *const C, f: &F,
            ) {
                b::map3(n, o, a, bb, c, f)
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn rows1<A: Copy, R: Copy, F: Fn(A) -> R>(r: &super::Rows, f: &F) {
                b::rows1(r, f)
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn rows2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(
                r: &super::Rows, f: &F,
            ) {
                b::rows2(r, f)
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn rows3<
                A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R,
            >(
                r: &super::Rows, f: &F,
            ) {
                b::rows3(r, f)
            }
            $(#[target_feature(enable = $feat)])?
            pub(super) unsafe fn map4<
                A: Copy, B: Copy, C: Copy, D: Copy, R: Copy,
                F: Fn(A, B, C, D) -> R,
            >(
                n: usize, o: *mut R, a: *const A, bb: *const B, c: *const C, d: *const D, f: &F,
            ) {
                b::map4(n, o, a, bb, c, d, f)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
level_fns!(
    avx512,
    body,
    "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt"
);
#[cfg(target_arch = "x86_64")]
level_fns!(avx2, body, "avx2,fma,f16c,bmi1,bmi2,lzcnt,popcnt");
level_fns!(portable, body);

macro_rules! dispatch {
    ($f:ident($($arg:expr),*)) => {
        match level() {
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx512 => avx512::$f($($arg),*),
            #[cfg(target_arch = "x86_64")]
            SimdLevel::Avx2 => avx2::$f($($arg),*),
            _ => portable::$f($($arg),*),
        }
    };
}

/// `o[i] = f(a[i])` for `i < n`.
///
/// # Safety
/// The pointers must address `n` valid elements; `o` may equal `a` exactly
/// but must not otherwise overlap it.
#[inline]
pub unsafe fn map1<A: Copy, R: Copy, F: Fn(A) -> R>(n: usize, o: *mut R, a: *const A, f: &F) {
    dispatch!(map1(n, o, a, f))
}

/// `o[i] = f(a[i], b[i])`; see [`map1`].
///
/// # Safety
/// As for [`map1`], for every input.
#[inline]
pub unsafe fn map2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(
    n: usize,
    o: *mut R,
    a: *const A,
    b: *const B,
    f: &F,
) {
    dispatch!(map2(n, o, a, b, f))
}

/// `o[i] = f(a[i], b[i], c[i])`; see [`map1`].
///
/// # Safety
/// As for [`map1`], for every input.
#[inline]
pub unsafe fn map3<A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R>(
    n: usize,
    o: *mut R,
    a: *const A,
    b: *const B,
    c: *const C,
    f: &F,
) {
    dispatch!(map3(n, o, a, b, c, f))
}

/// One call of an inner loop over rows: `rows` rows of `n` elements.
/// Output `k`'s row `j` starts `j * out_steps[k]` bytes after `outs[k]`,
/// input `k`'s `j * in_steps[k]` bytes after `ins[k]`. Along a row every
/// operand is contiguous, except an input whose bit is set in `bcast`: it
/// holds one element for the whole row (a broadcast, stride 0 along it),
/// which the loops keep in a register. The engine calls a kernel once per
/// range of rows, not once per row: a call and a SIMD dispatch cost more
/// than a 49-element row's arithmetic.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    pub n: usize,
    pub rows: usize,
    pub outs: &'a [*mut u8],
    pub ins: &'a [*const u8],
    pub out_steps: &'a [isize],
    pub in_steps: &'a [isize],
    pub bcast: u32,
}

/// Row steps of a one-row call.
const NO_STEPS: [isize; 8] = [0; 8];

impl<'a> Rows<'a> {
    /// One row of `n` contiguous elements per operand.
    #[inline(always)]
    pub fn flat(n: usize, outs: &'a [*mut u8], ins: &'a [*const u8]) -> Rows<'a> {
        Rows {
            n,
            rows: 1,
            outs,
            ins,
            out_steps: &NO_STEPS[..outs.len()],
            in_steps: &NO_STEPS[..ins.len()],
            bcast: 0,
        }
    }

    /// Output `k`'s row `j`.
    #[inline(always)]
    pub fn out<R>(&self, k: usize, j: usize) -> *mut R {
        self.outs[k].wrapping_offset(j as isize * self.out_steps[k]) as *mut R
    }

    /// Input `k`'s row `j`.
    #[inline(always)]
    pub fn inp<A>(&self, k: usize, j: usize) -> *const A {
        self.ins[k].wrapping_offset(j as isize * self.in_steps[k]) as *const A
    }
}

/// `o[i] = f(a[i])` along each row of `r` ([`Rows`]).
///
/// # Safety
/// `r` addresses valid rows of the declared types; along a row an output
/// may equal an input exactly but must not otherwise overlap it.
#[inline]
pub unsafe fn rows1<A: Copy, R: Copy, F: Fn(A) -> R>(r: &Rows, f: &F) {
    dispatch!(rows1(r, f))
}

/// `o[i] = f(a[i], b[i])` along each row of `r`; see [`rows1`].
///
/// # Safety
/// As for [`rows1`].
#[inline]
pub unsafe fn rows2<A: Copy, B: Copy, R: Copy, F: Fn(A, B) -> R>(r: &Rows, f: &F) {
    dispatch!(rows2(r, f))
}

/// `o[i] = f(a[i], b[i], c[i])` along each row of `r`; see [`rows1`].
///
/// # Safety
/// As for [`rows1`].
#[inline]
pub unsafe fn rows3<A: Copy, B: Copy, C: Copy, R: Copy, F: Fn(A, B, C) -> R>(r: &Rows, f: &F) {
    dispatch!(rows3(r, f))
}

/// `o[i] = f(a[i], b[i], c[i], d[i])`; see [`map1`].
///
/// # Safety
/// As for [`map1`], for every input.
#[inline]
#[allow(clippy::too_many_arguments)]
pub unsafe fn map4<A: Copy, B: Copy, C: Copy, D: Copy, R: Copy, F: Fn(A, B, C, D) -> R>(
    n: usize,
    o: *mut R,
    a: *const A,
    b: *const B,
    c: *const C,
    d: *const D,
    f: &F,
) {
    dispatch!(map4(n, o, a, b, c, d, f))
}

// ---- bulk float16 / bfloat16 <-> float32 conversions -----------------------

use super::half_bits::{bf16_bits_to_f32, f16_bits_to_f32, f32_to_bf16_bits, f32_to_f16_bits};

/// The conversion routines for one level, chosen once.
struct ConvTable {
    f16_to_f32: unsafe fn(*const u16, *mut f32, usize),
    f32_to_f16: unsafe fn(*const f32, *mut u16, usize),
    bf16_to_f32: unsafe fn(*const u16, *mut f32, usize),
    f32_to_bf16: unsafe fn(*const f32, *mut u16, usize),
}

unsafe fn f16_to_f32_portable(s: *const u16, d: *mut f32, n: usize) {
    portable::map1(n, d, s, &|h: u16| f16_bits_to_f32(h))
}
unsafe fn f32_to_f16_portable(s: *const f32, d: *mut u16, n: usize) {
    portable::map1(n, d, s, &|v: f32| f32_to_f16_bits(v))
}
unsafe fn bf16_to_f32_portable(s: *const u16, d: *mut f32, n: usize) {
    portable::map1(n, d, s, &|h: u16| bf16_bits_to_f32(h))
}
unsafe fn f32_to_bf16_portable(s: *const f32, d: *mut u16, n: usize) {
    portable::map1(n, d, s, &|v: f32| f32_to_bf16_bits(v))
}

#[cfg(target_arch = "x86_64")]
mod x86conv {
    use super::*;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f16_to_f32_f16c(s: *const u16, d: *mut f32, n: usize) {
        let mut i = 0;
        while i + 8 <= n {
            let h = _mm_loadu_si128(s.add(i) as *const __m128i);
            _mm256_storeu_ps(d.add(i), _mm256_cvtph_ps(h));
            i += 8;
        }
        while i < n {
            *d.add(i) = f16_bits_to_f32(*s.add(i));
            i += 1;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f32_to_f16_f16c(s: *const f32, d: *mut u16, n: usize) {
        let mut i = 0;
        while i + 8 <= n {
            let v = _mm256_loadu_ps(s.add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm_storeu_si128(d.add(i) as *mut __m128i, h);
            i += 8;
        }
        while i < n {
            *d.add(i) = f32_to_f16_bits(*s.add(i));
            i += 1;
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn bf16_to_f32_avx2(s: *const u16, d: *mut f32, n: usize) {
        super::avx2::map1(n, d, s, &|h: u16| bf16_bits_to_f32(h))
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f32_to_bf16_avx2(s: *const f32, d: *mut u16, n: usize) {
        super::avx2::map1(n, d, s, &|v: f32| f32_to_bf16_bits(v))
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn f16_to_f32_avx512(s: *const u16, d: *mut f32, n: usize) {
        let mut i = 0;
        while i + 16 <= n {
            let h = _mm256_loadu_si256(s.add(i) as *const __m256i);
            _mm512_storeu_ps(d.add(i), _mm512_cvtph_ps(h));
            i += 16;
        }
        f16_to_f32_f16c(s.add(i), d.add(i), n - i)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn f32_to_f16_avx512(s: *const f32, d: *mut u16, n: usize) {
        let mut i = 0;
        while i + 16 <= n {
            let v = _mm512_loadu_ps(s.add(i));
            let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm256_storeu_si256(d.add(i) as *mut __m256i, h);
            i += 16;
        }
        f32_to_f16_f16c(s.add(i), d.add(i), n - i)
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn bf16_to_f32_avx512(s: *const u16, d: *mut f32, n: usize) {
        super::avx512::map1(n, d, s, &|h: u16| bf16_bits_to_f32(h))
    }
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
    pub(super) unsafe fn f32_to_bf16_avx512(s: *const f32, d: *mut u16, n: usize) {
        super::avx512::map1(n, d, s, &|v: f32| f32_to_bf16_bits(v))
    }
}

fn conv_table(l: SimdLevel) -> &'static ConvTable {
    static TABLES: OnceLock<[ConvTable; 3]> = OnceLock::new();
    let t = TABLES.get_or_init(|| {
        let portable = || ConvTable {
            f16_to_f32: f16_to_f32_portable,
            f32_to_f16: f32_to_f16_portable,
            bf16_to_f32: bf16_to_f32_portable,
            f32_to_bf16: f32_to_bf16_portable,
        };
        #[cfg(target_arch = "x86_64")]
        {
            [
                portable(),
                ConvTable {
                    f16_to_f32: x86conv::f16_to_f32_f16c,
                    f32_to_f16: x86conv::f32_to_f16_f16c,
                    bf16_to_f32: x86conv::bf16_to_f32_avx2,
                    f32_to_bf16: x86conv::f32_to_bf16_avx2,
                },
                ConvTable {
                    f16_to_f32: x86conv::f16_to_f32_avx512,
                    f32_to_f16: x86conv::f32_to_f16_avx512,
                    bf16_to_f32: x86conv::bf16_to_f32_avx512,
                    f32_to_bf16: x86conv::f32_to_bf16_avx512,
                },
            ]
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            [portable(), portable(), portable()]
        }
    });
    &t[l as usize]
}

/// Widens `n` float16 values to float32.
///
/// # Safety
/// `s` and `d` address `n` elements and do not overlap.
pub unsafe fn f16_to_f32(s: *const u16, d: *mut f32, n: usize) {
    (conv_table(level()).f16_to_f32)(s, d, n)
}
/// Rounds `n` float32 values to float16 (nearest even).
///
/// # Safety
/// `s` and `d` address `n` elements and do not overlap.
pub unsafe fn f32_to_f16(s: *const f32, d: *mut u16, n: usize) {
    (conv_table(level()).f32_to_f16)(s, d, n)
}
/// Widens `n` bfloat16 values to float32.
///
/// # Safety
/// `s` and `d` address `n` elements and do not overlap.
pub unsafe fn bf16_to_f32(s: *const u16, d: *mut f32, n: usize) {
    (conv_table(level()).bf16_to_f32)(s, d, n)
}
/// Rounds `n` float32 values to bfloat16 (nearest even).
///
/// # Safety
/// `s` and `d` address `n` elements and do not overlap.
pub unsafe fn f32_to_bf16(s: *const f32, d: *mut u16, n: usize) {
    (conv_table(level()).f32_to_bf16)(s, d, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_converts_f16_identically() {
        let src: Vec<u16> = (0..=u16::MAX).collect();
        let mut reference = vec![0f32; src.len()];
        unsafe { f16_to_f32_portable(src.as_ptr(), reference.as_mut_ptr(), src.len()) };
        for l in [SimdLevel::Portable, SimdLevel::Avx2, SimdLevel::Avx512] {
            if l > detected() {
                continue;
            }
            let t = conv_table(l);
            let mut out = vec![0f32; src.len()];
            unsafe { (t.f16_to_f32)(src.as_ptr(), out.as_mut_ptr(), src.len()) };
            for (a, b) in out.iter().zip(&reference) {
                assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            }
            let mut back = vec![0u16; src.len()];
            unsafe { (t.f32_to_f16)(out.as_ptr(), back.as_mut_ptr(), out.len()) };
            for (i, (&h, &o)) in back.iter().zip(&src).enumerate() {
                assert!(
                    h == o || f32::is_nan(reference[i]),
                    "{l:?} {o:#x} -> {h:#x}"
                );
            }
        }
    }

    #[test]
    fn levels_agree_on_map() {
        let a: Vec<f32> = (0..1000).map(|i| i as f32 * 0.37 - 100.0).collect();
        let f = |x: f32| x.mul_add(1.5, -x * x);
        let mut r0 = vec![0f32; a.len()];
        unsafe { portable::map1(a.len(), r0.as_mut_ptr(), a.as_ptr(), &f) };
        #[cfg(target_arch = "x86_64")]
        for l in [SimdLevel::Avx2, SimdLevel::Avx512] {
            if l > detected() {
                continue;
            }
            let mut r = vec![0f32; a.len()];
            unsafe {
                match l {
                    SimdLevel::Avx512 => avx512::map1(a.len(), r.as_mut_ptr(), a.as_ptr(), &f),
                    _ => avx2::map1(a.len(), r.as_mut_ptr(), a.as_ptr(), &f),
                }
            }
            assert_eq!(r, r0);
        }
    }
}
