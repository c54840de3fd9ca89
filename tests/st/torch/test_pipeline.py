# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: pipeline schedules on 2 gloo ranks against the same model on one process.

Every schedule trains 3 SGD steps, each accumulating gradients over 2 ``step()`` calls (different
batches), with an odd number of microbatches where the schedule allows it. The model has a weight
used at two sites around another layer (the pytorch#180952 pattern), a stage with two outputs and a
stage with two inputs. Each rank compares the loss of every call, the gradient of every parameter of
its stages and the parameters after every optimizer step with a single-process reference (the whole
model on the whole batch, computed in the same process). fp32, ``rtol=atol=1e-5``.
"""
import pytest

from hyper_parallel.testing import multi_rank

TOL = dict(rtol=1e-5, atol=1e-5)


def make_blocks(n, d=8, seed=0):
    """``n`` blocks; block i takes 1 input (2 when the previous block returns 2 outputs)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        """tanh(lin(x)), lin reused around ``other`` on even blocks, two outputs on block 1."""

        def __init__(self, i):
            super().__init__()
            self.i = i
            self.lin = nn.Linear(d, d)
            self.other = nn.Linear(d, d)

        def forward(self, *xs):
            x = xs[0] if len(xs) == 1 else xs[0] + 0.5 * xs[1]
            h = torch.tanh(self.lin(x))
            if self.i % 2 == 0:
                h = self.lin(torch.tanh(self.other(h)))  # one weight at two sites on one path
            if self.i == 1 and n > 2:
                return h, torch.sigmoid(self.other(x))  # a multi-output stage
            return h

    torch.manual_seed(seed)
    return nn.ModuleList(Block(i) for i in range(n))


def reference_forward(blocks, x):
    """The whole model on one process."""
    out = (x,)
    for b in blocks:
        y = b(*out)
        out = y if isinstance(y, tuple) else (y,)
    return out[0]


def batch(k, n=6, d=8):
    """Global batch number ``k``."""
    import torch
    g = torch.Generator().manual_seed(100 + k)
    return torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)


def run_parity(name, m, v, overlap_p2p=False, n_rows=6, make=make_blocks, d=8, **sched_kwargs):
    """3 optimizer steps x 2 accumulated step() calls of schedule ``name`` vs the reference (``make(n, d)``
    builds the blocks; ``sched_kwargs`` go to the schedule class). Returns rank's lowered list; the
    schedule is ``run_parity.last``."""
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel.pipeline as pp
    rank, world = dist.get_rank(), dist.get_world_size()
    n_stages = world * v
    blocks = make(n_stages, d)
    ref = copy.deepcopy(blocks)
    placement = pp.generate_schedule(name, world, m, v).stage_to_rank
    mine = [s for s in range(n_stages) if placement[s] == rank]
    stages = [pp.PipelineStage(blocks[s], s, n_stages, "cpu") for s in mine]
    sched = pp.get_schedule_class(name)(stages if v > 1 else stages[0], m, loss_fn=torch.nn.functional.mse_loss,
                                        overlap_p2p=overlap_p2p, **sched_kwargs)
    run_parity.last = sched
    opt = torch.optim.SGD([p for s in mine for p in blocks[s].parameters()], lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        for micro in range(2):
            x, y = batch(2 * step + micro, n_rows, d)
            losses = []
            out = sched.step(x if 0 in mine else None, target=y if n_stages - 1 in mine else None, losses=losses)
            ref_out = reference_forward(ref, x)
            ref_loss = torch.nn.functional.mse_loss(ref_out, y)
            ref_loss.backward()
            if n_stages - 1 in mine:
                torch.testing.assert_close(sum(losses) / m, ref_loss.detach(), **TOL)
                torch.testing.assert_close(out, ref_out.detach(), **TOL)
            else:
                assert out is None and losses == []
        for s in mine:
            for (pname, p), q in zip(blocks[s].named_parameters(), ref[s].parameters()):
                if q.grad is None:  # unused in this model size (the reference has none either)
                    assert p.grad is None, f"stage {s} {pname}"
                    continue
                assert p.grad is not None, f"stage {s} {pname}: no gradient"
                torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda t, s=s, n=pname: f"stage {s} {n}: {t}")
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
        for s in mine:
            for p, q in zip(blocks[s].parameters(), ref[s].parameters()):
                torch.testing.assert_close(p, q, **TOL)
    return [str(a) for a in sched.pipeline_order_with_comms[rank]]


