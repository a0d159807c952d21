//! Optimizer steps and AMP gradient scaling, one pass over each parameter.
//!
//! The fused optimizer ops of torch.optim (`fused=True`: `_fused_adam_`,
//! `_fused_adamw_`, `_fused_sgd_`, `_fused_adagrad_`) and GradScaler's
//! `_amp_foreach_non_finite_check_and_unscale_` / `_amp_update_scale_`.
//! The arithmetic follows torch CPU's fused kernels operation by operation:
//! float32/float64 compute in their own type, float16/bfloat16 in f32
//! (ATen's opmath), constants are computed in f64 and then narrowed, and the
//! unscaled gradient is written back when a grad scale is given. Elements
//! are independent, so results do not depend on the thread count.

use super::elementwise::simd;
use super::norm::{dispatch_float, ld, st};
use super::{KernelError, Strided, GRAIN_SIZE};
use half::{bf16, f16};
use num_traits::Float;

/// A stored element type and the type its arithmetic runs in.
trait Elem: Copy + Send + Sync + 'static {
    type M: Float + Send + Sync;
    fn up(self) -> Self::M;
    fn down(m: Self::M) -> Self;
}

macro_rules! elem {
    ($t:ty, $m:ty, $up:expr, $down:expr) => {
        impl Elem for $t {
            type M = $m;
            #[inline(always)]
            fn up(self) -> $m {
                $up(self)
            }
            #[inline(always)]
            fn down(m: $m) -> $t {
                $down(m)
            }
        }
    };
}
elem!(f32, f32, |x| x, |m| m);
elem!(f64, f64, |x| x, |m| m);
elem!(f16, f32, f16::to_f32, f16::from_f32);
elem!(bf16, f32, bf16::to_f32, bf16::from_f32);

#[inline(always)]
fn c<M: Float>(x: f64) -> M {
    M::from(x).unwrap_or_else(M::nan)
}

/// One tensor's update, as a function of a range `[start, end)` of its `n`
/// elements: a step's tensors are checked and their constants computed
/// first, then [`run_tasks`] runs all of them at once.
#[must_use = "a task does nothing until run_tasks runs it"]
pub struct Task<'a> {
    n: usize,
    f: Box<dyn Fn(usize, usize) + Sync + 'a>,
}

fn task<'a>(n: usize, f: impl Fn(usize, usize) + Sync + 'a) -> Task<'a> {
    Task { n, f: Box::new(f) }
}

/// Runs every task's elements in GRAIN_SIZE pieces on the pool, the pieces
/// of all tensors together: a step over many small tensors (each under one
/// grain, so serial alone) uses every thread, as one large tensor does.
pub fn run_tasks(tasks: &[Task<'_>]) {
    let mut pieces: Vec<(usize, usize, usize)> = Vec::new();
    for (t, task) in tasks.iter().enumerate() {
        let mut s = 0;
        while s < task.n {
            let e = (s + GRAIN_SIZE).min(task.n);
            pieces.push((t, s, e));
            s = e;
        }
    }
    let run = |k: usize| {
        let (t, s, e) = pieces[k];
        (tasks[t].f)(s, e)
    };
    let total: usize = tasks.iter().map(|t| t.n).sum();
    if total <= GRAIN_SIZE {
        (0..pieces.len()).for_each(run);
    } else {
        super::parallel::parallel_for(pieces.len(), run);
    }
}

/// Checks that `views` are contiguous, of `like`'s dtype and element count,
/// and that no two of them (and `like`) share memory: the kernels write
/// through one slice per tensor, which must not alias.
fn check_same(op: &str, like: &Strided, views: &[&Strided]) -> Result<(), KernelError> {
    for v in std::iter::once(&like).chain(views.iter()) {
        if !v.is_contiguous() {
            return Err(KernelError::InvalidArgument(format!(
                "foo {op}: tensors must be contiguous"
            )));
        }
        if v.dtype != like.dtype || v.numel() != like.numel() {
            return Err(KernelError::InvalidArgument(format!(
                "foo {op}: every tensor of a parameter must have its dtype and size \
                 (got {} with {} elements for a {} parameter of {})",
                v.dtype.name(),
                v.numel(),
                like.dtype.name(),
                like.numel()
            )));
        }
    }
    let bytes = like.numel() * like.dtype.size();
    let ranges: Vec<(usize, usize)> = std::iter::once(&like)
        .chain(views.iter())
        .map(|v| (v.ptr as usize, v.ptr as usize + bytes))
        .collect();
    for (i, a) in ranges.iter().enumerate() {
        for b in &ranges[i + 1..] {
            if bytes != 0 && a.0 < b.1 && b.0 < a.1 {
                return Err(KernelError::InvalidArgument(format!(
                    "foo {op}: the tensors of a parameter must not share memory"
                )));
            }
        }
    }
    Ok(())
}

fn same_len(op: &str, what: &str, n: usize, got: usize) -> Result<(), KernelError> {
    if got != n {
        return Err(KernelError::InvalidArgument(format!(
            "foo {op}: {got} {what} for {n} parameters"
        )));
    }
    Ok(())
}

/// Builds every parameter's task (each checked) before running any, then
/// runs them all together: a step updates all of its tensors or none.
fn run_each<'a>(
    n: usize,
    task_of: impl FnMut(usize) -> Result<Task<'a>, KernelError>,
) -> Result<(), KernelError> {
    let tasks = (0..n).map(task_of).collect::<Result<Vec<_>, _>>()?;
    run_tasks(&tasks);
    Ok(())
}

