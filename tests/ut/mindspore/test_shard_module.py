# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, no cluster): ``hyper_parallel.shard_module`` on a MindSpore ``nn.Cell`` rejects a bad
plan (unknown key, a glob matching nothing, a Partial parameter) naming the bad input, before it changes
anything. The distributed behaviour is checked in ``tests/st/mindspore`` ("shard_module on nn.Cell")."""
import pytest


def _cell():
    import mindspore as ms
    from mindspore import nn
    ms.set_device("CPU")

    class MLP(nn.Cell):
        """Dense(4->6) -> Dense(6->4)."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Dense(4, 6)
            self.fc2 = nn.Dense(6, 4)

        def construct(self, x):
            return self.fc2(self.fc1(x))

    return MLP()


def test_unknown_plan_key_is_an_error_naming_it():
    import hyper_parallel as hp
    from hyper_parallel import Shard
    with pytest.raises(ValueError, match=r"unknown plan key\(s\) \['param'\]"):
        hp.shard_module(_cell(), None, {"param": {"fc1.weight": (Shard(0),)}})


def test_parameter_glob_matching_nothing_is_an_error_naming_it():
    import hyper_parallel as hp
    from hyper_parallel import Shard
    cell = _cell()
    with pytest.raises(ValueError, match=r"parameter pattern 'fc3\.\*' matches nothing"):
        hp.shard_module(cell, None, {"parameters": {"fc1.weight": (Shard(0),), "fc3.*": (Shard(0),)}})
    assert tuple(cell.fc1.weight.shape) == (6, 4)  # nothing was sharded


def test_module_glob_matching_nothing_is_an_error_naming_it():
    import hyper_parallel as hp
    from hyper_parallel import Replicate
    with pytest.raises(ValueError, match=r"inputs pattern 'mlp' matches nothing"):
        hp.shard_module(_cell(), None, {"inputs": {"mlp": (Replicate(),)}})
    with pytest.raises(ValueError, match=r"use_local_output pattern 'fc9' matches nothing"):
        hp.shard_module(_cell(), None, {"use_local_output": ["fc9"]})


def test_partial_parameter_is_an_error_naming_it():
    import hyper_parallel as hp
    from hyper_parallel import Partial
    with pytest.raises(ValueError, match=r"parameter fc2\.bias cannot be laid out"):
        hp.shard_module(_cell(), None, {"parameters": {"fc2.bias": (Partial(),)}})
