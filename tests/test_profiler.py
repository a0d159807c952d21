"""foo_rs.profiler.op_profile: per-op counts, time and route."""

import warnings

import torch

import foo_rs
from foo_rs.profiler import op_profile


def test_profile_counts_ops_and_routes():
    x = torch.ones(8, device="foo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", foo_rs.FooFallbackWarning)
        with op_profile() as prof:
            x.fill_(2.0)
            x.fill_(3.0)
            lib = torch.library.Library("foo_prof", "DEF")
            lib.define("twice(Tensor x) -> Tensor")
            lib.impl("twice", lambda t: t * 2, "CPU")
            torch.ops.foo_prof.twice(x)  # no foo kernel: falls back
    rows = {r[0]: r for r in prof.rows()}
    assert rows["aten::fill_.Scalar"][1] == 2
    assert rows["aten::fill_.Scalar"][4] == "native"
    assert rows["foo_prof::twice"][4] == "fallback"
    assert "| aten::fill_.Scalar | 2 |" in prof.table()
