//! Whole-sequence LSTM / GRU recurrences (kernels/rnn.rs). Every call
//! releases the GIL. The Python layer (foo_rs/_ops/rnn_seq.py) allocates
//! every output; here each operand's shape, strides and dtype are checked
//! against the sizes the kernel will touch before any pointer is used.

use super::{kernel_err, strided, TensorDesc};
use crate::dtype::DType;
use crate::kernels::elementwise::math::Real;
use crate::kernels::rnn::{self, Backward, Cell, Forward, Rows, Steps};
use crate::kernels::{KernelError, Strided};
use pyo3::prelude::*;

fn cell_of(name: &str) -> PyResult<Cell> {
    match name {
        "lstm" => Ok(Cell::Lstm),
        "gru" => Ok(Cell::Gru),
        _ => Err(kernel_err(KernelError::InvalidValue(format!(
            "foo rnn: unknown cell {name:?}"
        )))),
    }
}

/// Checks that `d` is a `[rows, cols]` matrix of `dtype` with contiguous
/// columns (and contiguous rows when `dense`); returns (pointer, row stride).
fn mat(
    d: &Strided,
    dtype: DType,
    rows: usize,
    cols: usize,
    name: &str,
    dense: bool,
) -> PyResult<(*mut u8, usize)> {
    // The shape first: the strides are only read for a 2-d view.
    let ok_shape = d.sizes[..] == [rows, cols] && d.strides.len() == 2;
    let cs_ok = ok_shape && (cols <= 1 || d.strides[1] == 1);
    let rs = if rows <= 1 || !ok_shape {
        cols
    } else {
        d.strides[0].max(0) as usize
    };
    if !cs_ok || (rows > 1 && (rs < cols || (dense && rs != cols))) {
        return Err(kernel_err(KernelError::InvalidArgument(format!(
            "foo rnn: {name} must be a [{rows}, {cols}] matrix with contiguous rows, got sizes {:?} strides {:?}",
            d.sizes, d.strides
        ))));
    }
    if d.dtype != dtype {
        return Err(kernel_err(KernelError::InvalidArgument(format!(
            "foo rnn: {name} has dtype {} but the input is {}",
            d.dtype.name(),
            dtype.name()
        ))));
    }
    Ok((d.ptr, rs))
}

struct Shapes {
    cell: Cell,
    steps: Steps,
    hidden: usize,
    dtype: DType,
}

impl Shapes {
    fn new(cell: &str, batch_sizes: &[usize], hidden: usize, dtype: DType) -> PyResult<Shapes> {
        let steps = Steps::new(batch_sizes).map_err(super::kernel_err)?;
        if !matches!(dtype, DType::F32 | DType::F64) {
            return Err(kernel_err(KernelError::InvalidArgument(format!(
                "foo rnn: the whole-sequence kernel takes float32 and float64, not {}",
                dtype.name()
            ))));
        }
        Ok(Shapes {
            cell: cell_of(cell)?,
            steps,
            hidden,
            dtype,
        })
    }

    fn n(&self) -> usize {
        self.steps.rows()
    }
    fn b(&self) -> usize {
        self.steps.batch()
    }
    fn gh(&self) -> usize {
        self.cell.gates() * self.hidden
    }

    fn rows<T>(&self, d: &Strided, rows: usize, cols: usize, name: &str) -> PyResult<Rows<T>> {
        let (p, rs) = mat(d, self.dtype, rows, cols, name, false)?;
        Ok(Rows::new(p as *mut T, rs))
    }

    fn dense<T>(&self, d: &Strided, rows: usize, cols: usize, name: &str) -> PyResult<*mut T> {
        Ok(mat(d, self.dtype, rows, cols, name, true)?.0 as *mut T)
    }

    fn opt_dense<T>(
        &self,
        d: &Option<Strided>,
        rows: usize,
        cols: usize,
        name: &str,
    ) -> PyResult<Option<*mut T>> {
        d.as_ref()
            .map(|d| self.dense(d, rows, cols, name))
            .transpose()
    }
}

fn opt(d: Option<TensorDesc>) -> PyResult<Option<Strided>> {
    d.map(strided).transpose()
}

