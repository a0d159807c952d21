//! `im2col` / `col2im` (`nn.functional.unfold` / `fold`): the convolution's
//! own packing ([`pack`]) and column-gradient accumulation ([`unpack_add`])
//! over whole samples. Tasks are (sample, channel) pairs: each writes its own
//! rows of the columns (im2col) or its own input plane (col2im), adding in a
//! fixed order, so results do not depend on the thread count. The half types
//! add in half precision, as CPU's kernels do.

use super::{pack, parallel, unpack_add, Conv2d, Real, P};
use crate::dtype::DType;
use crate::kernels::{KernelError, Strided};
use half::{bf16, f16};

impl Real for f16 {
    const ZERO: f16 = f16::ZERO;
    const ONE: f16 = f16::ONE;
}
impl Real for bf16 {
    const ZERO: bf16 = bf16::ZERO;
    const ONE: bf16 = bf16::ONE;
}

/// The window geometry: `[N, C, H, W]` planes, kernel, dilation, padding,
/// stride; the output grid follows (`oh`, `ow`).
#[derive(Clone, Copy, Debug)]
pub struct Fold {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub kernel: [usize; 2],
    pub dilation: [usize; 2],
    pub padding: [usize; 2],
    pub stride: [usize; 2],
}

impl Fold {
    fn conv(&self) -> Result<Conv2d, KernelError> {
        let mut o = [0usize; 2];
        for d in 0..2 {
            if self.stride[d] == 0 || self.dilation[d] == 0 || self.kernel[d] == 0 {
                return Err(KernelError::InvalidArgument(
                    "foo: im2col/col2im expect positive kernel size, dilation and stride".into(),
                ));
            }
            let i = [self.h, self.w][d] + 2 * self.padding[d];
            let span = self.dilation[d] * (self.kernel[d] - 1) + 1;
            o[d] = if i >= span {
                (i - span) / self.stride[d] + 1
            } else {
                0
            };
        }
        Ok(Conv2d {
            n: self.n,
            c: self.c,
            h: self.h,
            w: self.w,
            oc: 1,
            kh: self.kernel[0],
            kw: self.kernel[1],
            oh: o[0],
            ow: o[1],
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            groups: 1,
        })
    }
}

fn check(t: &Strided, what: &str, sizes: &[usize], dtype: DType) -> Result<(), KernelError> {
    if t.sizes[..] != *sizes || t.dtype != dtype || !(t.numel() == 0 || t.is_contiguous()) {
        return Err(KernelError::InvalidArgument(format!(
            "foo: im2col/col2im expect a contiguous {what} of size {sizes:?} and dtype {} (got {:?}, {})",
            dtype.name(),
            t.sizes,
            t.dtype.name()
        )));
    }
    Ok(())
}

/// `cols[N, C*KH*KW, L] = im2col(x[N, C, H, W])` (both contiguous).
pub fn im2col(f: &Fold, cols: &Strided, x: &Strided) -> Result<(), KernelError> {
    let g = f.conv()?;
    check(x, "input", &[g.n, g.c, g.h, g.w], x.dtype)?;
    check(cols, "output", &[g.n, g.ck(), g.p()], x.dtype)?;
    fn go<T: Real>(g: &Conv2d, cols: *mut u8, x: *mut u8) {
        let (po, px) = (P(cols as *mut T), P(x as *mut T));
        let (kp, l) = (g.kp(), g.p());
        parallel::parallel_for(g.n * g.c, |task| {
            let (n, c) = (task / g.c, task % g.c);
            // SAFETY: task (n, c) writes rows c*kp..(c+1)*kp of sample n
            // only, and reads sample n's planes.
            unsafe {
                let dst = std::slice::from_raw_parts_mut(po.at((n * g.c + c) * kp * l), kp * l);
                pack(g, px.at(n * g.c * g.hw()), c * kp, (c + 1) * kp, 0, l, dst);
            }
        });
    }
    if cols.numel() == 0 {
        return Ok(());
    }
    match x.dtype {
        DType::F32 => go::<f32>(&g, cols.ptr, x.ptr),
        DType::F64 => go::<f64>(&g, cols.ptr, x.ptr),
        DType::F16 => go::<f16>(&g, cols.ptr, x.ptr),
        DType::BF16 => go::<bf16>(&g, cols.ptr, x.ptr),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: "im2col_out_cpu",
                dtype: d,
            })
        }
    }
    Ok(())
}

/// `out[N, C, H, W] = col2im(cols[N, C*KH*KW, L])`: each column element added
/// into the input position its window reads (both contiguous; `out` is
/// overwritten).
pub fn col2im(f: &Fold, out: &Strided, cols: &Strided) -> Result<(), KernelError> {
    let g = f.conv()?;
    check(out, "output", &[g.n, g.c, g.h, g.w], cols.dtype)?;
    check(cols, "input", &[g.n, g.ck(), g.p()], cols.dtype)?;
    fn go<T: Real>(g: &Conv2d, out: *mut u8, cols: *mut u8) {
        let (po, pc) = (P(out as *mut T), P(cols as *mut T));
        let (kp, l) = (g.kp(), g.p());
        parallel::parallel_for(g.n * g.c, |task| {
            let (n, c) = (task / g.c, task % g.c);
            // SAFETY: task (n, c) writes plane c of sample n only.
            unsafe {
                std::slice::from_raw_parts_mut(po.at((n * g.c + c) * g.hw()), g.hw()).fill(T::ZERO);
                if kp * l == 0 {
                    return;
                }
                let src = std::slice::from_raw_parts(pc.at((n * g.c + c) * kp * l), kp * l);
                unpack_add(
                    g,
                    po.at(n * g.c * g.hw()),
                    c * kp,
                    (c + 1) * kp,
                    0,
                    l,
                    l,
                    src,
                );
            }
        });
    }
    if out.numel() == 0 {
        return Ok(());
    }
    match cols.dtype {
        DType::F32 => go::<f32>(&g, out.ptr, cols.ptr),
        DType::F64 => go::<f64>(&g, out.ptr, cols.ptr),
        DType::F16 => go::<f16>(&g, out.ptr, cols.ptr),
        DType::BF16 => go::<bf16>(&g, out.ptr, cols.ptr),
        d => {
            return Err(KernelError::UnsupportedDtype {
                op: "col2im_out_cpu",
                dtype: d,
            })
        }
    }
    Ok(())
}
