# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the TorchTitan-style model split (layers per stage, lighter first/last stage, module cut)."""
import pytest
import torch

from hyper_parallel.pipeline.split import check_layers_per_stage, module_names_per_stage, split_layers, stage_ids_of_rank


@pytest.mark.parametrize("layers,stages,first,last,want", [
    (8, 2, 1, 1, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (8, 4, 1, 1, [[0, 1], [2, 3, 4], [5, 6], [7]]),
    (6, 4, 0, 0, [[0, 1], [2, 3], [4], [5]]),
    (4, 4, 1, 1, [[0], [1, 2], [3], []]),
    (3, 1, 1, 1, [[0, 1, 2]]),
])
def test_split_layers(layers, stages, first, last, want):
    got = split_layers(layers, stages, first, last)
    assert got == want
    assert sum(got, []) == list(range(layers))


def test_split_errors_and_names():
    with pytest.raises(ValueError, match="split_layers"):
        split_layers(1, 4)
    with pytest.raises(ValueError, match="positive int"):
        split_layers(0, 2)
    names = module_names_per_stage(4, 2, layer_prefix="model.layers", first=("model.embed_tokens",),
                                   last=("model.norm", "lm_head"))
    assert names == [["model.embed_tokens", "model.layers.0", "model.layers.1"],
                     ["model.layers.2", "model.layers.3", "model.norm", "lm_head"]]
    assert stage_ids_of_rank(1, 4, 2, "v") == [1, 6] and stage_ids_of_rank(1, 4, 2) == [1, 5]


def test_module_split_keeps_names_and_forward():
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM
    from hyper_parallel.pipeline._torch.split import pipeline_module_split
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=4))
    names = module_names_per_stage(4, 3, layer_prefix="model.layers", first=("model.embed_tokens",),
                                   last=("model.norm", "lm_head"))
    parts = pipeline_module_split(model, names)
    params = dict(model.named_parameters())
    seen = []
    for part in parts:
        for n, p in part.named_parameters():
            torch.testing.assert_close(p, params[n])
            seen.append(n)
    assert sorted(seen) == sorted(params)
    ids = torch.randint(0, 256, (2, 8))
    h = ids
    for part in parts:
        h = part(h)
    torch.testing.assert_close(h, model(ids), rtol=0, atol=0)
    with pytest.raises(ValueError, match="not a submodule"):
        pipeline_module_split(model, [["model.nothing"]])
    with pytest.raises(ValueError, match="more than one stage"):
        pipeline_module_split(model, [["lm_head"], ["lm_head"]])


def test_explicit_layers_per_stage():
    assert check_layers_per_stage([3, 5], 8, 2) == [[0, 1, 2], [3, 4, 5, 6, 7]]
    assert check_layers_per_stage([0, 2], 2, 2) == [[], [0, 1]]
    names = module_names_per_stage(2, 2, layer_prefix="model.layers", first=("embed",), last=("head",),
                                   layers_per_stage=[2, 0])
    assert names == [["embed", "model.layers.0", "model.layers.1"], ["head"]]


@pytest.mark.parametrize("split, layers, stages, needle", [
    ([3, 4], 8, 2, "pp_split: [3, 4] sums to 7 layers; the model has 8"),
    ([8], 8, 2, "pp_split: [8] has 1 entries; expected one per pipeline stage: 2"),
    ([4, 0, 4], 8, 3, "pp_split: [4, 0, 4]: only the first and the last stage may hold 0 layers"),
    ([4, -1, 5], 8, 3, "pp_split: expected non-negative ints, got [4, -1, 5]"),
    ([4, True], 5, 2, "pp_split: expected non-negative ints"),
])
def test_explicit_layers_per_stage_errors(split, layers, stages, needle):
    with pytest.raises(ValueError) as err:
        check_layers_per_stage(split, layers, stages, what="pp_split")
    assert needle in str(err.value)
