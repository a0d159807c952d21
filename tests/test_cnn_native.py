"""The CNN training hot path on the native path: convolution (forward and
backward, transposed, 1-d/2-d, groups, stride, dilation, padding,
channels-last), batch norm (training with running statistics, evaluation,
no statistics, backward), group norm (forward and backward) and hardswish / hardsigmoid's gradients reach Rust
from the dispatcher with no Python kernel, and give what torch CPU gives.
Calls the Rust kernels do not take (3-d, half types, bad arguments) keep
the Python kernels, which raise CPU's exception types naming foo."""

import pytest
import torch
import torch.nn.functional as F

import foo_rs
from foo_testing import make_tensor

A = torch.ops.aten


def _f(shape, dtype=torch.float32, seed=0):
    return make_tensor(shape, dtype, seed)


def _grads(f, inputs, g):
    """The gradients of f(*inputs) applied to g w.r.t. every input, concatenated."""
    inputs = [x.detach().requires_grad_() for x in inputs]
    return torch.cat([r.flatten() for r in torch.autograd.grad(f(*inputs), inputs, g)])


def _cat(*ts):
    return torch.cat([t.flatten() for t in ts if t is not None])


def _bn_train(t, shape, momentum=0.1, affine=True, channels_last=False):
    """Training-mode batch norm: its output and the running statistics it updated in place."""
    c = shape[1]
    x = t(_f(shape))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    rm, rv = t(_f((c,), seed=1)), t(_f((c,), seed=2).abs() + 0.5)
    w, b = (t(_f((c,), seed=3)), t(_f((c,), seed=4))) if affine else (None, None)
    out = F.batch_norm(x, rm, rv, w, b, training=True, momentum=momentum)
    return _cat(out, rm, rv)


