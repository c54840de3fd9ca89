# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: MindSpore ``replicate`` (data parallel, gradient all-reduce in buckets started during backward) on 2 ranks,
ONE launch: the checks of ``replicate_checks.py`` against one process (losses, gradients, SGD-updated weights),
and the measured step time with overlap and with the all-reduce after backward (printed)."""
from hyper_parallel.testing.mindspore_launch import launch


def test_replicate_overlap_equals_one_process():
    out = launch("tests.st.mindspore.replicate_checks:run", world_size=2, timeout=300)
    for rank, res in enumerate(out):
        failed = {k: v for k, v in res["results"].items() if v != "ok"}
        assert not failed, f"rank {rank}: " + "\n".join(f"{k}: {v}" for k, v in failed.items())
        t = res["timing"]
        print(f"rank {rank}: backward + gradient reduction {t['overlap_s'] * 1000:.0f} ms with overlap, "
              f"{t['after_backward_s'] * 1000:.0f} ms with the all-reduce after backward "
              f"({t['after_backward_s'] / t['overlap_s']:.2f}x)")
    assert len(out) == 2