#[allow(clippy::too_many_arguments)]
fn forward_t<T: 'static + Copy + Send + Sync + Real>(
    py: Python<'_>,
    s: &Shapes,
    reverse: bool,
    xg: &Strided,
    w_hh: &Strided,
    b_hh: &Option<Strided>,
    h0: &Strided,
    c0: &Option<Strided>,
    y: &Strided,
    hn: &Strided,
    cn: &Option<Strided>,
    cs: &Option<Strided>,
    ws: &Option<Strided>,
) -> PyResult<()> {
    let (n, b, h, gh) = (s.n(), s.b(), s.hidden, s.gh());
    let op = Forward::<T> {
        xg: s.rows(xg, n, gh, "xg")?,
        w_hh: s.dense::<T>(w_hh, gh, h, "w_hh")?,
        b_hh: s
            .opt_dense::<T>(b_hh, 1, gh, "b_hh")?
            .map(|p| p as *const T),
        h0: s.dense::<T>(h0, b, h, "h0")?,
        c0: s.opt_dense::<T>(c0, b, h, "c0")?.map(|p| p as *const T),
        y: s.rows(y, n, h, "output")?,
        hn: s.dense(hn, b, h, "h_n")?,
        cn: s.opt_dense(cn, b, h, "c_n")?,
        cs: s.opt_dense(cs, n, h, "cell states")?,
        ws: s.opt_dense(ws, n, 4 * h, "workspace")?,
    };
    let (cell, steps) = (s.cell, &s.steps);
    let op = SendOp(op);
    py.detach(move || {
        let op = op;
        // SAFETY: every operand was checked above against the sizes the
        // kernel touches; the Python layer allocates outputs fresh.
        unsafe { rnn::forward(cell, steps, reverse, h, &op.0) }
    })
    .map_err(super::kernel_err)
}

struct SendOp<O>(O);
// SAFETY: the raw pointers inside point to tensors the caller keeps alive
// for the call; the kernel only uses them on its own pool.
unsafe impl<O> Send for SendOp<O> {}