/// The value of a one-element tensor (a step count, a grad scale).
fn value(s: &Strided) -> f64 {
    super::norm::ld(s, 0)
}

/// A whole `_fused_adam_` / `_fused_adamw_` step over parallel lists
/// (`mx` holds one view per parameter with amsgrad, else none; `steps`
/// one-element step counts, already incremented; `grad_scale` one
/// element): every parameter is checked before any is updated, then all
/// run together ([`run_tasks`]).
#[allow(clippy::too_many_arguments)]
pub fn adam_step(
    p: &[Strided],
    g: &[Strided],
    m: &[Strided],
    v: &[Strided],
    mx: &[Strided],
    steps: &[Strided],
    cfg: &Adam,
    grad_scale: Option<&Strided>,
) -> Result<(), KernelError> {
    let n = p.len();
    for (what, len) in [
        ("grads", g.len()),
        ("exp_avgs", m.len()),
        ("exp_avg_sqs", v.len()),
        ("state_steps", steps.len()),
    ] {
        same_len("fused adam", what, n, len)?;
    }
    same_len(
        "fused adam",
        "max_exp_avg_sqs",
        if cfg.amsgrad { n } else { 0 },
        mx.len(),
    )?;
    let scale = grad_scale.map(value);
    run_each(n, |i| {
        adam(
            &p[i],
            &g[i],
            &m[i],
            &v[i],
            mx.get(i),
            value(&steps[i]),
            cfg,
            scale,
        )
    })
}

/// A whole `_fused_sgd_` step (`bufs` holds one view per parameter when
/// momentum is not 0, else none); as [`adam_step`].
pub fn sgd_step(
    p: &[Strided],
    g: &[Strided],
    bufs: &[Strided],
    cfg: &Sgd,
    grad_scale: Option<&Strided>,
) -> Result<(), KernelError> {
    let n = p.len();
    same_len("fused sgd", "grads", n, g.len())?;
    same_len(
        "fused sgd",
        "momentum buffers",
        if cfg.momentum != 0.0 { n } else { 0 },
        bufs.len(),
    )?;
    let scale = grad_scale.map(value);
    run_each(n, |i| sgd(&p[i], &g[i], bufs.get(i), cfg, scale))
}

/// A whole `_fused_adagrad_` step; as [`adam_step`].
pub fn adagrad_step(
    p: &[Strided],
    g: &[Strided],
    sums: &[Strided],
    steps: &[Strided],
    cfg: &Adagrad,
    grad_scale: Option<&Strided>,
) -> Result<(), KernelError> {
    let n = p.len();
    for (what, len) in [
        ("grads", g.len()),
        ("state_sums", sums.len()),
        ("state_steps", steps.len()),
    ] {
        same_len("fused adagrad", what, n, len)?;
    }
    let scale = grad_scale.map(value);
    run_each(n, |i| {
        adagrad(&p[i], &g[i], &sums[i], value(&steps[i]), cfg, scale)
    })
}

