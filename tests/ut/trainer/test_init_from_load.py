# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``init_from`` allocates the parameters uninitialised (``init_parameters(empty=True)``) and checks that the
folder gave every one of them a value."""
import pytest
import torch
from torch import nn

from hyper_parallel.models import init_empty_weights, init_parameters
from hyper_parallel.trainer._torch.finetune import _check_every_parameter_read


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(8, 4)
        self.norm = nn.RMSNorm(4)
        self.head = nn.Linear(4, 8, bias=False)


def test_empty_materialises_every_parameter_without_drawing():
    with init_empty_weights():
        model = _Tiny()
    drawn = init_parameters(_Tiny().to("meta"), seed=3)
    init_parameters(model, empty=True)
    for (name, p), (_, q) in zip(model.named_parameters(), drawn.named_parameters()):
        assert not p.is_meta and p.device.type == "cpu", name
        assert p.shape == q.shape and p.dtype == q.dtype, name


def test_a_parameter_the_folder_does_not_fill_is_named():
    model = _Tiny()
    full = {name: p.detach() for name, p in model.named_parameters()}
    _check_every_parameter_read(model, full, "/x")  # complete: no error
    del full["norm.weight"]
    with pytest.raises(ValueError, match=r"model.init_from /x: 1 parameters have no tensor.*norm.weight"):
        _check_every_parameter_read(model, full, "/x")


def test_empty_init_then_load_equals_the_source():
    src = init_parameters(_Tiny().to("meta"), seed=5)
    with init_empty_weights():
        dst = _Tiny()
    init_parameters(dst, empty=True)
    dst.load_state_dict(src.state_dict())
    for (name, p), (_, q) in zip(dst.named_parameters(), src.named_parameters()):
        assert torch.equal(p, q), name