@pytest.mark.parametrize("name,m,v", [
    ("GPipe", 3, 1), ("GPipe", 1, 1), ("1F1B", 3, 1), ("1F1B", 1, 1), ("Interleaved1F1B", 3, 2),
    ("LoopedBFS", 3, 2), ("InterleavedZeroBubble", 3, 2), ("InterleavedZeroBubble", 3, 1),
    ("ZBVZeroBubble", 3, 2), ("DualPipeV", 5, 2),
])
@multi_rank(world_size=2, timeout=240)
def test_schedule_matches_one_process(name, m, v):
    steps = run_parity(name, m, v, n_rows=2 * m)
    assert any(a.endswith("REDUCE_GRAD") for a in steps) and any("F" in a for a in steps)


@multi_rank(world_size=2, timeout=240)
def test_overlap_p2p_prefetch_matches_one_process():
    run_parity("1F1B", 4, 1, overlap_p2p=True, n_rows=8)
    run_parity("ZBVZeroBubble", 4, 2, overlap_p2p=True, n_rows=8)


def _error_of(fn):
    try:
        fn()
    except (ValueError, TypeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _case_bad_input():
    import torch
    import torch.distributed as dist
    import hyper_parallel.pipeline as pp
    rank = dist.get_rank()
    lin = torch.nn.Linear(4, 4)
    out = {
        "stage_index": _error_of(lambda: pp.PipelineStage(lin, 5 if rank == 1 else 0, 2, "cpu")),
        "num_stages": _error_of(lambda: pp.PipelineStage(lin, rank, 2 + rank, "cpu")),
        "n_microbatches": _error_of(lambda: pp.ScheduleDualPipeV(
            [pp.PipelineStage(torch.nn.Linear(4, 4), s, 4, "cpu") for s in (rank, 3 - rank)], 2)),
    }
    stage = pp.PipelineStage(lin, rank, 2, "cpu")
    mismatched = pp.Schedule1F1B(stage, 2 if rank == 0 else 4, loss_fn=torch.nn.functional.mse_loss)
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    out["mismatch"] = _error_of(lambda: mismatched.step(x if rank == 0 else None, target=y if rank else None))
    sched = pp.Schedule1F1B(stage, 3, loss_fn=torch.nn.functional.mse_loss)
    out["batch"] = _error_of(lambda: sched.step(x if rank == 0 else None, target=y[:6] if rank else None))
    out["target"] = _error_of(lambda: sched.step(x[:6] if rank == 0 else None, target=y[:7] if rank else None))
    x6, y6 = torch.randn(6, 4), torch.randn(6, 4)
    sched.step(x6 if rank == 0 else None, target=y6 if rank else None)  # the pipeline still works after
    return out


def test_bad_input_raises_the_same_clear_error_on_every_rank():
    from hyper_parallel.testing import get_pool
    results = get_pool(2).run(_case_bad_input, timeout=120)
    for r, out in enumerate(results):
        assert "PipelineStage(stage_index): rank 1 got stage_index=5, out of range for num_stages=2" in \
            out["stage_index"], (r, out)
        assert "ranks disagree on the stage count (rank 0: 2, rank 1: 3)" in out["num_stages"], (r, out)
        assert "DualPipeV: n_microbatches=2 with 4 stages on 2 ranks is not allowed" in out["n_microbatches"]
        assert "different schedules or microbatch counts (rank 0: 1F1B with n_microbatches=2, rank 1: 1F1B with " \
            "n_microbatches=4)" in out["mismatch"], (r, out)
        assert "rank 0 rejected stage 0's input batch: batch size 8 is not divisible by n_microbatches=3" in \
            out["batch"], (r, out)
        assert "rank 1 rejected the last stage's target: batch size 7 is not divisible by n_microbatches=3" in \
            out["target"], (r, out)


def _case_rank_dies_mid_step():
    import os
    import time
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    import hyper_parallel.pipeline as pp
    rank = dist.get_rank()

    class DiesOnSecond(torch.nn.Module):
        """Rank 1's stage exits the process on the second microbatch of the second step."""

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if rank == 1 and self.calls == 7:  # call 1 is shape inference, 2-5 the first step
                os._exit(9)
            return self.lin(x)

    stage = pp.PipelineStage(DiesOnSecond(), rank, 2, "cpu")
    sched = pp.Schedule1F1B(stage, 4, loss_fn=torch.nn.functional.mse_loss)
    sched.step(torch.randn(8, 4) if rank == 0 else None, target=torch.randn(8, 4) if rank else None)
    dist.barrier()  # both ranks warm (imports, shape inference): the timing below is the failure only
    started = time.monotonic()
    try:
        sched.step(torch.randn(8, 4) if rank == 0 else None, target=torch.randn(8, 4) if rank else None)
    except hp.CollectiveError as exc:
        raise hp.CollectiveError(f"{exc} [after {time.monotonic() - started:.1f} s]") from exc


def test_rank_killed_mid_step_raises_collective_error():
    """Rank 1 exits inside step 2; rank 0 must raise a CollectiveError naming the lost peer.

    Deterministic by construction: gloo reports a dead peer at once ("Connection closed/reset by peer"
    on the pending or next point-to-point op), so detection never waits for the collective timeout;
    the pool runs with the default timeout (30 s), which legitimate waits on a loaded machine never
    reach. (With a 3 s timeout this test was flaky: under load a *live* peer could take over 3 s, the
    survivor timed out early, in the wrong place, and the "killed" rank saw its peer leave first.)
    The harness still fails the case if the survivor does not report within timeout + grace after the
    death, and the message must be the peer-loss error, not a timeout."""
    from hyper_parallel.testing import MultiRankError, get_pool
    pool = get_pool(2)
    with pytest.raises(MultiRankError) as info:
        pool.run(_case_rank_dies_mid_step, case="pipeline-rank-death", timeout=120)
    err = info.value
    assert err.died == {1: 9} and list(err.failures) == [0], str(err)
    survivor = err.failures[0]
    assert "CollectiveError" in survivor and "rank 1 (tag" in survivor and "a peer rank may have died" in survivor, \
        survivor
    assert "by peer" in survivor and "Timed out" not in survivor, survivor  # the death was seen, not a timer
    seconds = float(survivor.rsplit("[after ", 1)[1].split(" s]")[0])
    print(f"survivor raised after {seconds} s (collective timeout {pool.collective_timeout:g} s)")


@multi_rank(world_size=2, timeout=240)
def test_llama_pipeline_split_matches_one_process():
    """pipeline_llama (TorchTitan split, first/last stage lighter) with ZBV: 4 stages on 2 ranks."""
    import copy
    import torch
    import torch.distributed as dist
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM, pipeline_llama
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=4))
    ref = copy.deepcopy(model)
    sched, parts = pipeline_llama(model, schedule="ZBVZeroBubble", n_microbatches=2)
    names = [sorted(n for n, _ in p.named_parameters()) for p in parts]
    g = torch.Generator().manual_seed(3)
    ids, labels = torch.randint(0, 256, (4, 16), generator=g), torch.randint(0, 256, (4, 16), generator=g)
    losses = []
    sched.step(ids if rank == 0 else None, target=labels if rank == 0 else None, losses=losses)
    ref_loss = ref.loss(ref(ids), labels)
    ref_loss.backward()
    ref_params = dict(ref.named_parameters())
    if rank == 0:  # the V placement puts stages 0 and 3 (embedding and head) on rank 0
        torch.testing.assert_close(sum(losses) / 2, ref_loss.detach(), **TOL)
        assert "model.embed_tokens.weight" in names[0] and "lm_head.weight" in names[1]
    for part in parts:
        for n, p in part.named_parameters():
            torch.testing.assert_close(p.grad, ref_params[n].grad, **TOL, msg=lambda t, n=n: f"{n}: {t}")
    every = [None] * 2
    dist.all_gather_object(every, sorted(n for nm in names for n in nm))
    assert sorted(every[0] + every[1]) == sorted(ref_params)