/// The hyper-parameters of one Adam/AdamW step. `repr(C)`: the native path's C++
/// kernels pass it as it is (rust/glue/native.cpp declares the same fields).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Adam {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub weight_decay: f64,
    pub eps: f64,
    pub amsgrad: bool,
    pub maximize: bool,
    /// AdamW: decay the parameter (`p *= 1 - lr * wd`) instead of adding
    /// `wd * p` to the gradient.
    pub decoupled: bool,
}

/// One Adam/AdamW step of one parameter (torch CPU's `_fused_adam_` /
/// `_fused_adamw_` for one tensor), checked, as a task ([`run_tasks`]):
/// updates `param`, `exp_avg`, `exp_avg_sq` (and `max_exp_avg_sq` with
/// amsgrad) in place; `step` is the already incremented step count; with
/// `grad_scale` the gradient is divided by it and written back.
#[allow(clippy::too_many_arguments)]
pub fn adam<'a>(
    param: &'a Strided,
    grad: &'a Strided,
    exp_avg: &'a Strided,
    exp_avg_sq: &'a Strided,
    max_exp_avg_sq: Option<&'a Strided>,
    step: f64,
    cfg: &Adam,
    grad_scale: Option<f64>,
) -> Result<Task<'a>, KernelError> {
    let mut views = vec![grad, exp_avg, exp_avg_sq];
    if cfg.amsgrad {
        let m = max_exp_avg_sq.ok_or_else(|| {
            KernelError::InvalidArgument("foo fused adam: amsgrad needs max_exp_avg_sq".into())
        })?;
        views.push(m);
    }
    check_same("fused adam", param, &views)?;
    #[allow(clippy::too_many_arguments)]
    fn run<'a, T: Elem>(
        p: &'a Strided,
        g: &'a Strided,
        m: &'a Strided,
        v: &'a Strided,
        mx: Option<&'a Strided>,
        step: f64,
        cfg: &Adam,
        scale: Option<f64>,
    ) -> Task<'a> {
        // f64 here, as torch's fused and for-loop Adam compute them.
        let bias_correction1 = 1.0 - cfg.beta1.powf(step);
        let bias_correction2 = 1.0 - cfg.beta2.powf(step);
        let k = AdamConsts::<T::M> {
            bc2_sqrt: c(bias_correction2.sqrt()),
            lerp_w: c(1.0 - cfg.beta1),
            sq_coef: c(1.0 - cfg.beta2),
            beta2: c(cfg.beta2),
            eps: c(cfg.eps),
            wd: c(cfg.weight_decay),
            decay: c(1.0 - cfg.lr * cfg.weight_decay),
            step_size: c(cfg.lr / bias_correction1),
            sign: c(if cfg.maximize { -1.0 } else { 1.0 }),
            scale: c(scale.unwrap_or(1.0)),
        };
        let wd = match (cfg.weight_decay != 0.0, cfg.decoupled) {
            (false, _) => WD_NONE,
            (true, false) => WD_L2,
            (true, true) => WD_DECOUPLED,
        };
        // One loop per combination of the loop-invariant options, so that
        // each is branch-free and vectorizes.
        macro_rules! go {
            ($sc:expr, $ams:expr, $wd:expr) => {
                adam_chunks::<T, $sc, $ams, $wd>(p, g, m, v, mx, &k)
            };
        }
        match (scale.is_some(), mx.is_some(), wd) {
            (false, false, WD_NONE) => go!(false, false, WD_NONE),
            (false, false, WD_L2) => go!(false, false, WD_L2),
            (false, false, _) => go!(false, false, WD_DECOUPLED),
            (false, true, WD_NONE) => go!(false, true, WD_NONE),
            (false, true, WD_L2) => go!(false, true, WD_L2),
            (false, true, _) => go!(false, true, WD_DECOUPLED),
            (true, false, WD_NONE) => go!(true, false, WD_NONE),
            (true, false, WD_L2) => go!(true, false, WD_L2),
            (true, false, _) => go!(true, false, WD_DECOUPLED),
            (true, true, WD_NONE) => go!(true, true, WD_NONE),
            (true, true, WD_L2) => go!(true, true, WD_L2),
            (true, true, _) => go!(true, true, WD_DECOUPLED),
        }
    }
    let mx = if cfg.amsgrad { max_exp_avg_sq } else { None };
    Ok(dispatch_float!(
        "fused_adam",
        param.dtype,
        run,
        param,
        grad,
        exp_avg,
        exp_avg_sq,
        mx,
        step,
        cfg,
        grad_scale
    ))
}