CNN_CASES = {
    # convolution forward
    "conv2d_bias": lambda t: F.conv2d(t(_f((2, 4, 9, 9))), t(_f((6, 4, 3, 3), seed=1)), t(_f((6,), seed=2)), padding=1),
    "conv2d_stride_dilation_groups_no_bias": lambda t: F.conv2d(
        t(_f((2, 6, 11, 10))),
        t(_f((4, 3, 3, 2), seed=1)),
        None,
        stride=(2, 1),
        padding=(2, 1),
        dilation=(2, 3),
        groups=2,
    ),
    "conv2d_depthwise": lambda t: F.conv2d(t(_f((1, 8, 7, 7))), t(_f((8, 1, 3, 3), seed=1)), padding=1, groups=8),
    "conv2d_pointwise_float64": lambda t: F.conv2d(
        t(_f((2, 5, 4, 4), torch.float64)), t(_f((3, 5, 1, 1), torch.float64, 1))
    ),
    "conv2d_padding_same": lambda t: F.conv2d(t(_f((1, 3, 6, 5))), t(_f((2, 3, 3, 5), seed=1)), padding="same"),
    "conv1d": lambda t: F.conv1d(
        t(_f((2, 4, 12))), t(_f((6, 2, 3), seed=1)), t(_f((6,), seed=2)), stride=2, padding=1, groups=2
    ),
    "conv_transpose2d": lambda t: F.conv_transpose2d(
        t(_f((2, 4, 5, 5))), t(_f((4, 3, 3, 3), seed=1)), t(_f((3,), seed=2)), stride=2, padding=1, output_padding=1
    ),
    "conv_transpose1d_groups": lambda t: F.conv_transpose1d(t(_f((1, 4, 6))), t(_f((4, 2, 3), seed=1)), groups=2),
    # convolution backward (all three gradients, through autograd)
    "conv2d_backward": lambda t: _grads(
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        [t(_f((2, 4, 8, 8))), t(_f((6, 4, 3, 3), seed=1)), t(_f((6,), seed=2))],
        t(_f((2, 6, 4, 4), seed=3)),
    ),
    "conv2d_backward_groups_dilation": lambda t: _grads(
        lambda x, w: F.conv2d(x, w, dilation=2, groups=2),
        [t(_f((1, 4, 7, 7))), t(_f((6, 2, 2, 2), seed=1))],
        t(_f((1, 6, 5, 5), seed=3)),
    ),
    "conv1d_backward": lambda t: _grads(
        lambda x, w, b: F.conv1d(x, w, b, padding=2),
        [t(_f((2, 3, 9))), t(_f((4, 3, 5), seed=1)), t(_f((4,), seed=2))],
        t(_f((2, 4, 9), seed=3)),
    ),
    "conv_transpose2d_backward": lambda t: _grads(
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
        [t(_f((1, 4, 3, 3))), t(_f((4, 2, 3, 3), seed=1)), t(_f((2,), seed=2))],
        t(_f((1, 2, 7, 7), seed=3)),
    ),
    # convolution_backward with a partial output_mask: only the asked gradients
    "conv_backward_mask_input_only": lambda t: _cat(
        *A.convolution_backward(
            t(_f((2, 6, 4, 4), seed=3)),
            t(_f((2, 4, 6, 6))),
            t(_f((6, 4, 3, 3), seed=1)),
            [6],
            [1, 1],
            [0, 0],
            [1, 1],
            False,
            [0, 0],
            1,
            [True, False, False],
        )
    ),
    "conv_backward_mask_weight_bias": lambda t: _cat(
        *A.convolution_backward(
            t(_f((2, 6, 4, 4), seed=3)),
            t(_f((2, 4, 6, 6))),
            t(_f((6, 4, 3, 3), seed=1)),
            [6],
            [1, 1],
            [0, 0],
            [1, 1],
            False,
            [0, 0],
            1,
            [False, True, True],
        )
    ),
    # channels-last: the input's layout carries to the outputs, as on the CPU
    "conv2d_channels_last": lambda t: F.conv2d(
        t(_f((2, 3, 6, 6))).contiguous(memory_format=torch.channels_last),
        t(_f((4, 3, 3, 3), seed=1)),
        t(_f((4,), seed=2)),
    ),
    "conv2d_channels_last_backward": lambda t: _grads(
        lambda x, w: F.conv2d(x, w, padding=1),
        [t(_f((2, 3, 5, 5))).contiguous(memory_format=torch.channels_last), t(_f((4, 3, 3, 3), seed=1))],
        t(_f((2, 4, 5, 5), seed=3)),
    ),
    # batch norm: training updates the running statistics in place like CPU (momentum, unbiased variance)
    "batch_norm_train": lambda t: _bn_train(t, (4, 3, 5, 5)),
    "batch_norm_train_momentum_no_affine": lambda t: _bn_train(t, (2, 5, 7), momentum=0.3, affine=False),
    "batch_norm_train_2d_input": lambda t: _bn_train(t, (6, 4)),
    "batch_norm_train_channels_last": lambda t: _bn_train(t, (2, 3, 4, 5), channels_last=True),
    "batch_norm_eval": lambda t: F.batch_norm(
        t(_f((3, 4, 5, 2))),
        t(_f((4,), seed=1)),
        t(_f((4,), seed=2).abs()),
        t(_f((4,), seed=3)),
        t(_f((4,), seed=4)),
        training=False,
    ),
    "batch_norm_no_running_stats": lambda t: F.batch_norm(
        t(_f((3, 4, 6))), None, None, t(_f((4,), seed=3)), None, training=True
    ),
    "native_batch_norm_saved_stats": lambda t: _cat(
        *A.native_batch_norm(t(_f((3, 4, 6), torch.float64)), None, None, None, None, True, 0.1, 1e-5)
    ),
    "batch_norm_legit_no_stats": lambda t: _cat(
        *A._native_batch_norm_legit.no_stats(t(_f((3, 4, 6))), t(_f((4,), seed=3)), None, True, 0.1, 1e-5)
    ),
    "batch_norm_with_update": lambda t: (
        lambda x, rm, rv: _cat(*A._batch_norm_with_update(x, None, None, rm, rv, 0.2, 1e-5)[:3], rm, rv)
    )(t(_f((2, 3, 4, 4))), t(_f((3,), seed=1)), t(_f((3,), seed=2).abs())),
    "batch_norm_backward_train": lambda t: _grads(
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        [t(_f((4, 3, 5, 5))), t(_f((3,), seed=1)), t(_f((3,), seed=2))],
        t(_f((4, 3, 5, 5), seed=3)),
    ),
    "batch_norm_backward_eval": lambda t: _grads(
        lambda x, w, b: F.batch_norm(x, t(_f((3,), seed=4)), t(_f((3,), seed=5).abs()), w, b, training=False),
        [t(_f((4, 3, 5))), t(_f((3,), seed=1)), t(_f((3,), seed=2))],
        t(_f((4, 3, 5), seed=3)),
    ),
    "batch_norm_backward_channels_last": lambda t: _grads(
        lambda x: F.batch_norm(x, None, None, training=True),
        [t(_f((2, 3, 4, 4))).contiguous(memory_format=torch.channels_last)],
        t(_f((2, 3, 4, 4), seed=3)),
    ),
    "batch_norm_backward_new_form": lambda t: _cat(
        *A.batch_norm_backward(
            t(_f((3, 4, 5), seed=3)),
            t(_f((3, 4, 5))),
            t(_f((4,), seed=1)),
            None,
            None,
            *A.native_batch_norm(t(_f((3, 4, 5))), None, None, None, None, True, 0.1, 1e-5)[1:],
            True,
            1e-5,
            [True, True, False],
            t(torch.empty(0, dtype=torch.uint8)),
        )
    ),
    # group norm forward (output and statistics) and backward
    "group_norm_stats": lambda t: _cat(
        *A.native_group_norm(t(_f((2, 6, 5, 4))), t(_f((6,), seed=1)), t(_f((6,), seed=2)), 2, 6, 20, 3, 1e-5)
    ),
    "group_norm_no_affine_2d_input": lambda t: F.group_norm(t(_f((3, 4))), 2),
    "group_norm_float64_3d": lambda t: F.group_norm(
        t(_f((2, 4, 3, 2, 2), torch.float64)), 4, t(_f((4,), torch.float64, 1)), None, eps=1e-3
    ),
    "group_norm_channels_last": lambda t: F.group_norm(
        t(_f((2, 6, 4, 3))).contiguous(memory_format=torch.channels_last), 3, t(_f((6,), seed=1)), t(_f((6,), seed=2))
    ),
    "group_norm_backward": lambda t: _grads(
        lambda x, w, b: F.group_norm(x, 3, w, b),
        [t(_f((2, 6, 5, 4))), t(_f((6,), seed=1)), t(_f((6,), seed=2))],
        t(_f((2, 6, 5, 4), seed=3)),
    ),
    "group_norm_backward_no_affine": lambda t: _grads(
        lambda x: F.group_norm(x, 1), [t(_f((3, 4, 7), torch.float64))], t(_f((3, 4, 7), torch.float64, 3))
    ),
    # hardswish and the gradients of hardswish / hardsigmoid (mobilenet_v3's activations)
    "hardswish": lambda t: F.hardswish(t(_f((3, 17)) * 4)),
    "hardswish_inplace": lambda t: F.hardswish(t(_f((3, 17)) * 4), inplace=True),
    "hardswish_backward": lambda t: _grads(F.hardswish, [t(_f((3, 17)) * 4)], t(_f((3, 17), seed=1))),
    "hardsigmoid_backward": lambda t: _grads(F.hardsigmoid, [t(_f((3, 17)) * 4)], t(_f((3, 17), seed=1))),
}


