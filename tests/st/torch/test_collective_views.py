# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: tensors with a lazy conjugate or negative bit (``torch.fft.ifft`` of a real tensor returns a conjugate
view) go through every torch collective with their values, not their raw storage."""
from hyper_parallel.testing import get_pool


def _case_views_through_collectives():
    import torch
    import torch.distributed as dist
    from hyper_parallel.platform import get_platform
    from hyper_parallel.platform.base import P2POp
    plat = get_platform("torch")
    group = dist.group.WORLD
    rank = dist.get_rank()
    base = torch.arange(8, dtype=torch.float32).reshape(4, 2) + 1j * (rank + 1)
    plain = base.clone()
    errors = []

    def check(name, got, want):
        if not torch.equal(got, want):
            errors.append(f"{name}: {got.tolist()} != {want.tolist()}")

    for kind, view, value in (("conj", base.conj(), plain.conj()), ("neg", torch._neg_view(base), -plain)):
        assert view.is_conj() or view.is_neg()
        others = [value.resolve_conj().resolve_neg()]
        gathered = plat.all_gather(view, group, 0, [4, 4], rank)
        ref = [torch.empty_like(others[0]) for _ in range(2)]
        dist.all_gather(ref, others[0].contiguous(), group=group)
        check(f"{kind} all_gather", gathered, torch.cat(ref, 0))
        check(f"{kind} all_reduce", plat.all_reduce(view, "sum", group), sum(ref))
        check(f"{kind} reduce_scatter", plat.reduce_scatter(view, "sum", group, 0, [2, 2], rank),
              sum(ref)[2 * rank:2 * rank + 2])
        target = (plain.conj() if kind == "conj" else -plain).clone()
        bview = target.clone().conj() if kind == "conj" else torch._neg_view(target.clone())
        out = plat.broadcast(bview, 0, group)
        check(f"{kind} broadcast", out.resolve_conj().resolve_neg(), ref[0].conj() if kind == "conj" else -ref[0])
        if rank == 0:
            ops = [P2POp("send", view, 1, group, 3), P2POp("recv", torch.zeros_like(plain), 1, group, 4)]
        else:
            ops = [P2POp("recv", torch.zeros_like(plain), 0, group, 3), P2POp("send", view, 0, group, 4)]
        got = [h.wait() for h in plat.batch_isend_irecv(ops)]
        check(f"{kind} p2p", next(g for g in got if g is not None), ref[1 - rank])
    return errors


def test_conjugate_and_negative_views_move_their_values():
    assert get_pool(2).run(_case_views_through_collectives, timeout=60) == [[], []]
