# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: checkpoint policies, policy builders and the ``activation`` config block (pure, no torch)."""
import subprocess
import sys

import pytest

from hyper_parallel.activation import (ActivationConfigError, CheckpointPolicy, OpPolicy, PolicyError,
                                       every_k_layers, full_policy, op_policy, parse_activation_config, save_ops)
from hyper_parallel.activation.config import resolve_layer_modes
from hyper_parallel.activation.policy import COLLECTIVE_OPS, resolve_policy

P = CheckpointPolicy


def test_op_policy_keeps_compute_and_every_collective_and_recomputes_pointwise():
    pol = op_policy()
    for op in ("aten.mm.default", "aten.addmm.default", "aten._scaled_dot_product_flash_attention_for_cpu.default",
               "c10d.allreduce_.default", "c10d._reduce_scatter_base_.default", "c10d.alltoall_base_.default",
               "c10d._allgather_base_.default", "_c10d_functional.all_to_all_single.default"):
        assert pol.decide(op) is P.MUST_SAVE, op
    for op in ("aten.silu.default", "aten.mul.Tensor", "aten.rsqrt.default", "aten.add.Tensor", "aten.view.default"):
        assert pol.decide(op) is P.PREFER_RECOMPUTE, op
    assert pol.needs_dispatch and not pol.swaps and pol.name == "op"


def test_full_policy_is_plain_checkpoint_unless_collectives_are_kept():
    assert not full_policy().needs_dispatch
    assert full_policy().decide("c10d.allreduce_.default") is P.PREFER_RECOMPUTE
    keep = full_policy(save_collectives=True)
    assert keep.needs_dispatch
    assert keep.decide("c10d.allreduce_.default") is P.MUST_SAVE
    assert keep.decide("aten.mm.default") is P.PREFER_RECOMPUTE


def test_lookup_order_overload_then_op_then_pattern_then_default():
    pol = OpPolicy([("aten.mm", "save"), ("aten.mm.out", "recompute"), ("aten.s*", "swap")],
                   default=P.PREFER_SAVE)
    assert pol.decide("aten.mm.default") is P.MUST_SAVE
    assert pol.decide("aten.mm.out") is P.PREFER_RECOMPUTE
    assert pol.decide("aten.silu.default") is P.MUST_SWAP
    assert pol.decide("aten.add.Tensor") is P.PREFER_SAVE
    assert pol.swaps and pol.rules()["aten.mm"] is P.MUST_SAVE


def test_collectives_are_never_recomputed_unless_asked():
    pol = save_ops(["aten.mm"])
    assert all(pol.decide(op + ".default") is P.MUST_SAVE for op in COLLECTIVE_OPS)
    pol = OpPolicy([("c10d.allreduce_", "recompute")])
    assert pol.decide("c10d.allreduce_.default") is P.MUST_SAVE  # forced: recompute_collectives is False
    pol = OpPolicy([("c10d.allreduce_", "recompute")], recompute_collectives=True)
    assert pol.decide("c10d.allreduce_.default") is P.PREFER_RECOMPUTE


def test_swap_rules_and_groups():
    pol = op_policy(["aten.max"], swap=["aten.silu"])
    assert pol.decide("aten.silu.default") is P.MUST_SWAP
    assert pol.decide("aten.max.dim") is P.MUST_SAVE
    assert pol.swaps and P.MUST_SWAP.keeps_output and not P.PREFER_RECOMPUTE.keeps_output
    assert save_ops(["matmul"]).decide("aten.bmm.default") is P.MUST_SAVE


class _TorchLikePolicy:  # stands in for torch.utils.checkpoint.CheckpointPolicy members (matched by name)
    def __init__(self, name):
        self.name = name


@pytest.mark.parametrize("value,expected", [
    (True, P.MUST_SAVE), (False, P.PREFER_RECOMPUTE), ("must_save", P.MUST_SAVE), ("swap", P.MUST_SWAP),
    (_TorchLikePolicy("PREFER_SAVE"), P.PREFER_SAVE), (_TorchLikePolicy("MUST_CPU_OFFLOAD"), P.MUST_SWAP),
    (P.MUST_RECOMPUTE, P.MUST_RECOMPUTE)])
def test_coerce(value, expected):
    assert P.coerce(value) is expected


@pytest.mark.parametrize("bad,match", [
    (["mm"], r"save_ops\(ops\[0\]\).*neither an op name"), ("aten.mm", r"save_ops\(ops\): expected a list"),
    ([""], r"save_ops\(ops\[0\]\): expected an op name"), ([3], r"save_ops\(ops\[0\]\)")])
def test_save_ops_bad_names(bad, match):
    with pytest.raises(PolicyError, match=match):
        save_ops(bad)


def test_policy_errors_name_the_argument():
    with pytest.raises(PolicyError, match=r"OpPolicy\(rules\['aten.mm'\]\)"):
        OpPolicy([("aten.mm", "keep-it")])
    with pytest.raises(PolicyError, match=r"every_k_layers\(k\)"):
        every_k_layers(0)
    with pytest.raises(PolicyError, match=r"checkpoint\(policy\): expected 'full', 'op'"):
        resolve_policy("selective", "checkpoint(policy)")
    with pytest.raises(PolicyError, match="got int"):
        resolve_policy(3)