const WD_NONE: u8 = 0;
const WD_L2: u8 = 1;
const WD_DECOUPLED: u8 = 2;

/// Adam's per-step constants in the arithmetic type.
#[derive(Clone, Copy)]
struct AdamConsts<M> {
    bc2_sqrt: M,
    lerp_w: M,
    sq_coef: M,
    beta2: M,
    eps: M,
    wd: M,
    decay: M,
    step_size: M,
    sign: M,
    scale: M,
}

/// `len` elements of `s` from `start`, as a slice.
///
/// # Safety
/// `s` is contiguous with at least `start + len` elements, and no other
/// live slice covers them.
unsafe fn part<'a, T>(s: &Strided, start: usize, len: usize) -> &'a mut [T] {
    std::slice::from_raw_parts_mut((s.ptr as *mut T).add(start), len)
}

/// Adam over GRAIN_SIZE chunks; each chunk's tensors are distinct slices (no
/// aliasing) and the options are constants, so the loop vectorizes.
fn adam_chunks<'a, T: Elem, const SCALE: bool, const AMS: bool, const WD: u8>(
    p: &'a Strided,
    g: &'a Strided,
    m: &'a Strided,
    v: &'a Strided,
    mx: Option<&'a Strided>,
    k: &AdamConsts<T::M>,
) -> Task<'a> {
    let one: T::M = c(1.0);
    let half: T::M = c(0.5);
    let small = k.lerp_w.abs() < half;
    let coeff = if small { k.lerp_w } else { k.lerp_w - one };
    let k = *k;
    task(p.numel(), move |s, e| {
        let n = e - s;
        // SAFETY: every view holds numel elements (checked by the caller);
        // chunks are disjoint, and the tensors of one parameter are distinct.
        let (ps, gs, ms, vs) = unsafe {
            (
                part::<T>(p, s, n),
                part::<T>(g, s, n),
                part::<T>(m, s, n),
                part::<T>(v, s, n),
            )
        };
        let mut empty: [T; 0] = [];
        let xs: &mut [T] = match (AMS, mx) {
            // SAFETY: as above.
            (true, Some(x)) => unsafe { part::<T>(x, s, n) },
            _ => &mut empty,
        };
        // at the CPU's SIMD width (sqrt and division vectorize; results are the same at every level)
        simd::dispatch(
            #[inline(always)]
            || adam_loop::<T, SCALE, AMS, WD>(ps, gs, ms, vs, xs, &k, small, coeff),
        );
    })
}

/// One chunk of Adam: the loop `adam_chunks` compiles once per SIMD level.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn adam_loop<T: Elem, const SCALE: bool, const AMS: bool, const WD: u8>(
    ps: &mut [T],
    gs: &mut [T],
    ms: &mut [T],
    vs: &mut [T],
    xs: &mut [T],
    k: &AdamConsts<T::M>,
    small: bool,
    coeff: T::M,
) {
    let n = ps.len();
    // equal lengths, so the loop's bounds checks go
    let (gs, ms, vs) = (&mut gs[..n], &mut ms[..n], &mut vs[..n]);
    let xs = if AMS { &mut xs[..n] } else { xs };
    {
        for i in 0..n {
            let mut grad = gs[i].up();
            if SCALE {
                grad = grad / k.scale;
                gs[i] = T::down(grad);
            }
            grad = grad * k.sign;
            let mut param = ps[i].up();
            if WD == WD_L2 {
                grad = grad + param * k.wd;
            } else if WD == WD_DECOUPLED {
                param = param * k.decay;
            }
            // exp_avg.lerp_(grad, 1 - beta1), ATen's two-sided lerp.
            let ea = ms[i].up();
            let base = if small { ea } else { grad };
            let ea = base + coeff * (grad - ea);
            ms[i] = T::down(ea);
            let eas = vs[i].up() * k.beta2 + k.sq_coef * grad * grad;
            vs[i] = T::down(eas);
            let second = if AMS {
                let x = xs[i].up().max(eas);
                xs[i] = T::down(x);
                x
            } else {
                eas
            };
            let denom = second.sqrt() / k.bc2_sqrt + k.eps;
            ps[i] = T::down(param - k.step_size * ea / denom);
        }
    }
}

