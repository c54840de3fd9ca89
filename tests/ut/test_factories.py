# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: argument handling of the DTensor factories (pure ``hyper_parallel.core.factories``)."""
import pytest

from hyper_parallel.core.factories import factory_placements, parse_size


@pytest.mark.parametrize("size, want", [
    ((2, 3), (2, 3)), (((2, 3),), (2, 3)), (([2, 3],), (2, 3)), ((7,), (7,)), ((), ()), (((),), ()),
    ((0, 4), (0, 4)),
])
def test_parse_size_accepts_torch_forms(size, want):
    assert parse_size(size, "zeros") == want


def test_parse_size_accepts_torch_size_and_index_types():
    import torch
    assert parse_size((torch.Size([4, 5]),), "ones") == (4, 5)
    assert parse_size((torch.tensor(3), 2), "ones") == (3, 2)


@pytest.mark.parametrize("size, err, match", [
    ((2, -1), ValueError, "negative size -1"),
    ((2.0, 3), TypeError, "sizes must be ints"),
    ((True,), TypeError, "sizes must be ints"),
    (("4",), TypeError, "sizes must be ints"),
])
def test_parse_size_rejects_bad_sizes(size, err, match):
    with pytest.raises(err, match=match):
        parse_size(size, "zeros")


def test_parse_size_names_a_positional_mesh():
    class Mesh:  # what a DeviceMesh passed positionally looks like to the parser: it has get_coordinate
        ndim = 1

        def get_coordinate(self):
            return [0]
    with pytest.raises(TypeError, match="pass it as device_mesh="):
        parse_size(((9, 4), Mesh()), "rand")


def test_factory_placements_needs_a_mesh():
    with pytest.raises(ValueError, match=r"rand\(device_mesh=None\): a DeviceMesh is required"):
        factory_placements(None, None, 2, "rand")
    with pytest.raises(TypeError, match="expected a DeviceMesh, got str"):
        factory_placements(None, "cpu", 2, "zeros")