def test_every_k_layers_follows_torchtitan_numbering():
    sel = every_k_layers(2)
    assert [i for i in range(6) if sel.selects(i)] == [1, 3, 5]
    assert sel.policy.name == "full" and "every_k_layers(2" in repr(sel)
    assert every_k_layers(3, op_policy()).policy.name == "op"


def test_resolve_policy_shapes():
    assert resolve_policy(None).name == "full"
    assert resolve_policy("selective-op").name == "op"
    assert resolve_policy(["aten.mm"]).decide("aten.mm.default") is P.MUST_SAVE
    fn = lambda ctx, op, *a, **k: True  # noqa: E731
    assert resolve_policy(fn) is fn


# ---------------------------------------------------------------------- config block
def test_parse_full_block():
    cfg = parse_activation_config({
        "mode": "every-k", "every_k": 3, "every_k_policy": "selective-op", "layers": "model.layers.*",
        "save_ops": ["aten.max"], "swap_ops": ["aten.silu"], "recompute_collectives": False,
        "swap": {"target": "disk", "dir": "/tmp/x", "min_bytes": 0, "fusion_bytes": 10, "prefetch": 2},
        "auto": {"budget_mib": 1.5}, "overrides": {"model.layers.0": "swap"}})
    assert cfg.mode == "every-k" and cfg.every_k == 3 and cfg.layers == ("model.layers.*",)
    assert cfg.swap.directory == "/tmp/x" and cfg.swap.prefetch == 2 and cfg.swap.min_bytes == 0
    assert cfg.auto.budget_bytes == int(1.5 * 2 ** 20) and not cfg.recompute_collectives
    assert parse_activation_config("full").mode == "full"
    assert parse_activation_config(cfg) is cfg


@pytest.mark.parametrize("block,key", [
    ({"mode": "fast"}, "activation.mode"),
    ({}, "activation.mode"),
    ({"mode": "full", "evry_k": 2}, "activation.evry_k: unknown key .* did you mean 'every_k'"),
    ({"mode": "every-k", "every_k": 0}, "activation.every_k"),
    ({"mode": "every-k", "every_k": True}, "activation.every_k"),
    ({"mode": "full", "swap": {"target": "ssd"}}, "activation.swap.target"),
    ({"mode": "full", "swap": {"min_bytes": -1}}, "activation.swap.min_bytes"),
    ({"mode": "full", "swap": {"dir": 3}}, "activation.swap.dir"),
    ({"mode": "full", "swap": {"io": "aio"}}, "activation.swap.io"),
    ({"mode": "full", "swap": {"prefetch_depth": 1}}, "activation.swap.prefetch_depth: unknown key"),
    ({"mode": "full", "swap": "disk"}, "activation.swap: expected a table"),
    ({"mode": "auto"}, "activation.auto.budget_mib: mode = 'auto' needs a memory budget"),
    ({"mode": "auto", "auto": {"budget_mib": -1}}, "activation.auto.budget_mib"),
    ({"mode": "auto", "auto": {"budget_mib": 1, "budget_bytes": 2}}, "activation.auto: give budget_mib or"),
    ({"mode": "auto", "auto": {"budget_mib": 1, "modes": ["none", "half"]}}, r"activation.auto.modes\[1\]"),
    ({"mode": "full", "save_ops": ["mm"]}, "activation.save_ops"),
    ({"mode": "full", "swap_ops": "aten.mm"}, None),
    ({"mode": "full", "layers": [1]}, "activation.layers"),
    ({"mode": "full", "recompute_collectives": "yes"}, "activation.recompute_collectives"),
    ({"mode": "full", "overrides": {"model.layers.0": "fast"}}, "activation.overrides.model.layers.0"),
    ({"mode": "full", "every_k_policy": "swap"}, "activation.every_k_policy"),
])
def test_bad_config_names_the_key(block, key):
    if key is None:  # a single string is accepted as a one-element list
        assert parse_activation_config(block).swap_ops == ("aten.mm",)
        return
    with pytest.raises(ActivationConfigError, match=key):
        parse_activation_config(block)


def test_layer_modes_every_k_and_overrides():
    names = [f"model.layers.{i}" for i in range(5)]
    cfg = parse_activation_config({"mode": "every-k", "every_k": 2, "overrides": {"model.layers.4": "swap"}})
    assert resolve_layer_modes(cfg, names) == {
        "model.layers.0": "none", "model.layers.1": "full", "model.layers.2": "none", "model.layers.3": "full",
        "model.layers.4": "swap"}
    cfg = parse_activation_config({"mode": "selective-op", "overrides": {"model.layers.[01]": "none"}})
    modes = resolve_layer_modes(cfg, names)
    assert [modes[n] for n in names] == ["none", "none", "selective-op", "selective-op", "selective-op"]
    cfg = parse_activation_config({"mode": "full", "overrides": {"decoder.*": "none"}})
    with pytest.raises(ActivationConfigError, match=r"activation.overrides.decoder.\*: matches none"):
        resolve_layer_modes(cfg, names)


def test_import_hyper_parallel_activation_needs_no_framework():
    code = ("import sys, hyper_parallel.activation as a; a.op_policy(); a.parse_activation_config('full'); "
            "a.SwapManager(); assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'mindspore' not in sys.modules, 'mindspore imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