/// The hyper-parameters of one SGD step. `repr(C)`: the native path's C++
/// kernels pass it as it is (rust/glue/native.cpp declares the same fields).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Sgd {
    pub lr: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub maximize: bool,
    /// The momentum buffer is set to the gradient instead of updated.
    pub first_step: bool,
}

/// One SGD step of one parameter (torch CPU's `_fused_sgd_` for one
/// tensor), checked, as a task ([`run_tasks`]).
pub fn sgd<'a>(
    param: &'a Strided,
    grad: &'a Strided,
    momentum_buffer: Option<&'a Strided>,
    cfg: &Sgd,
    grad_scale: Option<f64>,
) -> Result<Task<'a>, KernelError> {
    let mut views = vec![grad];
    if cfg.momentum != 0.0 {
        views.push(momentum_buffer.ok_or_else(|| {
            KernelError::InvalidArgument("foo fused sgd: momentum needs a momentum buffer".into())
        })?);
    }
    check_same("fused sgd", param, &views)?;
    fn run<'a, T: Elem>(
        p: &'a Strided,
        g: &'a Strided,
        b: Option<&'a Strided>,
        cfg: &Sgd,
        scale: Option<f64>,
    ) -> Task<'a> {
        let cfg = *cfg;
        let wd: T::M = c(cfg.weight_decay);
        let momentum: T::M = c(cfg.momentum);
        let damp: T::M = c(1.0 - cfg.dampening);
        let lr: T::M = c(cfg.lr);
        let scale: Option<T::M> = scale.map(c);
        let has_buf = cfg.momentum != 0.0;
        task(p.numel(), move |s, e| {
            let n = e - s;
            // SAFETY: as in `adam_chunks`.
            let (ps, gs) = unsafe { (part::<T>(p, s, n), part::<T>(g, s, n)) };
            let mut empty: [T; 0] = [];
            let bs: &mut [T] = match (has_buf, b) {
                // SAFETY: as above.
                (true, Some(b)) => unsafe { part::<T>(b, s, n) },
                _ => &mut empty,
            };
            for i in 0..n {
                let mut grad = gs[i].up();
                if let Some(sc) = scale {
                    grad = grad / sc;
                    gs[i] = T::down(grad);
                }
                if cfg.maximize {
                    grad = -grad;
                }
                let param = ps[i].up();
                if cfg.weight_decay != 0.0 {
                    grad = grad + param * wd;
                }
                if has_buf {
                    let buf = if cfg.first_step {
                        grad
                    } else {
                        bs[i].up() * momentum + grad * damp
                    };
                    bs[i] = T::down(buf);
                    grad = if cfg.nesterov {
                        grad + buf * momentum
                    } else {
                        buf
                    };
                }
                ps[i] = T::down(param - grad * lr);
            }
        })
    }
    Ok(dispatch_float!(
        "fused_sgd",
        param.dtype,
        run,
        param,
        grad,
        momentum_buffer,
        cfg,
        grad_scale
    ))
}

/// The hyper-parameters of one Adagrad step. `repr(C)`: the native path's C++
/// kernels pass it as it is (rust/glue/native.cpp declares the same fields).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Adagrad {
    pub lr: f64,
    pub lr_decay: f64,
    pub weight_decay: f64,
    pub eps: f64,
    pub maximize: bool,
}

