# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (pure, one process): the vision-language layout rule (``models/vl_layout.py``), every refusal once with its
one-line words, the layouts it lets through, and the ranks' side applying the same rule on ``ParallelDims``
(each vision-language ``parallelize_fn`` refuses before it touches a mesh)."""
from types import SimpleNamespace

import pytest

from hyper_parallel.models import ParallelDims
from hyper_parallel.models.parallel_dims import DEGREE_NAMES, check_degrees, degrees_of
from hyper_parallel.models.vl_layout import MOE_VISION_MODELS, PIPELINE_VISION_MODELS, check_vl_layout


def _degrees(**kw):
    return check_degrees(dict({"dp_shard": 1}, **kw), world_size=None)


REFUSED = [
    ("qwen3_vl", _degrees(cp=2), {},
     "parallelism.cp = 2: not yet for model.name = 'qwen3_vl' (FSDP / HSDP, TP, PP, activation policies are); "
     "set it to 1"),
    ("my_vl", _degrees(cp=2), {},  # a registered model without a pipeline split: PP is not offered
     "parallelism.cp = 2: not yet for model.name = 'my_vl' (FSDP / HSDP, TP, activation policies are); set it to 1"),
    ("my_vl", _degrees(pp=2), {},
     "parallelism.pp = 2: not yet for model.name = 'my_vl' (pipeline parallel runs ['qwen3_vl', 'qwen3_vl_moe', "
     "'qwen3_5_vl', 'qwen3_5_moe_vl']); set it to 1"),
    ("qwen3_5_vl", _degrees(tp=2), {"loss_parallel": True},
     "parallelism.loss_parallel: not for model.name = 'qwen3_5_vl' (a vision-language model); set it to false"),
    ("qwen3_5_moe_vl", _degrees(dp_replicate=2, tp=2), {"moe": True},
     "parallelism.dp_replicate = 2 with parallelism.tp = 2: not yet for model.name = 'qwen3_5_moe_vl' (HSDP x EP "
     "is, without TP); set dp_replicate = 1 or tp = 1"),
    ("qwen3_vl_moe", _degrees(pp=2, tp=2, ep=2), {"moe": True},
     "parallelism.ep = 2 with parallelism.tp = 2 and parallelism.pp = 2: not yet for model.name = 'qwen3_vl_moe' "
     "(a stage's expert meshes are not built under TP); set ep = 1, tp = 1 or pp = 1"),
    ("qwen3_vl_moe", _degrees(pp=2, tp=2, dp_shard=2), {"moe": True},
     "parallelism.dp_shard = 2 with parallelism.tp = 2 and parallelism.pp = 2: not yet for model.name = "
     "'qwen3_vl_moe' (a stage's expert meshes are not built under TP); set dp_shard = 1, tp = 1 or pp = 1"),
]


@pytest.mark.parametrize("name, degrees, kw, message", REFUSED)
def test_each_refusal_is_one_line_naming_the_keys(name, degrees, kw, message):
    with pytest.raises(ValueError) as info:
        check_vl_layout(name, degrees, moe=kw.get("moe", False), loss_parallel=kw.get("loss_parallel", False))
    assert str(info.value) == message and "\n" not in message


@pytest.mark.parametrize("name, degrees, moe", [
    ("qwen3_vl", _degrees(dp_replicate=2, dp_shard=2, tp=2, pp=2), False),  # dense: HSDP x TP x PP
    ("qwen3_vl_moe", _degrees(dp_replicate=2, dp_shard=2, ep=2), True),  # HSDP x EP without TP
    ("qwen3_vl_moe", _degrees(dp_shard=2, tp=2, ep=2), True),  # EP x TP x FSDP without PP
    ("qwen3_5_moe_vl", _degrees(pp=2, tp=2), True),  # TP alone inside the stages
    ("qwen3_5_moe_vl", _degrees(pp=2, dp_shard=2, ep=2), True),  # FSDP x EP inside the stages
    ("qwen3_vl", _degrees(cp=-1, dp_shard=2), False),  # an unresolved -1 counts as 1 (resolved on the ranks)
])
def test_the_layouts_the_models_run_pass(name, degrees, moe):
    check_vl_layout(name, degrees, moe=moe)


def test_the_model_lists_and_degrees_of():
    assert set(MOE_VISION_MODELS) < set(PIPELINE_VISION_MODELS)
    dims = ParallelDims(dp_replicate=2, dp_shard=-1, tp=2, pp=2, ep=2, world_size=16)
    assert degrees_of(dims) == {"dp_replicate": 2, "dp_shard": 2, "cp": 1, "tp": 2, "pp": 2, "ep": 2, "etp": 1}
    assert degrees_of(SimpleNamespace(tp=4)) == dict(dict.fromkeys(DEGREE_NAMES, 1), tp=4)


def _fake_vl(moe: bool):
    """What a ``parallelize_fn`` reads before its first refusal: ``model.config.text.moe``."""
    return SimpleNamespace(config=SimpleNamespace(text=SimpleNamespace(moe=object() if moe else None)))


@pytest.mark.parametrize("job, name, dims, kw, moe", [
    ("qwen3_vl", "qwen3_vl", ParallelDims(dp_shard=1, cp=2, world_size=2), {}, False),
    ("qwen3_vl", "qwen3_vl_moe", ParallelDims(dp_replicate=2, dp_shard=1, tp=2, world_size=4), {}, True),
    ("qwen3_vl", "qwen3_vl_moe", ParallelDims(dp_shard=1, tp=2, pp=2, ep=2, world_size=4), {}, True),
    ("qwen3_5_vl", "qwen3_5_vl", ParallelDims(dp_shard=1, tp=2, world_size=2), {"loss_parallel": True}, False),
    ("qwen3_5_vl", "qwen3_5_moe_vl", ParallelDims(dp_shard=2, tp=2, pp=2, world_size=8), {}, True),
])
def test_the_ranks_refuse_with_the_config_words(job, name, dims, kw, moe):
    """Each vision-language ``parallelize_fn`` applies :func:`check_vl_layout` on its ``ParallelDims``: the same
    message ``hp-train --check`` gives (the model's registry name from its config's MoE-ness)."""
    if job == "qwen3_vl":
        from hyper_parallel.models.qwen3_vl.train_spec import parallelize_qwen3_vl_job as parallelize
    else:
        from hyper_parallel.models.qwen3_5_vl.parallelize import parallelize_qwen3_5_vl_job as parallelize
    with pytest.raises(ValueError) as expected:
        check_vl_layout(name, degrees_of(dims), moe=moe, loss_parallel=kw.get("loss_parallel", False))
    with pytest.raises(ValueError) as info:
        parallelize(_fake_vl(moe), None, dims, **kw)
    assert str(info.value) == str(expected.value) and f"model.name = {name!r}" in str(info.value)