@multi_rank(world_size=2, timeout=240)
def test_tied_embeddings_across_first_and_last_stage():
    """Embedding on stage 0, output head = the same weight on stage 1: summed gradients, equal updates."""
    import torch
    import torch.distributed as dist
    from torch import nn
    import hyper_parallel.pipeline as pp
    rank = dist.get_rank()
    torch.manual_seed(0)
    emb = nn.Embedding(16, 8)
    mid = nn.Linear(8, 8)

    class First(nn.Module):
        """Embedding + a linear."""

        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(16, 8)
            self.lin = nn.Linear(8, 8)

        def forward(self, ids):
            return torch.tanh(self.lin(self.emb(ids)))

    class Last(nn.Module):
        """Head tied with the embedding."""

        def __init__(self):
            super().__init__()
            self.head = nn.Parameter(torch.empty(16, 8))

        def forward(self, h):
            return h @ self.head.t()

    first, last = First(), Last()
    with torch.no_grad():
        first.emb.weight.copy_(emb.weight)
        first.lin.load_state_dict(mid.state_dict())
        last.head.copy_(emb.weight)
    mod = first if rank == 0 else last
    stage = pp.PipelineStage(mod, rank, 2, "cpu")
    stage.tie_parameters([first.emb.weight] if rank == 0 else [last.head], None)
    loss_fn = lambda logits, y: nn.functional.cross_entropy(logits.reshape(-1, 16), y.reshape(-1))  # noqa: E731
    sched = pp.Schedule1F1B(stage, 3, loss_fn=loss_fn)
    opt = torch.optim.SGD(mod.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(list(emb.parameters()) + list(mid.parameters()), lr=0.5)
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        ids, y = torch.randint(0, 16, (6, 5), generator=g), torch.randint(0, 16, (6, 5), generator=g)
        sched.step(ids if rank == 0 else None, target=y if rank else None)
        ref_loss = loss_fn(torch.tanh(mid(emb(ids))) @ emb.weight.t(), y)
        ref_loss.backward()
        tied = first.emb.weight if rank == 0 else last.head
        torch.testing.assert_close(tied.grad, emb.weight.grad, **TOL)
        for o in (opt, ref_opt):
            o.step()
            o.zero_grad()
        torch.testing.assert_close(tied, emb.weight, **TOL)


@multi_rank(world_size=2, timeout=240)
def test_torch_step_keywords_return_outputs_and_loss_kwargs():
    """step(return_outputs=False, loss_kwargs=...) as in torch 2.13; torch's schedule knobs accepted."""
    import copy
    import torch
    import torch.distributed as dist
    import hyper_parallel.pipeline as pp
    rank = dist.get_rank()
    blocks = make_blocks(2)
    ref = copy.deepcopy(blocks)
    stage = pp.PipelineStage(blocks[rank], rank, 2, "cpu")
    sched = pp.ScheduleInterleaved1F1B([stage], 2, loss_fn=lambda o, t, w=1.0: w * torch.nn.functional.mse_loss(o, t),
                                       defer_pp_recv=True)
    x, y = batch(0, 4)
    losses = []
    out = sched.step(x if rank == 0 else None, target=y if rank else None, losses=losses, return_outputs=False,
                     loss_kwargs={"w": 3.0})
    ref_loss = 3.0 * torch.nn.functional.mse_loss(reference_forward(ref, x), y)
    ref_loss.backward()
    assert out is None
    if rank == 1:
        torch.testing.assert_close(sum(losses) / 2, ref_loss.detach(), **TOL)
    for p, q in zip(blocks[rank].parameters(), ref[rank].parameters()):
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, **TOL)
    try:
        pp.ScheduleGPipe(stage, 2, backward_requires_autograd=False)
    except ValueError as exc:
        assert "custom backward functions are not supported" in str(exc)
    else:
        raise AssertionError("backward_requires_autograd=False was accepted")