/// One Adagrad step of one parameter (torch CPU's `_fused_adagrad_` for one
/// tensor), checked, as a task ([`run_tasks`]); `step` is the already
/// incremented step count.
pub fn adagrad<'a>(
    param: &'a Strided,
    grad: &'a Strided,
    state_sum: &'a Strided,
    step: f64,
    cfg: &Adagrad,
    grad_scale: Option<f64>,
) -> Result<Task<'a>, KernelError> {
    check_same("fused adagrad", param, &[grad, state_sum])?;
    fn run<'a, T: Elem>(
        p: &'a Strided,
        g: &'a Strided,
        ss: &'a Strided,
        step: f64,
        cfg: &Adagrad,
        scale: Option<f64>,
    ) -> Task<'a> {
        let cfg = *cfg;
        let clr: T::M = c(cfg.lr / (1.0 + (step - 1.0) * cfg.lr_decay));
        let wd: T::M = c(cfg.weight_decay);
        let eps: T::M = c(cfg.eps);
        let scale: Option<T::M> = scale.map(c);
        task(p.numel(), move |s, e| {
            let n = e - s;
            // SAFETY: as in `adam_chunks`.
            let (ps, gs, ss) =
                unsafe { (part::<T>(p, s, n), part::<T>(g, s, n), part::<T>(ss, s, n)) };
            for i in 0..n {
                let mut grad = gs[i].up();
                if let Some(sc) = scale {
                    grad = grad / sc;
                    gs[i] = T::down(grad);
                }
                if cfg.maximize {
                    grad = -grad;
                }
                let param = ps[i].up();
                if cfg.weight_decay != 0.0 {
                    grad = grad + param * wd;
                }
                let sum = ss[i].up() + grad * grad;
                ss[i] = T::down(sum);
                let std = sum.sqrt() + eps;
                ps[i] = T::down(param - clr * grad / std);
            }
        })
    }
    Ok(dispatch_float!(
        "fused_adagrad",
        param.dtype,
        run,
        param,
        grad,
        state_sum,
        step,
        cfg,
        grad_scale
    ))
}

/// GradScaler's unscale of contiguous gradients: multiplies each in place
/// by `inv_scale` (unless that is 1) in its opmath type and returns whether
/// any element of any of them was inf or NaN before scaling. Every gradient
/// is checked first; then all run together ([`run_tasks`]).
pub fn unscale(grads: &[Strided], inv_scale: f32) -> Result<bool, KernelError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    fn run<'a, T: Elem>(g: &'a Strided, inv: f32, found: &'a AtomicBool) -> Task<'a> {
        let inv_m: T::M = c(inv as f64);
        task(g.numel(), move |s, e| {
            // SAFETY: pieces are disjoint parts of the contiguous gradient.
            let gs = unsafe { part::<T>(g, s, e - s) };
            let mut bad = false;
            for x in gs.iter_mut() {
                let v = x.up();
                bad |= !v.is_finite();
                if inv != 1.0 {
                    *x = T::down(v * inv_m);
                }
            }
            if bad {
                found.store(true, Ordering::Relaxed);
            }
        })
    }
    let found = AtomicBool::new(false);
    run_each(grads.len(), |i| {
        let g = &grads[i];
        check_same("amp unscale", g, &[])?;
        Ok(dispatch_float!(
            "_amp_foreach_non_finite_check_and_unscale_",
            g.dtype,
            run,
            g,
            inv_scale,
            &found
        ))
    })?;
    Ok(found.into_inner())
}

