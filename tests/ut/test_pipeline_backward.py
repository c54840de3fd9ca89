# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the dx/dw split (``backward_input`` then ``backward_weight``) equals one full backward.

Graphs covered: a weight used at two sites on one path, directly and around another layer (the
pytorch#180952 patterns; torch 2.13's own split fails on the latter, shown below as the regression
reference), three uses in a chain, crossing uses, multi-output intermediates (pytorch#170277), a
parameter reaching the output without passing the input path, and stages whose input needs no
gradient (the first stage: everything happens in W)."""
import pytest
import torch
from torch import nn

from hyper_parallel.pipeline._torch.backward import backward_full, backward_input, backward_weight

CASES = {
    "reused_around_tanh": lambda m, x: m.a(torch.tanh(m.a(x))),
    "reused_around_other_layer": lambda m, x: m.a(m.b(m.a(x))),
    "matmul_chain_reuse": lambda m, x: x @ m.a.weight @ m.b.weight @ m.a.weight,
    "crossing_uses": lambda m, x: m.b(m.a(x)) * m.a(m.b(x)),
    "three_uses": lambda m, x: m.a(m.a(m.a(x))),
    "multi_output_intermediate": lambda m, x: (lambda u: m.a(u[0]) * u[1])(m.b(x).chunk(2, dim=0)),
    "weight_also_summed": lambda m, x: m.a(x) @ m.a.weight + m.a.weight.sum(),
    "param_straight_to_output": lambda m, x: m.a(x) + m.b.bias,
}


class Two(nn.Module):
    """Two linears and a forward chosen per case."""

    def __init__(self, fn):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.fn = fn

    def forward(self, x):
        return self.fn(self, x)


def _reference(fn, x_requires_grad):
    torch.manual_seed(0)
    m = Two(fn)
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1), requires_grad=x_requires_grad)
    out = m(x)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    wrt = ([x] if x_requires_grad else []) + list(m.parameters())
    return m, x, g, torch.autograd.grad(out, wrt, g, allow_unused=True)


@pytest.mark.parametrize("x_requires_grad", [True, False])
@pytest.mark.parametrize("name", sorted(CASES))
def test_split_equals_full_backward(name, x_requires_grad):
    m, x, g, ref = _reference(CASES[name], x_requires_grad)
    x2 = x.detach().clone().requires_grad_(x_requires_grad)
    out = m(x2)
    dx, plan = backward_input([out], [g], [x2], list(m.parameters()))
    assert all(p.grad is None for p in m.parameters())  # the input pass accumulates no weight gradient
    backward_weight(plan)
    if x_requires_grad:
        torch.testing.assert_close(dx[0], ref[0], rtol=0, atol=1e-6)
    for p, r in zip(m.parameters(), ref[1:] if x_requires_grad else ref):
        if r is None:
            assert p.grad is None
        else:
            torch.testing.assert_close(p.grad, r, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_full_backward_helper(name):
    m, x, g, ref = _reference(CASES[name], True)
    x2 = x.detach().clone().requires_grad_()
    dx = backward_full([m(x2)], [g], [x2], list(m.parameters()))
    torch.testing.assert_close(dx[0], ref[0], rtol=0, atol=1e-6)
    assert x2.grad is None  # handed back, not left on the input
    for p, r in zip(m.parameters(), ref[1:]):
        assert (p.grad is None) == (r is None)


def test_torch_2_13_split_fails_where_ours_works():
    """The regression reference: torch 2.13's split cannot run a weight reused around another layer."""
    from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight
    torch.manual_seed(0)
    m = Two(CASES["reused_around_other_layer"])
    x = torch.randn(4, 4, requires_grad=True)
    _, groups = stage_backward_input([m(x).sum()], None, [x], m.parameters())
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        stage_backward_weight(m.parameters(), groups)
