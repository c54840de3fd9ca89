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


@multi_rank(world_size=2, timeout=300)
def test_tp_training_with_mc2_overlap_equals_without_and_one_process():
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    rank, p = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.SiLU(), torch.nn.Linear(16, 8))
    xs = [torch.randn(2, 6, 8) for _ in range(3)]
    ws = [torch.randn(2, 6, 8) for _ in range(3)]
    mesh = hp.init_device_mesh("cpu", (p,))

    def tp_model(overlap):
        m = copy.deepcopy(base)
        parallelize_module(m, mesh, {"0": ColwiseParallel(input_layouts=Shard(1), overlap=overlap),
                                     "2": RowwiseParallel(output_layouts=Shard(1), overlap=overlap)})
        return m

    models = {"one": copy.deepcopy(base), "tp": tp_model(None), "mc2": tp_model("mc2")}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, m in models.items()}
    for x, w in zip(xs, ws):
        losses = {}
        for k, m in models.items():
            opts[k].zero_grad()
            if k == "one":
                loss = (m(x) * w).sum()
            else:  # sequence-parallel input and output: this rank's positions; the loss is the sum over ranks
                loss = (m(x.chunk(p, 1)[rank]) * w.chunk(p, 1)[rank]).sum()
            loss.backward()
            opts[k].step()
            if k != "one":
                loss = loss.detach().clone()
                dist.all_reduce(loss)
            losses[k] = loss.item()
        assert abs(losses["mc2"] - losses["one"]) < 1e-4 and abs(losses["tp"] - losses["one"]) < 1e-4, losses
    for (name, p1), p_tp, p_mc2 in zip(models["one"].named_parameters(), models["tp"].parameters(),
                                       models["mc2"].parameters()):
        _close(p_mc2.full_tensor(), p1.detach(), f"mc2 {name}")
        _close(p_mc2.full_tensor(), p_tp.full_tensor(), f"mc2 vs tp {name}")
    try:
        RowwiseParallel(overlap="mc2").apply(torch.nn.Linear(4, 4), mesh)
    except ValueError as exc:
        assert "sequence parallel" in str(exc)
    else:
        raise AssertionError("RowwiseParallel(overlap='mc2') without a Shard output must be refused")