@pytest.mark.parametrize("name", sorted(CNN_CASES))
def test_cnn_calls_run_no_python(no_fallback, name):
    """dispatcher -> C++ -> Rust with CPU's values, dtypes, shapes and layouts."""
    f = CNN_CASES[name]
    expected = f(lambda x: x)
    f(lambda x: x.to("foo"))  # first call: anything lazy happens here
    before = foo_rs.python_kernel_calls()
    actual = f(lambda x: x.to("foo"))
    ran = foo_rs.python_kernel_calls() - before
    assert not ran, f"{name} ran Python kernels: {dict(ran)}"
    assert actual.device.type == "foo"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert actual.is_contiguous(memory_format=torch.channels_last) == expected.is_contiguous(
        memory_format=torch.channels_last
    )
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_slow_path_keeps_the_other_cases(no_fallback):
    """3-d and half-precision convolutions and mixed-precision batch norm still
    work (the Python kernels), with CPU's results."""
    cases = [
        lambda t: F.conv3d(t(_f((1, 2, 4, 4, 4))), t(_f((3, 2, 2, 2, 2), seed=1))),
        lambda t: F.conv2d(t(_f((1, 2, 5, 5), torch.bfloat16)), t(_f((3, 2, 3, 3), torch.bfloat16, 1))).float(),
        lambda t: F.batch_norm(
            t(_f((2, 3, 4), torch.bfloat16)), None, None, t(_f((3,), seed=1)), None, training=True
        ).float(),
    ]
    for f in cases:
        torch.testing.assert_close(f(lambda x: x.to("foo")).cpu(), f(lambda x: x), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_group_norm_half_types_run_no_python(no_fallback, dtype):
    """Group norm forward and backward in the 16-bit types: Rust, with CPU's
    results (statistics stored in the input's dtype, as on CPU)."""
    x, w, b, g = _f((2, 8, 3, 3), dtype), _f((8,), dtype, 1), _f((8,), dtype, 2), _f((2, 8, 3, 3), dtype, 3)

    def run(t):
        xs = [t(v).requires_grad_() for v in (x, w, b)]
        y = F.group_norm(*xs[:1], 4, *xs[1:])
        return _cat(y, *torch.autograd.grad(y, xs, t(g)))

    expected = run(lambda v: v)
    run(lambda v: v.to("foo"))
    before = foo_rs.python_kernel_calls()
    actual = run(lambda v: v.to("foo"))
    assert not foo_rs.python_kernel_calls() - before
    assert actual.dtype == dtype
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-2, atol=1e-2)


