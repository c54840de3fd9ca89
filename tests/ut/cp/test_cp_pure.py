# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (no processes, no framework): CP load-balancing index maps and inverses, LSE merge math (numpy),
block planning, work balance, byte formulas and the ``method="auto"`` rule."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyper_parallel.cp.blocks import pair_count, plan_block, visible_pairs
from hyper_parallel.cp.cost import (allgather_bytes, alltoall_bytes, attention_work, method_bytes, ring_bytes,
                                    ring_overlap_min_chunk, ulysses_kv_repeat)
from hyper_parallel.cp.load_balance import (Contiguous, HeadTail, PerDocumentHeadTail, SeqLayout, SequenceLengthError,
                                            make_load_balancer)
from hyper_parallel.cp.merge import empty_partial, merge_all, merge_into, merge_partials
from hyper_parallel.cp.select import select_method


def test_import_pulls_no_framework():
    code = ("import sys, hyper_parallel.cp, hyper_parallel.cp.cost, hyper_parallel.cp.merge; "
            "bad = [m for m in ('torch', 'mindspore') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_mindspore_meshes_go_to_the_mindspore_cp_and_styles_are_refused_clearly():
    from hyper_parallel.cp import ContextParallel, context_parallel
    from hyper_parallel.cp.api import _impl

    class MindSporeMesh:  # what the styles and context managers look at: the mesh's backend
        platform = "mindspore"
        ndim = 1

    with pytest.raises(RuntimeError, match="module styles are implemented for the torch backend only"):
        ContextParallel().apply(None, MindSporeMesh())
    with pytest.raises(ValueError, match="async_op=True.*synchronous"):
        context_parallel(MindSporeMesh(), async_op=True)
    assert _impl(MindSporeMesh()).__name__ == "hyper_parallel.cp._mindspore.attention"


# ------------------------------------------------------------------------------------------ index maps
def test_headtail_layout_by_hand():
    lay = HeadTail().layout(16, 2)
    assert lay.positions(0) == [0, 1, 2, 3, 12, 13, 14, 15]
    assert lay.positions(1) == [4, 5, 6, 7, 8, 9, 10, 11]
    assert lay.gather_order() == [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 8, 9, 10, 11]
    assert lay.restore_order() == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 4, 5, 6, 7]
    assert Contiguous().layout(8, 4).positions(2) == [4, 5]


def test_per_document_layout_by_hand():
    lay = PerDocumentHeadTail([8, 4]).layout(12, 2)
    # doc 0: chunks of 2 -> rank0 {0,1,6,7}, rank1 {2,3,4,5}; doc 1 (offset 8): chunks of 1 -> rank0 {8,11}, rank1 {9,10}
    assert lay.positions(0) == [0, 1, 6, 7, 8, 11]
    assert lay.positions(1) == [2, 3, 4, 5, 9, 10]
    assert lay.is_sorted(0) and lay.is_sorted(1)


@settings(max_examples=60, deadline=None)
@given(cp=st.integers(1, 6), chunks=st.integers(1, 5), kind=st.sampled_from(["headtail", "none", "doc"]),
       docs=st.lists(st.integers(1, 3), min_size=1, max_size=4))
def test_layouts_partition_and_inverse(cp, chunks, kind, docs):
    if kind == "doc":
        lengths = [d * 2 * cp for d in docs]
        balancer, seq = PerDocumentHeadTail(lengths), sum(lengths)
    else:
        balancer = make_load_balancer(kind)
        seq = balancer.required_multiple(cp) * chunks
    lay = balancer.layout(seq, cp)
    gathered = lay.gather_order()
    assert sorted(gathered) == list(range(seq))
    restore = lay.restore_order()
    assert [gathered[restore[p]] for p in range(seq)] == list(range(seq))
    assert [restore[g] for g in gathered] == list(range(seq))
    assert lay.even and all(lay.is_sorted(r) for r in range(cp))
    assert sum(n for _, n in lay.sorted_runs()) == seq


def test_length_errors_name_the_tensor_and_multiple():
    with pytest.raises(SequenceLengthError, match=r"ids: sequence length 10 is not a positive multiple of 4 .*pad"):
        HeadTail().layout(10, 2, "ids")
    with pytest.raises(SequenceLengthError, match="multiple of 3"):
        Contiguous().layout(10, 3)
    with pytest.raises(SequenceLengthError, match="differs from the sum of the document lengths 12"):
        PerDocumentHeadTail([8, 4]).layout(16, 2)
    with pytest.raises(SequenceLengthError, match=r"documents \(index, length\) \[\(1, 6\)\]"):
        PerDocumentHeadTail([8, 6]).layout(14, 2)
    with pytest.raises(ValueError, match="load_balance: expected one of"):
        make_load_balancer("roundrobin")
    with pytest.raises(ValueError, match="do not partition"):
        SeqLayout(4, 2, (((0, 2),), ((1, 2),)))