/// One layer-direction's forward over the whole sequence (see kernels/rnn.rs):
/// writes `y` `[N, H]` (row stride free), `hn`, `cn` `[B, H]` and, for the
/// backward, `cs` `[N, H]` (LSTM) and `ws` `[N, 4H]`.
#[pyfunction]
#[pyo3(signature = (cell, batch_sizes, reverse, hidden, xg, w_hh, b_hh, h0, c0, y, hn, cn, cs, ws))]
#[allow(clippy::too_many_arguments)]
fn rnn_forward(
    py: Python<'_>,
    cell: &str,
    batch_sizes: Vec<usize>,
    reverse: bool,
    hidden: usize,
    xg: TensorDesc,
    w_hh: TensorDesc,
    b_hh: Option<TensorDesc>,
    h0: TensorDesc,
    c0: Option<TensorDesc>,
    y: TensorDesc,
    hn: TensorDesc,
    cn: Option<TensorDesc>,
    cs: Option<TensorDesc>,
    ws: Option<TensorDesc>,
) -> PyResult<()> {
    let xg = strided(xg)?;
    let s = Shapes::new(cell, &batch_sizes, hidden, xg.dtype)?;
    let (w_hh, b_hh, h0, c0) = (strided(w_hh)?, opt(b_hh)?, strided(h0)?, opt(c0)?);
    let (y, hn, cn, cs, ws) = (strided(y)?, strided(hn)?, opt(cn)?, opt(cs)?, opt(ws)?);
    match s.dtype {
        DType::F32 => forward_t::<f32>(
            py, &s, reverse, &xg, &w_hh, &b_hh, &h0, &c0, &y, &hn, &cn, &cs, &ws,
        ),
        _ => forward_t::<f64>(
            py, &s, reverse, &xg, &w_hh, &b_hh, &h0, &c0, &y, &hn, &cn, &cs, &ws,
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn backward_t<T: 'static + Copy + Send + Sync + Real>(
    py: Python<'_>,
    s: &Shapes,
    reverse: bool,
    t: &[Option<Strided>; 14],
) -> PyResult<()> {
    let (n, b, h, gh) = (s.n(), s.b(), s.hidden, s.gh());
    let req = |i: usize, name: &str| {
        t[i].as_ref().ok_or_else(|| {
            kernel_err(KernelError::InvalidValue(format!(
                "foo rnn backward: {name} is required"
            )))
        })
    };
    let [_, _, dcn, _, _, c0, _, cs, _, _, dgh, _, dc0, _] = t;
    let op = Backward::<T> {
        dy: s.rows(req(0, "grad_output")?, n, h, "grad_output")?,
        dhn: s.dense::<T>(req(1, "grad_hn")?, b, h, "grad_hn")?,
        dcn: s
            .opt_dense::<T>(dcn, b, h, "grad_cn")?
            .map(|p| p as *const T),
        w_hh: s.dense::<T>(req(3, "w_hh")?, gh, h, "w_hh")?,
        h0: s.dense::<T>(req(4, "h0")?, b, h, "h0")?,
        c0: s.opt_dense::<T>(c0, b, h, "c0")?.map(|p| p as *const T),
        y: s.rows(req(6, "output")?, n, h, "output")?,
        cs: s
            .opt_dense::<T>(cs, n, h, "cell states")?
            .map(|p| p as *const T),
        ws: s.dense::<T>(req(8, "workspace")?, n, 4 * h, "workspace")?,
        dgx: s.dense(req(9, "grad_gates")?, n, gh, "grad_gates")?,
        dgh: s.opt_dense(dgh, n, gh, "grad_hidden_gates")?,
        dh0: s.dense(req(11, "grad_h0")?, b, h, "grad_h0")?,
        dc0: s.opt_dense(dc0, b, h, "grad_c0")?,
        hprev: s.dense(req(13, "hprev")?, n, h, "hprev")?,
    };
    let (cell, steps) = (s.cell, &s.steps);
    let op = SendOp(op);
    py.detach(move || {
        let op = op;
        // SAFETY: as in `forward_t`.
        unsafe { rnn::backward(cell, steps, reverse, h, &op.0) }
    })
    .map_err(super::kernel_err)
}

/// One layer-direction's backward through time: from the output gradient
/// `dy` `[N, H]` and the final states' gradients, writes the gate gradients
/// `dgx` `[N, G*H]` (GRU also `dgh`, the hidden side's), the initial states'
/// gradients `dh0`, `dc0` and `hprev` `[N, H]` (each step's previous hidden
/// state, for the caller's `dW_hh` product).
#[pyfunction]
#[pyo3(signature = (cell, batch_sizes, reverse, hidden, dy, dhn, dcn, w_hh, h0, c0, y, cs, ws, dgx, dgh, dh0, dc0, hprev))]
#[allow(clippy::too_many_arguments)]
fn rnn_backward(
    py: Python<'_>,
    cell: &str,
    batch_sizes: Vec<usize>,
    reverse: bool,
    hidden: usize,
    dy: TensorDesc,
    dhn: TensorDesc,
    dcn: Option<TensorDesc>,
    w_hh: TensorDesc,
    h0: TensorDesc,
    c0: Option<TensorDesc>,
    y: TensorDesc,
    cs: Option<TensorDesc>,
    ws: TensorDesc,
    dgx: TensorDesc,
    dgh: Option<TensorDesc>,
    dh0: TensorDesc,
    dc0: Option<TensorDesc>,
    hprev: TensorDesc,
) -> PyResult<()> {
    let dy = strided(dy)?;
    let s = Shapes::new(cell, &batch_sizes, hidden, dy.dtype)?;
    let t = [
        Some(dy),
        Some(strided(dhn)?),
        opt(dcn)?,
        Some(strided(w_hh)?),
        Some(strided(h0)?),
        opt(c0)?,
        Some(strided(y)?),
        opt(cs)?,
        Some(strided(ws)?),
        Some(strided(dgx)?),
        opt(dgh)?,
        Some(strided(dh0)?),
        opt(dc0)?,
        Some(strided(hprev)?),
    ];
    match s.dtype {
        DType::F32 => backward_t::<f32>(py, &s, reverse, &t),
        _ => backward_t::<f64>(py, &s, reverse, &t),
    }
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rnn_forward, m)?)?;
    m.add_function(wrap_pyfunction!(rnn_backward, m)?)?;
    Ok(())
}