/// GradScaler's `_amp_update_scale_` on its one-element float `scale`,
/// int `growth_tracker` and float `found_inf` (torch CPU's rule): after an
/// inf/NaN the scale backs off and the tracker resets; after
/// `growth_interval` clean steps in a row the scale grows (if the grown
/// scale is finite) and the tracker resets.
pub fn update_scale(
    scale: &Strided,
    growth_tracker: &Strided,
    found_inf: &Strided,
    growth_factor: f64,
    backoff_factor: f64,
    growth_interval: i64,
) -> Result<(), KernelError> {
    for (name, v) in [
        ("scale", scale),
        ("growth_tracker", growth_tracker),
        ("found_inf", found_inf),
    ] {
        if v.numel() != 1 {
            return Err(KernelError::InvalidArgument(format!(
                "foo _amp_update_scale_: {name} must be a 1-element tensor"
            )));
        }
    }
    let s = ld(scale, 0) as f32;
    if ld(found_inf, 0) != 0.0 {
        st(scale, 0, (s * backoff_factor as f32) as f64);
        st(growth_tracker, 0, 0.0);
    } else {
        let successful = ld(growth_tracker, 0) as i64 + 1;
        if successful == growth_interval {
            let grown = s * growth_factor as f32;
            if grown.is_finite() {
                st(scale, 0, grown as f64);
            }
            st(growth_tracker, 0, 0.0);
        } else {
            st(growth_tracker, 0, successful as f64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn view<T>(v: &mut [T], dtype: DType) -> Strided {
        Strided::contiguous(v.as_mut_ptr() as *mut u8, dtype, &[v.len()])
    }

    #[test]
    fn tasks_of_many_tensors_cover_every_element_at_any_thread_count() {
        // Tensors below, at and across the grain, run together: every
        // element updated once, the same at 1 and 4 threads.
        let sizes = [
            0,
            1,
            7,
            GRAIN_SIZE - 1,
            GRAIN_SIZE,
            GRAIN_SIZE + 1,
            3 * GRAIN_SIZE + 5,
        ];
        let cfg = Sgd {
            lr: 0.5,
            weight_decay: 0.0,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            maximize: false,
            first_step: true,
        };
        let run = |threads: usize| {
            let mut ps: Vec<Vec<f32>> = sizes
                .iter()
                .map(|&n| (0..n).map(|i| i as f32).collect())
                .collect();
            let mut gs: Vec<Vec<f32>> = sizes.iter().map(|&n| vec![2.0f32; n]).collect();
            let pv: Vec<Strided> = ps.iter_mut().map(|p| view(p, DType::F32)).collect();
            let gv: Vec<Strided> = gs.iter_mut().map(|g| view(g, DType::F32)).collect();
            let tasks: Vec<Task> = (0..sizes.len())
                .map(|i| sgd(&pv[i], &gv[i], None, &cfg, None).unwrap())
                .collect();
            super::super::parallel::with_threads(threads, || run_tasks(&tasks));
            ps
        };
        let one = run(1);
        for (n, p) in sizes.iter().zip(&one) {
            assert_eq!(p.len(), *n);
            assert!(p.iter().enumerate().all(|(i, &x)| x == i as f32 - 1.0));
        }
        assert_eq!(one, run(4));
    }

    #[test]
    fn adam_first_step_moves_by_lr() {
        // Step 1 with zero state: m = (1-b1) g, v = (1-b2) g^2, the update is
        // lr * sign(g) (up to eps).
        let mut p = vec![1.0f32, -2.0, 3.0];
        let mut g = vec![0.5f32, -4.0, 0.0];
        let (mut m, mut v) = (vec![0.0f32; 3], vec![0.0f32; 3]);
        let cfg = Adam {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            weight_decay: 0.0,
            eps: 1e-8,
            amsgrad: false,
            maximize: false,
            decoupled: false,
        };
        let (pv, gv, mv, vv) = (
            view(&mut p, DType::F32),
            view(&mut g, DType::F32),
            view(&mut m, DType::F32),
            view(&mut v, DType::F32),
        );
        run_tasks(&[adam(&pv, &gv, &mv, &vv, None, 1.0, &cfg, None).unwrap()]);
        assert!((p[0] - 0.9).abs() < 1e-6 && (p[1] + 1.9).abs() < 1e-6 && p[2] == 3.0);
        assert!((m[0] - 0.05).abs() < 1e-7 && (v[1] - 0.016).abs() < 1e-7);
    }

    #[test]
    fn grad_scale_is_written_back_and_amsgrad_keeps_the_max() {
        let mut p = vec![0.0f64; 2];
        let mut g = vec![8.0f64, -8.0];
        let (mut m, mut v) = (vec![0.0f64; 2], vec![0.0f64; 2]);
        let mut mx = vec![1.0f64, 0.0];
        let cfg = Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.99,
            weight_decay: 0.1,
            eps: 1e-8,
            amsgrad: true,
            maximize: true,
            decoupled: true,
        };
        let (pv, gv, mv, vv, xv) = (
            view(&mut p, DType::F64),
            view(&mut g, DType::F64),
            view(&mut m, DType::F64),
            view(&mut v, DType::F64),
            view(&mut mx, DType::F64),
        );
        run_tasks(&[adam(&pv, &gv, &mv, &vv, Some(&xv), 1.0, &cfg, Some(4.0)).unwrap()]);
        assert_eq!(g, vec![2.0, -2.0]);
        assert_eq!(mx[0], 1.0); // max(1, 0.01 * 4)
        assert!((mx[1] - 0.04).abs() < 1e-15);
        // maximize: the parameter moves along the gradient.
        assert!(p[0] > 0.0 && p[1] < 0.0);
    }

    #[test]
    fn aliased_tensors_are_refused() {
        let mut p = vec![1.0f32; 8];
        let pv = view(&mut p, DType::F32);
        let half = Strided::contiguous(pv.ptr, DType::F32, &[4]);
        let tail = Strided::contiguous(unsafe { pv.ptr.add(16) }, DType::F32, &[4]);
        let cfg = Sgd {
            lr: 0.1,
            weight_decay: 0.0,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            maximize: false,
            first_step: true,
        };
        assert!(matches!(
            sgd(&pv, &pv, None, &cfg, None),
            Err(KernelError::InvalidArgument(_))
        ));
        // Disjoint halves of one buffer are fine.
        run_tasks(&[sgd(&half, &tail, None, &cfg, None).unwrap()]);
        assert_eq!(p[0], 0.9);
    }

    #[test]
    fn sgd_momentum_and_nesterov() {
        let mut p = vec![1.0f32];
        let mut g = vec![2.0f32];
        let mut b = vec![0.0f32];
        let mut cfg = Sgd {
            lr: 0.5,
            weight_decay: 0.0,
            momentum: 0.9,
            dampening: 0.0,
            nesterov: false,
            maximize: false,
            first_step: true,
        };
        let (pv, gv, bv) = (
            view(&mut p, DType::F32),
            view(&mut g, DType::F32),
            view(&mut b, DType::F32),
        );
        run_tasks(&[sgd(&pv, &gv, Some(&bv), &cfg, None).unwrap()]);
        assert_eq!((p[0], b[0]), (0.0, 2.0));
        cfg.first_step = false;
        cfg.nesterov = true;
        run_tasks(&[sgd(&pv, &gv, Some(&bv), &cfg, None).unwrap()]);
        // buf = 0.9 * 2 + 2 = 3.8; grad = 2 + 0.9 * 3.8 = 5.42
        assert!((b[0] - 3.8).abs() < 1e-6 && (p[0] + 2.71).abs() < 1e-6);
    }

    #[test]
    fn unscale_finds_non_finite_and_scales() {
        let mut g = vec![
            half::bf16::from_f32(4.0),
            half::bf16::from_f32(f32::INFINITY),
        ];
        let gv = view(&mut g, DType::BF16);
        assert!(unscale(&[gv], 0.5).unwrap());
        assert_eq!(g[0].to_f32(), 2.0);
        let mut h = vec![1.0f32; 100_000];
        assert!(!unscale(&[view(&mut h, DType::F32)], 0.25).unwrap());
        assert!(h.iter().all(|&x| x == 0.25));
    }

    #[test]
    fn update_scale_backs_off_and_grows() {
        let (mut s, mut t, mut f) = (vec![1024.0f32], vec![1i32], vec![0.0f32]);
        let (sv, tv, fv) = (
            view(&mut s, DType::F32),
            view(&mut t, DType::I32),
            view(&mut f, DType::F32),
        );
        update_scale(&sv, &tv, &fv, 2.0, 0.5, 2).unwrap();
        assert_eq!((s[0], t[0]), (2048.0, 0));
        update_scale(&sv, &tv, &fv, 2.0, 0.5, 2).unwrap();
        assert_eq!((s[0], t[0]), (2048.0, 1));
        f[0] = 1.0;
        update_scale(&sv, &tv, &fv, 2.0, 0.5, 2).unwrap();
        assert_eq!((s[0], t[0]), (1024.0, 0));
    }
}
