# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the framework-free bookkeeping both backends share — ``hyper_parallel.fsdp.units`` (argument checks,
unit grouping, prefetch lists, ``FSDP<Class>``) and ``hyper_parallel.tp.loss_args`` (loss-parallel arguments).
Plain Python objects stand in for modules; no framework is imported."""
import pytest

from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.fsdp.api import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
from hyper_parallel.fsdp.units import (STATE_ATTR, check_fully_shard_args, check_shardable, collect_unit_params,
                                       fsdp_class, prefetch_units, require_unit)
from hyper_parallel.tp.loss_args import check_vocab_parallel_args, cross_entropy_call


class Mod:
    """A stand-in module: own parameters and children by name."""

    def __init__(self, params=None, children=None):
        self.params = dict(params or {})
        self.children = dict(children or {})


class State:  # pylint: disable=too-few-public-methods
    """A stand-in FSDP state."""

    def __init__(self, unit):
        self.unit = unit


def _collect(root, **kw):
    return collect_unit_params(root, params=lambda m: m.params.items(), children=lambda m: m.children.items(), **kw)


def test_collect_groups_shared_parameters_and_stops_at_nested_units():
    w, b, shared, inner_w, ignored = object(), object(), object(), object(), object()
    nested = Mod({"w": inner_w})
    nested.__dict__[STATE_ATTR] = State("unit")  # already its own unit: not walked
    root = Mod({"w": w, "b": b, "none": None}, {"a": Mod({"s": shared, "x": ignored}), "b": Mod({"s": shared}),
                                                "n": nested})
    found = _collect(root, ignored=[ignored])
    assert [(fqn, [name for _, name in owners]) for _, owners, fqn in found] == [
        ("w", ["w"]), ("b", ["b"]), ("a.s", ["s", "s"])]
    assert found[0][0] is w and found[2][1][0][0] is root.children["a"] and found[2][1][1][0] is root.children["b"]
    assert [fqn for _, _, fqn in _collect(root, skip=lambda p: p is b)] == ["w", "a.s", "a.x"]


def test_argument_checks_name_the_argument():
    mod = Mod()
    check_fully_shard_args(mod, Mod, "a Mod", MixedPrecisionPolicy(), OffloadPolicy())
    with pytest.raises(TypeError, match=r"fully_shard\(module\): expected a Mod, got int"):
        check_fully_shard_args(3, Mod, "a Mod", MixedPrecisionPolicy(), OffloadPolicy())
    with pytest.raises(TypeError, match="expected a MixedPrecisionPolicy"):
        check_fully_shard_args(mod, Mod, "a Mod", "fp16", OffloadPolicy())
    with pytest.raises(TypeError, match="expected an OffloadPolicy/CPUOffloadPolicy"):
        check_fully_shard_args(mod, Mod, "a Mod", MixedPrecisionPolicy(), None)
    check_fully_shard_args(mod, Mod, "a Mod", MixedPrecisionPolicy(), CPUOffloadPolicy())
    with pytest.raises(ValueError, match="no offload here"):
        check_fully_shard_args(mod, Mod, "a Mod", MixedPrecisionPolicy(), CPUOffloadPolicy(), "no offload here")
    mod.__dict__[STATE_ATTR] = State(None)
    with pytest.raises(ValueError, match="Mod is already fully sharded"):
        check_fully_shard_args(mod, Mod, "a Mod", MixedPrecisionPolicy(), OffloadPolicy())
    with pytest.raises(ValueError, match="'a.b' is 0-dimensional"):
        check_shardable("a.b", 0)
    check_shardable("a.b", 1)


def test_prefetch_lists_and_units():
    a, b, empty, plain = Mod(), Mod(), Mod(), Mod()
    a.__dict__[STATE_ATTR], b.__dict__[STATE_ATTR], empty.__dict__[STATE_ATTR] = State("A"), State("B"), State(None)
    assert prefetch_units([b, empty, a], "set_x", Mod, "cell") == ["B", "A"]
    with pytest.raises(TypeError, match=r"set_x\(modules\): expected a list of fully_shard cells, got one cell"):
        prefetch_units(a, "set_x", Mod, "cell")
    with pytest.raises(ValueError, match=r"set_x\(modules\): Mod is not a fully_shard module"):
        prefetch_units([a, plain], "set_x", Mod, "module")
    assert require_unit(a, "set_x") == "A"
    with pytest.raises(ValueError, match="set_x: Mod manages no parameters of its own"):
        require_unit(empty, "set_x")


def test_fsdp_class_is_made_once_per_class_and_mixin():
    class Mixin:  # pylint: disable=too-few-public-methods
        """A stand-in FSDPModule."""

    cls = fsdp_class(Mod, Mixin)
    assert cls.__name__ == "FSDPMod" and cls.__mro__[1:3] == (Mixin, Mod) and fsdp_class(Mod, Mixin) is cls


class FakeDTensor:  # pylint: disable=too-few-public-methods
    """Only what the loss-argument checks read."""

    class Mesh:  # pylint: disable=too-few-public-methods
        """A 1-D mesh."""
        ndim = 1

    def __init__(self, placements, ndim=2):
        self.placements, self.ndim, self.device_mesh = tuple(placements), ndim, self.Mesh()


def test_loss_arguments():
    check_vocab_parallel_args(FakeDTensor([Shard(1)]), "mean", FakeDTensor)
    with pytest.raises(ValueError, match=r"reduction='max'\): expected mean, sum or none"):
        check_vocab_parallel_args(FakeDTensor([Shard(1)]), "max", FakeDTensor)
    with pytest.raises(ValueError, match=r"sharded Shard\(-1\) on a 1-D mesh, got \(Replicate\(\),\)"):
        check_vocab_parallel_args(FakeDTensor([Replicate()]), "sum", FakeDTensor)
    with pytest.raises(ValueError, match="got list"):
        check_vocab_parallel_args([], "sum", FakeDTensor)
    logits = FakeDTensor([Shard(1)])
    got = cross_entropy_call((logits, "t", None, 7), {"label_smoothing": 0.1}, ("weight", "ignore_index"),
                             ("weight",), "cross_entropy")
    assert got == (logits, "t", {"ignore_index": 7, "reduction": "mean", "label_smoothing": 0.1})
    with pytest.raises(ValueError, match="argument 'weight' is not supported"):
        cross_entropy_call((logits, "t", "w"), {}, ("weight",), ("weight",), "cross_entropy")
    with pytest.raises(ValueError, match=r"pass \(N, C\) logits \(F.cross_entropy's class dim is 1\)"):
        cross_entropy_call((FakeDTensor([Shard(2)], ndim=3), "t"), {}, (), (), "F.cross_entropy")
