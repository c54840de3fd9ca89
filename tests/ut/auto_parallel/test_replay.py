# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: live bytes replayed by address from allocation events (``AllocationTracker(by_pointer=True)``)."""
from hyper_parallel.testing.memory import replay_by_pointer

MAIN, WORKER = False, True


def test_replay_counts_by_address_and_frees_of_older_blocks():
    events = [(MAIN, 1, 100), (MAIN, 2, 50), (MAIN, 1, -100), (MAIN, 9, -30), (MAIN, 3, 10)]
    # a free of a block from before the session (address 9) lowers the live bytes by its size
    assert replay_by_pointer(events) == [100, 150, 50, 20, 30]


def test_an_address_allocated_again_frees_its_unseen_block():
    events = [(MAIN, 1, 100), (MAIN, 1, 40), (MAIN, 1, -40)]
    assert replay_by_pointer(events) == [100, 40, 0]


def test_an_unseen_free_goes_with_its_collectives_staging_buffer():
    """A collective's output (main thread, address 1) whose free the profiler never saw is freed with the
    next same-size free on a worker thread (the collective's staging buffer at address 7)."""
    events = [(MAIN, 1, 64), (WORKER, 7, 64), (MAIN, 2, 8), (WORKER, 7, -64), (MAIN, 3, 16), (MAIN, 3, -16)]
    assert replay_by_pointer(events) == [64, 128, 136, 8, 24, 8]
    # the same events with the free seen on the main thread: nothing is paired
    seen = events[:4] + [(MAIN, 1, -64)] + events[4:]
    assert replay_by_pointer(seen) == [64, 128, 136, 72, 8, 24, 8]