@multi_rank(world_size=2, timeout=240)
def test_eval_forward_only_and_output_merge_spec():
    """eval(): forward only (outputs and losses equal one process, no gradient anywhere, training after it
    unchanged); output_merge_spec: concatenate / reduce (torch's sum_reducer) / same-in-every-microbatch."""
    import copy
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.pipelining.microbatch import sum_reducer
    import hyper_parallel.pipeline as pp
    rank = dist.get_rank()

    class Head(nn.Module):
        """Three outputs: rows, their total, a constant."""

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.register_buffer("const", torch.tensor([1.5, -2.0]))

        def forward(self, h):
            y = self.lin(h)
            return y, y.sum(), self.const

    torch.manual_seed(0)
    parts = [nn.Sequential(nn.Linear(8, 8), nn.Tanh()), Head()]
    ref = copy.deepcopy(parts)
    stage = pp.PipelineStage(parts[rank], rank, 2, "cpu")
    loss_fn = lambda out, t: torch.nn.functional.mse_loss(out[0], t)  # noqa: E731
    sched = pp.Schedule1F1B(stage, 3, loss_fn=loss_fn, output_merge_spec=(pp.BatchDimSpec(0), sum_reducer, None))
    x, y = batch(0, 6)
    ref_y, ref_sum, const = ref[1](ref[0](x))
    for tgt in (y, None):
        losses = []
        out = sched.eval(x if rank == 0 else None, target=tgt if rank else None, losses=losses)
        assert all(p.grad is None for p in parts[rank].parameters())
        if rank == 1:
            torch.testing.assert_close(out[0], ref_y.detach(), **TOL)
            torch.testing.assert_close(out[1], ref_sum.detach(), **TOL)
            torch.testing.assert_close(out[2], const)
            want = [loss_fn((ref_y[2 * k:2 * k + 2],), y[2 * k:2 * k + 2]).detach() for k in range(3)]
            if tgt is None:
                assert losses == []
            else:
                torch.testing.assert_close(losses, want, **TOL)
    sched.step(x if rank == 0 else None, target=y if rank else None)
    loss_fn((ref_y,), y).backward()
    for p, q in zip(parts[rank].parameters(), ref[rank].parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL)
    # a V schedule with I/W split: forward-only lists keep each rank's forward order and validate
    blocks = make_blocks(4)
    mine = [s for s in range(4) if (0, 1, 1, 0)[s] == rank]
    zbv = pp.ScheduleZBVZeroBubble([pp.PipelineStage(blocks[s], s, 4, "cpu") for s in mine], 2,
                                   loss_fn=torch.nn.functional.mse_loss)
    out = zbv.eval(x if rank == 0 else None)
    if rank == 0:
        torch.testing.assert_close(out, reference_forward(blocks, x).detach(), **TOL)
    assert all(p.grad is None for s in mine for p in blocks[s].parameters())
    assert not any(t in str(a) for a in zbv._forward_runner().steps for t in ("B", "I", "W")), \
        zbv._forward_runner().steps  # pylint: disable=protected-access