def test_group_norm_backward_channels_last(no_fallback):
    """native_group_norm_backward of a channels-last input, called directly:
    Rust, grad_input channels-last as CPU gives it, and the values of CPU's
    contiguous computation (torch 2.13's CPU kernel gets channels-last wrong:
    up to 9.5 away from its own contiguous result; 2.15's agrees with it)."""

    def run(x, t):
        w = t(_f((6,), seed=1))
        _, mean, rstd = A.native_group_norm(x, w, None, 2, 6, 9, 2, 1e-5)
        g = t(_f((2, 6, 3, 3), seed=3))
        return A.native_group_norm_backward(g, x, mean, rstd, w, 2, 6, 9, 2, [True, False, True])

    expected = run(_f((2, 6, 3, 3)), lambda v: v)
    x = _f((2, 6, 3, 3)).to("foo").contiguous(memory_format=torch.channels_last)
    run(x, lambda v: v.to("foo"))
    before = foo_rs.python_kernel_calls()
    gi, gw, gb = run(x, lambda v: v.to("foo"))
    assert not foo_rs.python_kernel_calls() - before
    assert gw is None and gi.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(gi.cpu(), expected[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(gb.cpu(), expected[2], rtol=1e-4, atol=1e-4)


def test_group_norm_edges_match_cpu(no_fallback):
    """Empty batches, zero channels or spatial extent (torch >= 2.14 raises,
    2.13 gives NaN rstd: foo does what its torch's CPU does), mixed precision
    (ATen's composite), strided weights, and CPU's errors for bad groups and
    shapes, with messages naming foo."""
    x = _f((2, 6, 4))
    for f in (
        lambda t: _cat(*A.native_group_norm(t(_f((0, 4, 3))), None, None, 0, 4, 3, 2, 1e-5)),
        lambda t: _cat(*A.native_group_norm(t(_f((2, 4, 0))), None, None, 2, 4, 0, 2, 1e-5)),
        lambda t: _cat(*A.native_group_norm(t(_f((2, 0, 3))), None, None, 2, 0, 3, 2, 1e-5)),
        lambda t: F.group_norm(t(_f((2, 4, 3), torch.bfloat16)), 2, t(_f((4,), seed=1)), None).float(),
        lambda t: F.group_norm(t(_f((2, 4, 3))), 2, t(_f((8,), seed=1))[::2], t(_f((4,), seed=2))),
        lambda t: A.native_group_norm(t(x), None, None, 2, 6, 4, 4, 1e-5),
        lambda t: A.native_group_norm(t(x), None, None, 2, 6, 4, 0, 1e-5),
        lambda t: A.native_group_norm(t(x), t(torch.ones(5)), None, 2, 6, 4, 3, 1e-5),
        lambda t: A.native_group_norm(t(x), None, t(torch.ones(2, 3)), 2, 6, 4, 3, 1e-5),
    ):
        try:
            expected = f(lambda v: v)
        except Exception as e:
            with pytest.raises(type(e), match="foo"):
                f(lambda v: v.to("foo"))
        else:
            torch.testing.assert_close(f(lambda v: v.to("foo")).cpu(), expected, rtol=2e-2, atol=2e-2, equal_nan=True)


def test_bad_arguments_raise_cpu_errors_naming_foo(no_fallback):
    """What the native path does not take reaches the Python kernels, which
    raise CPU's exception types with messages that name foo."""
    x = _f((2, 3, 5, 5))
    fx = x.to("foo")
    with pytest.raises(RuntimeError, match=r"torch\.foo\.FloatTensor"):
        F.conv2d(fx, _f((2, 3, 3, 3), torch.float64).to("foo"))
    with pytest.raises(RuntimeError, match=r"\(on foo\)"):
        A.native_batch_norm(fx, None, None, None, None, False, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match=r"\(on foo\)"):
        A.native_batch_norm(fx, torch.ones(4, device="foo"), None, None, None, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match=r"\(on foo\)"):
        A.native_batch_norm(fx[:0], None, None, None, None, True, 0.1, 1e-5)
    with pytest.raises(ValueError, match=r"\(on foo\)"):
        A.native_batch_norm(fx, None, None, torch.zeros(3, device="foo"), None, True, 0.1, 1e-5)
    for f in (
        lambda t: A.native_batch_norm(t(x), t(torch.ones(3, dtype=torch.float64)), None, None, None, True, 0.1, 1e-5),
        lambda t: A.native_batch_norm(t(x.int()), None, None, None, None, True, 0.1, 1e-5),
        lambda t: A.hardswish(t(torch.ones(3, dtype=torch.int64))),
    ):
        with pytest.raises(Exception) as cpu:
            f(lambda v: v)
        with pytest.raises(type(cpu.value), match="foo"):
            f(lambda v: v.to("foo"))


class _Block(torch.nn.Module):
    """A resnet basic block and a mobilenet_v3 inverted residual in one: conv,
    batch norm, relu, depthwise conv, hardswish, squeeze-excitation (hardsigmoid)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.se1 = torch.nn.Conv2d(8, 4, 1)
        self.se2 = torch.nn.Conv2d(4, 8, 1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        z = F.hardswish(self.bn2(self.dw(y)))
        s = F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(z, 1)))))
        out = F.relu(z * s + y)
        return self.fc(out.mean((2, 3)))


def test_cnn_training_step_runs_no_python(no_fallback):
    """A conv/batch-norm/hardswish block's SGD training step: no Python kernel
    on foo once warm, the same loss, gradients and running statistics as CPU."""
    torch.manual_seed(0)
    model = _Block()
    fmodel = _Block()
    fmodel.load_state_dict(model.state_dict())
    fmodel.to("foo")
    x, y = torch.randn(4, 3, 12, 12), torch.randint(0, 5, (4,))
    fx, fy = x.to("foo"), y.to("foo")

    def make(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

        def step(a, b):
            opt.zero_grad()
            loss = F.cross_entropy(m(a), b)
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    step, fstep = make(model), make(fmodel)
    torch.testing.assert_close(fstep(fx, fy).cpu(), step(x, y))
    before = foo_rs.python_kernel_calls()
    floss = fstep(fx, fy)
    ran = foo_rs.python_kernel_calls() - before
    assert not ran, f"the training step ran Python kernels: {dict(ran)}"
    torch.testing.assert_close(floss.cpu(), step(x, y), rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(fmodel.state_dict().items(), model.state_dict().values()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def test_inplace_dropout_draws_natively_from_the_generator(no_fallback):
    """bernoulli_(p) (in-place dropout, mobilenet_v3's classifier) runs no Python
    kernel and draws exactly what the Python kernel draws after the same seed."""
    x = torch.empty(3, 50, device="foo")
    torch.manual_seed(7)
    torch.ops.foo_slow.bernoulli__float(x, 0.3)
    python = x.cpu()
    torch.manual_seed(7)
    before = foo_rs.python_kernel_calls()
    x.bernoulli_(0.3)
    y = F.dropout(torch.ones(4, 40, device="foo"), 0.5, training=True, inplace=True)
    ran = foo_rs.python_kernel_calls() - before
    assert not ran, f"ran Python kernels: {dict(ran)}"
    torch.testing.assert_close(x.cpu(), python)
    assert set(python.unique().tolist()) == {0.0, 1.0}
    assert set(y.cpu().unique().tolist()) == {0.0, 2.0}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_hardsigmoid_backward_is_cpus_bit_for_bit(no_fallback, dtype):
    """ATen's slope is the float constant `1.0f / 6.0f` in every dtype, float64
    too (3e-8 off 1/6); foo's is the same, so float64 training runs of
    mobilenet_v3 stay CPU's step after step (tests/test_real_models.py)."""
    x = torch.linspace(-4, 4, 97, dtype=torch.float64).to(dtype)
    g = torch.linspace(-1, 3, 97, dtype=torch.float64).to(dtype)
    cpu = torch.ops.aten.hardsigmoid_backward(g, x)
    foo = torch.ops.aten.hardsigmoid_backward(g.to("foo"), x.to("foo"))
    assert foo.dtype == dtype
    assert torch.equal(foo.cpu(), cpu)