# ------------------------------------------------------------------------------------------ LSE merge
def _attend(scores, values):
    """Reference softmax attention of one row set (numpy): (out, lse)."""
    lse = np.logaddexp.reduce(scores, axis=-1)
    with np.errstate(invalid="ignore"):
        p = np.exp(scores - lse[..., None])
    p = np.nan_to_num(p)
    return p @ values, lse


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), split=st.integers(1, 7), masked=st.booleans())
def test_merge_equals_attention_over_the_union(seed, split, masked):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(3, 8))
    values = rng.normal(size=(8, 5))
    if masked:
        scores[0, :split] = -np.inf  # row 0 sees nothing in block A
    out, lse = _attend(scores, values)
    a = _attend(scores[:, :split], values[:split])
    b = _attend(scores[:, split:], values[split:])
    m_out, m_lse = merge_partials(a[0], a[1], b[0], b[1], np)
    np.testing.assert_allclose(m_lse, lse, rtol=1e-12)
    np.testing.assert_allclose(m_out, out, rtol=1e-12, atol=1e-12)
    acc_out, acc_lse = np.zeros((3, 10)), np.full(3, -np.inf)  # in place, into views of a larger buffer
    for part in (a, b):
        merge_into(acc_out[:, 2:7], acc_lse, part[0], part[1], np)
    np.testing.assert_allclose(acc_out[:, 2:7], out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(acc_lse, lse, rtol=1e-12)
    assert np.all(acc_out[:, :2] == 0) and np.all(acc_out[:, 7:] == 0)


def test_merge_keeps_empty_rows_empty_and_merge_all_folds():
    out_like, lse_like = np.ones((2, 3)), np.zeros(2)
    e_out, e_lse = empty_partial(out_like, lse_like, np)
    o, l = merge_partials(e_out, e_lse, e_out, e_lse, np)
    assert np.all(o == 0) and np.all(np.isneginf(l))
    rng = np.random.default_rng(1)
    scores, values = rng.normal(size=(2, 9)), rng.normal(size=(9, 3))
    parts = [_attend(scores[:, i:i + 3], values[i:i + 3]) for i in (0, 3, 6)]
    o, l = merge_all([(e_out, e_lse)] + parts, np)
    ref_o, ref_l = _attend(scores, values)
    np.testing.assert_allclose(o, ref_o, rtol=1e-12)
    np.testing.assert_allclose(l, ref_l, rtol=1e-12)
    with pytest.raises(ValueError, match="at least one"):
        merge_all([], np)


# ------------------------------------------------------------------------------------------ block plans
def _positions(runs):
    return [p for s, n in runs for p in range(s, s + n)]


def _plan_pairs(q_runs, k_runs, causal):
    """Expand a plan into the set of (q position, k position) pairs it computes (with causal masking)."""
    qp, kp = _positions(q_runs), _positions(k_runs)
    pairs = []
    for t in plan_block(q_runs, k_runs, causal):
        keys = [kp[off + i] for off, n in t.k_segs for i in range(n)]
        for i in range(t.q_len):
            for j, key in enumerate(keys):
                if not t.causal or j <= i:
                    pairs.append((qp[t.q_off + i], key))
    return pairs


@settings(max_examples=60, deadline=None)
@given(cp=st.integers(1, 5), chunks=st.integers(1, 3), kind=st.sampled_from(["headtail", "none", "doc"]),
       causal=st.booleans())
def test_plans_compute_exactly_the_visible_pairs(cp, chunks, kind, causal):
    balancer = PerDocumentHeadTail([2 * cp, 4 * cp]) if kind == "doc" else make_load_balancer(kind)
    seq = 6 * cp if kind == "doc" else balancer.required_multiple(cp) * chunks
    lay = balancer.layout(seq, cp)
    for r in range(cp):
        for s in range(cp):
            got = _plan_pairs(lay.runs[r], lay.runs[s], causal)
            want = [(a, b) for a in _positions(lay.runs[r]) for b in _positions(lay.runs[s]) if not causal or b <= a]
            assert sorted(got) == sorted(want), (r, s)
            assert len(got) == len(set(got))
            assert pair_count(plan_block(lay.runs[r], lay.runs[s], causal)) == visible_pairs(
                lay.positions(r), lay.positions(s), causal)


def test_headtail_ring_steps_are_one_kernel_call_each():
    lay = HeadTail().layout(32, 4)
    for r in range(4):
        for s in range(4):
            tasks = plan_block(lay.runs[r], lay.runs[s], True)
            assert len(tasks) == 1, (r, s, tasks)
            assert tasks[0].causal == (r == s)


def test_plan_rejects_overlapping_runs():
    with pytest.raises(ValueError, match="partly overlaps"):
        plan_block([(0, 4)], [(2, 4)], True)


def test_headtail_balances_causal_work_exactly():
    for cp in (2, 3, 4, 8):
        seq = 2 * cp * 4
        balanced = attention_work(HeadTail().layout(seq, cp), True)
        assert len(set(balanced)) == 1
        assert sum(balanced) == seq * (seq + 1) // 2
        plain = attention_work(Contiguous().layout(seq, cp), True)
        chunk = seq // cp
        assert plain[0] == chunk * (chunk + 1) // 2
        assert plain[-1] == (cp - 1) * chunk * chunk + chunk * (chunk + 1) // 2  # ~(2c-1)x rank 0's work
        assert attention_work(Contiguous().layout(seq, cp), False) == [seq * chunk] * cp


# ------------------------------------------------------------------------------------------ formulas
def test_byte_formulas_by_hand():
    # S=8192, c=2, 8 kv heads x 64, fp32: one K+V block = 2*4096*512 elements
    blk = 2 * 4096 * 512
    assert ring_bytes(8192, 2, 8, 64, 4) == {"fwd": blk * 4, "bwd": blk * 4 + 2 * blk * 4}
    assert allgather_bytes(8192, 2, 8, 64, 4) == {"fwd": blk * 4, "bwd": blk * 8}
    assert alltoall_bytes(8192, 2, 8, 8, 64, 4) == {"fwd": 4096 * 64 * 32 // 2 * 4, "bwd": 4096 * 64 * 32 // 2 * 4}
    assert ring_bytes(8192, 1, 8, 64, 4) == {"fwd": 0, "bwd": 0}
    assert method_bytes("ring", 8192, 2, 8, 8, 64, 4) == ring_bytes(8192, 2, 8, 64, 4)
    with pytest.raises(ValueError, match="expected ring, allgather or alltoall"):
        method_bytes("p2p", 8, 2, 1, 1, 1, 1)


def test_ulysses_kv_repeat():
    assert ulysses_kv_repeat(8, 8, 4) == 1
    assert ulysses_kv_repeat(8, 2, 4) == 2     # 2 kv heads -> 4, one per rank
    assert ulysses_kv_repeat(8, 1, 2) == 2
    with pytest.raises(ValueError, match="not divisible by cp=3"):
        ulysses_kv_repeat(8, 2, 3)
    assert ulysses_kv_repeat(16, 2, 8) == 4    # 8 heads per kv head: each rank's 2 q heads share one repeated head
    with pytest.raises(ValueError, match="not a multiple of 3 key/value heads"):
        ulysses_kv_repeat(8, 3, 2)


def test_overlap_condition_matches_the_worked_example():
    # MHA, bf16, 990 TFLOP/s, 450 GB/s: ~2.2k tokens per rank non-causal, double for causal
    assert 2100 < ring_overlap_min_chunk(990e12, 450e9, 8, 8, 2, causal=False) < 2300
    assert ring_overlap_min_chunk(990e12, 450e9, 8, 8, 2) == 2 * ring_overlap_min_chunk(990e12, 450e9, 8, 8, 2, False)


def test_select_method_rule():
    assert select_method(8192, 1, 8, 8, 64) == "allgather"
    assert select_method(8192, 2, 8, 8, 64) == "alltoall"          # MHA: Ulysses moves fewer bytes
    assert select_method(8192, 2, 8, 2, 64) == "ring"              # GQA 4:1 at c=2: ring moves fewer, long shards
    assert select_method(1024, 2, 8, 2, 64) == "allgather"         # short shards
    assert select_method(8192, 4, 8, 2, 64) == "alltoall"          # GQA at c=4: Ulysses wins again
    assert select_method(8192, 3, 8, 8, 64) == "ring"              # heads not divisible by 3
    assert select_method(8192, 2, 8, 2, 64, ring_min_chunk=8192) == "allgather"
    with pytest.raises(ValueError, match="select_method\\(cp\\)"):
        select_method(8192, 0, 8, 8, 64)
