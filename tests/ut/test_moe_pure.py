# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the backend-free MoE modules — configuration and mesh-rule validation, the router math, dispatch
planning (count exchange, regroup, permutation, capacity, kernel choice), the bias rule, the aux-loss
formulas. No torch here: the expected values are worked out by hand in the tests."""
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyper_parallel.moe.api import MoEConfig, check_expert_parallel, expert_fsdp_degree
from hyper_parallel.moe.balance import (aux_loss_value, bias_update, load_ratio, max_violation,
                                        sequence_aux_loss_value)
from hyper_parallel.moe.planning import (capacity, exchange_plan, expert_kernel, input_splits,
                                         permutation_order)
from hyper_parallel.moe.routing import group_scores, route_token, routing_probabilities, scores_of


def cfg(**kw):
    base = dict(num_experts=8, top_k=2, dim=16, hidden_dim=32)
    base.update(kw)
    return MoEConfig(**base)


# ---------------------------------------------------------------------- configuration
@pytest.mark.parametrize("kw, words", [
    (dict(num_experts=0), ["num_experts", "0"]),
    (dict(top_k=9), ["top_k=9", "num_experts=8"]),
    (dict(top_k=0), ["top_k", "0"]),
    (dict(dim=2.5), ["dim", "2.5"]),
    (dict(hidden_dim=True), ["hidden_dim", "True"]),
    (dict(num_shared_experts=-1), ["num_shared_experts", "-1"]),
    (dict(score_func="relu"), ["score_func", "relu"]),
    (dict(route_norm="yes"), ["route_norm", "yes"]),
    (dict(route_scale=0.0), ["route_scale", "0.0"]),
    (dict(route_scale=float("nan")), ["route_scale", "nan"]),
    (dict(n_groups=3), ["n_groups=3", "num_experts=8"]),
    (dict(n_groups=4, topk_groups=5), ["topk_groups=5", "n_groups=4"]),
    (dict(n_groups=4, topk_groups=1, top_k=3), ["top_k=3", "2 experts reachable"]),
    (dict(load_balance="switch"), ["load_balance", "switch"]),
    (dict(aux_loss_coeff=-1.0), ["aux_loss_coeff", "-1.0"]),
    (dict(bias_update_rate=-0.1), ["bias_update_rate", "-0.1"]),
    (dict(capacity_factor=0), ["capacity_factor", "0"]),
    (dict(aux_loss_level="token"), ["aux_loss_level", "token"]),
    (dict(use_grouped_mm="auto"), ["use_grouped_mm", "auto"]),
])
def test_config_rejects_bad_values_naming_them(kw, words):
    with pytest.raises(ValueError) as err:
        cfg(**kw)
    for w in words:
        assert w in str(err.value)


def test_config_defaults_and_shared_width():
    c = cfg(num_shared_experts=2)
    assert c.shared_hidden_dim == 64 and c.load_balance == "expert_bias" and c.capacity_factor is None
    assert cfg().shared_hidden_dim == 0
    for lb in ("aux_loss", "expert_bias", None):
        assert cfg(load_balance=lb).load_balance == lb


def test_expert_parallel_degree_must_divide_experts():
    assert check_expert_parallel(8, 4) == 2
    with pytest.raises(ValueError, match=r"num_experts=6 is not divisible .* ep=4"):
        check_expert_parallel(6, 4)
    with pytest.raises(ValueError, match="ep=0"):
        check_expert_parallel(6, 0)


def test_mesh_rule_efsdp_times_ep_is_dp_cp_tp():
    assert expert_fsdp_degree(dp_shard=4, cp=1, tp=2, ep=4) == 2
    assert expert_fsdp_degree(dp_shard=2, tp=2, ep=2, etp=2) == 1
    assert expert_fsdp_degree(dp_shard=8, ep=8) == 1
    with pytest.raises(ValueError) as err:
        expert_fsdp_degree(dp_shard=2, cp=1, tp=2, ep=3)
    assert "ep*etp = 3*1 = 3" in str(err.value) and "dp_shard*cp*tp = 2*1*2 = 4" in str(err.value)
    with pytest.raises(ValueError, match="etp=2 must be 1 or equal to tp=4"):
        expert_fsdp_degree(dp_shard=2, tp=4, ep=2, etp=2)
    with pytest.raises(ValueError, match="cp must be an int >= 1"):
        expert_fsdp_degree(dp_shard=2, cp=0, ep=2)


# ---------------------------------------------------------------------- router math
def test_scores_softmax_and_sigmoid_by_hand():
    s = scores_of([0.0, math.log(2), math.log(3)], "softmax")
    assert s == pytest.approx([1 / 6, 2 / 6, 3 / 6])
    assert scores_of([0.0, math.log(3)], "sigmoid") == pytest.approx([0.5, 0.75])
    assert routing_probabilities([0.5, 0.75], "sigmoid") == pytest.approx([0.4, 0.6])
    with pytest.raises(ValueError, match="score_func"):
        scores_of([0.0], "tanh")


def test_route_token_top_k_norm_scale_by_hand():
    logits = [0.0, math.log(2), math.log(3), math.log(4)]  # softmax = [.1, .2, .3, .4]
    experts, weights = route_token(logits, top_k=2)
    assert experts == [3, 2] and weights == pytest.approx([0.4, 0.3])
    experts, weights = route_token(logits, top_k=2, route_norm=True, route_scale=2.0)
    assert experts == [3, 2] and weights == pytest.approx([2 * 4 / 7, 2 * 3 / 7])


def test_expert_bias_changes_selection_not_weights():
    logits = [0.0, math.log(2), math.log(3), math.log(4)]
    experts, weights = route_token(logits, top_k=2, expert_bias=[0.5, 0.0, 0.0, -0.5])
    # selection scores [.6, .2, .3, -.1] -> experts 0 and 2, weighted by their unbiased scores
    assert experts == [0, 2] and weights == pytest.approx([0.1, 0.3])


def test_group_limited_routing_by_hand():
    # sigmoid of these logits is monotone; groups of 2: {0,1}, {2,3}, {4,5}
    scores = [0.9, 0.1, 0.5, 0.45, 0.8, 0.05]
    logits = [math.log(s / (1 - s)) for s in scores]
    assert group_scores(scores, 3) == pytest.approx([1.0, 0.95, 0.85])
    experts, weights = route_token(logits, top_k=2, score_func="sigmoid", n_groups=3, topk_groups=2)
    # best groups {0,1} and {2,3}: expert 4 (0.8) is excluded although it scores second overall
    assert experts == [0, 2] and weights == pytest.approx([0.9, 0.5])
    experts, _ = route_token(logits, top_k=2, score_func="sigmoid")
    assert experts == [0, 4]


def test_route_ties_go_to_the_lower_expert():
    assert route_token([1.0, 1.0, 1.0], top_k=2)[0] == [0, 1]


# ---------------------------------------------------------------------- dispatch planning
def test_input_splits_and_exchange_plan_by_hand():
    assert input_splits([3, 0, 2, 5], 2) == [3, 7]
    # 2 source ranks, 2 local experts: src 0 sends (1, 2), src 1 sends (0, 3)
    plan = exchange_plan([[1, 2], [0, 3]])
    assert plan.output_splits == (3, 3) and plan.total == 6
    assert plan.tokens_per_expert == (1, 5)
    # receive buffer: [s0e0 | s0e1 s0e1 | s1e1 s1e1 s1e1] -> expert-major: s0e0, s1e0(none), s0e1.., s1e1..
    assert plan.regroup_index() == [0, 1, 2, 3, 4, 5]
    plan = exchange_plan([[2, 1], [1, 0], [0, 2]])
    assert plan.output_splits == (3, 1, 2)
    assert plan.regroup_index() == [0, 1, 3, 2, 4, 5]
    assert plan.tokens_per_expert == (3, 3)
    with pytest.raises(ValueError, match="unequal length"):
        exchange_plan([[1, 2], [3]])
    with pytest.raises(ValueError, match="negative"):
        exchange_plan([[1, -2]])


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.data())
def test_regroup_is_a_permutation_grouping_rows_by_expert(ep, local, data):
    recv = [[data.draw(st.integers(0, 3)) for _ in range(local)] for _ in range(ep)]
    plan = exchange_plan(recv)
    idx = plan.regroup_index()
    assert sorted(idx) == list(range(plan.total))
    # label every received row with its expert; after the regroup the labels are sorted
    labels = [e for row in recv for e, c in enumerate(row) for _ in range(c)]
    assert [labels[i] for i in idx] == sorted(labels)
    assert list(plan.tokens_per_expert) == [labels.count(e) for e in range(local)]


def test_permutation_order_and_capacity_by_hand():
    experts = [[1, 0], [1, 2], [0, 1]]  # slots 0..5
    slots, counts = permutation_order(experts, 3)
    assert slots == [1, 4, 0, 2, 5, 3] and counts == [2, 3, 1]
    slots, counts = permutation_order(experts, 3, capacity_per_expert=2)
    assert slots == [1, 4, 0, 2, 3] and counts == [2, 2, 1]
    assert capacity(10, 2, 4, None) is None
    assert capacity(10, 2, 4, 1.0) == 5 and capacity(10, 2, 4, 1.25) == 7


def test_expert_kernel_choice():
    assert expert_kernel("cpu", "float32", 4, 16, 32)[0] == "grouped_mm"
    assert expert_kernel("cpu", "bfloat16", 2, 8, 24)[0] == "grouped_mm"
    kernel, why = expert_kernel("cpu", "float32", 4, 6, 32)
    assert kernel == "loop" and "dim=6" in why and "16 bytes" in why
    assert expert_kernel("cpu", "bfloat16", 2, 16, 12)[0] == "loop"
    assert expert_kernel("cpu", "float64", 8, 16, 32)[0] == "loop"
    assert expert_kernel("cuda", "float32", 4, 16, 32)[0] == "loop"
    assert expert_kernel("cuda", "bfloat16", 2, 16, 32)[0] == "grouped_mm"
    assert expert_kernel("npu", "float32", 4, 16, 32)[0] == "loop"
    assert expert_kernel("cpu", "float32", 4, 16, 32, available=False)[0] == "loop"


# ---------------------------------------------------------------------- balancing
def test_bias_update_rule():
    assert bias_update([10, 2, 6, 6], 0.5) == [-0.5, 0.5, 0.0, 0.0]
    assert bias_update([3, 3], 1e-3) == [0.0, 0.0]
    with pytest.raises(ValueError, match="one load per expert"):
        bias_update([], 1.0)


def test_aux_loss_formula_by_hand():
    # perfect balance gives alpha
    assert aux_loss_value([2, 2, 2, 2], [1, 1, 1, 1], 4, 2, 0.1) == pytest.approx(0.1)
    # all slots on expert 0 whose probability is 1: alpha * E * (1 * 1)
    assert aux_loss_value([8, 0, 0, 0], [4, 0, 0, 0], 4, 2, 0.1) == pytest.approx(0.4)
    seq = sequence_aux_loss_value([[2, 2, 2, 2], [8, 0, 0, 0]], [[1, 1, 1, 1], [4, 0, 0, 0]], 4, 2, 0.1)
    assert seq == pytest.approx(0.25)
    with pytest.raises(ValueError, match="positive token count"):
        aux_loss_value([1], [1], 0, 1, 1.0)


def test_load_metrics():
    assert load_ratio([4, 4, 4, 4]) == 1.0 and load_ratio([13, 1, 1, 1]) == pytest.approx(3.25)
    assert max_violation([13, 1, 1, 1]) == pytest.approx(2.25)


def test_moe_package_imports_no_framework():
    code = ("import sys, hyper_parallel.moe as m; m.MoEConfig(num_experts=2, top_k=1, dim=4, hidden_dim=4); "
            "import hyper_parallel.moe.planning, hyper_parallel.moe.balance, hyper_parallel.moe.routing; "
            "assert 'torch' not in sys.modules and 'mindspore' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
