# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the auto-policy knapsack (against brute force), the swap schedule (prefetch order) and the
disk store (real files, background threads; no framework)."""
import itertools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyper_parallel.activation import AutoBudgetError, SwapManager, plan_auto
from hyper_parallel.activation.auto import LayerOption, LayerProfile
from hyper_parallel.activation.disk import DiskStore, SwapIOError
from hyper_parallel.activation.swap_plan import SwapSchedule, fusion_split, is_swappable_size

MODES = ("none", "selective-op", "full", "swap")
option = st.tuples(st.integers(0, 5000), st.floats(0, 10, allow_nan=False))
layer = st.lists(option, min_size=1, max_size=4)


def _profiles(layers):
    return [LayerProfile(f"l{i}", tuple(LayerOption(MODES[k], m, t) for k, (m, t) in enumerate(opts)))
            for i, opts in enumerate(layers)]


@settings(max_examples=150, deadline=None)
@given(layers=st.lists(layer, min_size=1, max_size=4), budget=st.integers(1, 20000), fixed=st.integers(0, 3000))
def test_knapsack_matches_brute_force(layers, budget, fixed):
    profs = _profiles(layers)
    combos = [c for c in itertools.product(*(p.options for p in profs))
              if fixed + sum(o.memory_bytes for o in c) <= budget]
    if not combos:
        with pytest.raises(AutoBudgetError, match="too small|no combination fits"):
            plan_auto(profs, budget, fixed_bytes=fixed, resolution=budget)
        return
    best = min(sum(o.time_s for o in c) for c in combos)
    plan = plan_auto(profs, budget, fixed_bytes=fixed, resolution=budget)  # 1-byte units: exact
    assert plan.predicted_bytes <= budget
    assert plan.predicted_extra_s == pytest.approx(best, abs=1e-9)
    chosen = plan.as_dict()
    assert plan.predicted_bytes == fixed + sum(next(o.memory_bytes for o in p.options if o.mode == chosen[p.name])
                                               for p in profs)


@settings(max_examples=60, deadline=None)
@given(layers=st.lists(layer, min_size=1, max_size=5), budget=st.integers(1, 30000))
def test_coarse_resolution_never_exceeds_the_budget(layers, budget):
    profs = _profiles(layers)
    try:
        plan = plan_auto(profs, budget, resolution=16)
    except AutoBudgetError:
        return
    assert plan.predicted_bytes <= budget


def test_auto_report_and_errors():
    profs = [LayerProfile("model.layers.0", (LayerOption("none", 100, 0.0), LayerOption("full", 10, 0.002)))]
    plan = plan_auto(profs, 50)
    assert plan.as_dict() == {"model.layers.0": "full"} and plan.predicted_bytes == 10
    assert "*full" in plan.report() and "budget" in plan.report()
    with pytest.raises(AutoBudgetError, match="too small.*at least"):
        plan_auto(profs, 5)
    with pytest.raises(ValueError, match=r"plan_auto\(budget_bytes\)"):
        plan_auto(profs, 0)
    with pytest.raises(ValueError, match="negative or NaN"):
        plan_auto([LayerProfile("x", (LayerOption("none", -1, 0.0),))], 10)


# ---------------------------------------------------------------------- schedule
def _forward(sched, groups, mb=0):
    rids = []
    for g in groups:
        r = sched.open(g, mb)
        sched.close(r.rid)
        rids.append(r.rid)
    return rids


def _backward(sched, rids):
    for r in rids:
        sched.start_backward(r)
        sched.finish(r)


def test_prefetch_follows_reverse_forward_order():
    s = SwapSchedule(depth=1)
    rids = _forward(s, ["a", "b", "c", "d"])
    _backward(s, rids[::-1])
    assert s.backward_log == [("d", 0), ("c", 0), ("b", 0), ("a", 0)]
    assert s.prefetch_log == s.backward_log[1:]


def test_links_override_the_order_and_depth_two():
    s = SwapSchedule(depth=2)
    s.link("d", "b")
    s.link("b", "c")
    s.link("c", "a")
    rids = dict(zip("abcd", _forward(s, ["a", "b", "c", "d"])))
    assert [s.records[r].group for r in s.order_after(rids["d"], 3)] == ["b", "c", "a"]
    assert s.start_backward(rids["d"]) == [rids["b"], rids["c"]]
    assert s.prefetch_log == [("b", 0), ("c", 0)]
    with pytest.raises(ValueError, match="cannot prefetch itself"):
        s.link("a", "a")


def test_microbatches_follow_the_schedule_order():
    """1F1B-like stage: F0 F1 F2 B0 F3 B1 B2 B3 with two groups per microbatch."""
    s = SwapSchedule(depth=1)
    recs = {}
    for mb in range(3):
        recs[mb] = _forward(s, ["l0", "l1"], mb)
    _backward(s, recs[0][::-1])
    recs[3] = _forward(s, ["l0", "l1"], 3)
    for mb in (1, 2, 3):
        _backward(s, recs[mb][::-1])
    expected = [(g, mb) for mb in range(4) for g in ("l1", "l0")]
    assert s.backward_log == expected
    assert s.prefetch_log == expected[1:]
    assert not s.records


def test_explicit_backward_order():
    s = SwapSchedule(depth=1)
    recs = {mb: _forward(s, ["l0"], mb) for mb in range(3)}
    s.set_backward_order([2, 0, 1])
    for mb in (2, 0, 1):
        _backward(s, recs[mb])
    assert s.prefetch_log == [("l0", 0), ("l0", 1)]
    with pytest.raises(ValueError, match="repeat"):
        s.set_backward_order([1, 1])


def test_fusion_split_and_sizes():
    assert fusion_split([10, 5000, 3, 9999], 4096) == ([1, 3], [0, 2])
    assert is_swappable_size(64, 64) and not is_swappable_size(63, 64) and not is_swappable_size(0, 0)


def test_swap_manager_validates_like_the_config():
    with pytest.raises(ValueError, match="SwapManager.target"):
        SwapManager(target="tape")
    with pytest.raises(ValueError, match="SwapManager.prefetch"):
        SwapManager(prefetch=-1)
    m = SwapManager("disk", min_bytes=0)
    assert m.live_files() == [] and "target='disk'" in repr(m)
    m.close()


# ---------------------------------------------------------------------- disk store
@pytest.mark.parametrize("io", ["pread", "mmap"])
def test_disk_store_roundtrip_and_removal(tmp_path, io):
    store = DiskStore(str(tmp_path / "swap"), io=io)
    path = store.new_file("layer/0")
    payloads = [bytes(range(256)) * 40, b"x" * 7, bytes(70000)]
    offsets = [store.reserve(path, len(p)) for p in payloads]
    assert offsets[1] % 8 == 0 and offsets[2] % 8 == 0
    jobs = [store.write(path, off, bytearray(p)) for off, p in zip(offsets, payloads)]
    outs = [bytearray(len(p)) for p in payloads]
    reads = [store.read(path, off, out, after=job) for off, out, job in zip(offsets, outs, jobs)]
    for r in reads:
        r.wait()
    assert [bytes(o) for o in outs] == payloads
    assert os.path.dirname(path) == str(tmp_path / "swap") and "layer_0" in os.path.basename(path)
    store.remove(path)
    store.drain()
    assert not os.listdir(tmp_path / "swap") and store.files_removed == 1
    with pytest.raises(SwapIOError, match="already removed"):
        store.read(path, 0, bytearray(1))
    store.close()
    with pytest.raises(SwapIOError, match="is closed"):
        store.new_file()


def test_disk_store_owns_and_removes_its_temp_dir():
    store = DiskStore()
    d = store.directory
    p = store.new_file()
    store.write(p, store.reserve(p, 4), bytearray(b"abcd")).wait()
    assert os.path.exists(p)
    store.close()
    assert not os.path.exists(d)


@pytest.mark.parametrize("io", ["pread", "mmap"])
def test_disk_write_error_is_raised_with_the_path(tmp_path, io):
    store = DiskStore(str(tmp_path), io=io)
    path = store.new_file()
    os.close(store._files[path].fd)  # the descriptor dies under the writer: a real OSError on the thread
    store._files[path].fd = os.open(os.devnull, os.O_RDONLY)
    job = store.write(path, store.reserve(path, 8), bytearray(8))
    with pytest.raises(SwapIOError, match=path.split(os.sep)[-1]):
        job.wait()
    with pytest.raises(SwapIOError, match="writing"):
        store.new_file()  # later use reports the failure instead of losing data
    store._failed = None
    store.close()


def test_disk_store_rejects_an_unwritable_dir(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SwapIOError, match="cannot create the swap directory"):
        DiskStore(str(target / "sub"))
    with pytest.raises(ValueError, match="swap io"):
        DiskStore(str(tmp_path), io="aio")
