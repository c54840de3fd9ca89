# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: ``HyperParallelArguments`` (the JSON of ``hyper_parallel_args``) parsing and refusals, LlamaFactory's
``from_finetuning_args`` entry, the CP input split, and that the integration packages import no framework."""
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from hyper_parallel.integration.transformers import HyperParallelArguments
from hyper_parallel.integration.llamafactory.context_parallel import shard_inputs_for_cp


def test_defaults_and_degrees():
    args = HyperParallelArguments()
    assert args.degrees() == {"dp_replicate": 1, "dp_shard": -1, "cp": 1, "tp": 1}
    assert args.activation_config() is None
    full = HyperParallelArguments.from_dict({"tp_size": 2, "dp_replicate_size": 2, "param_dtype": "bf16",
                                             "activation_mode": "swap",
                                             "activation": {"swap": {"target": "disk", "dir": "/tmp"}}})
    assert full.degrees() == {"dp_replicate": 2, "dp_shard": -1, "cp": 1, "tp": 2}
    assert full.activation_config() == {"mode": "swap", "swap": {"target": "disk", "dir": "/tmp"}}
    assert HyperParallelArguments.from_dict(full.to_dict()) == full


@pytest.mark.parametrize("data, message", [
    ({"tp_szie": 2}, "hyper_parallel_args.tp_szie: unknown key (known: tp_size, cp_size, "),
    ({"tp_szie": 2}, "did you mean 'tp_size'?"),
    ({"tp_size": 0}, "hyper_parallel_args.tp_size: expected an int >= 1, got 0"),
    ({"tp_size": True}, "hyper_parallel_args.tp_size: expected an int >= 1, got True"),
    ({"dp_shard_size": -2}, "hyper_parallel_args.dp_shard_size: expected an int >= 1 or -1"),
    ({"param_dtype": "half"}, "hyper_parallel_args.param_dtype: expected one of float32, fp32, bfloat16"),
    ({"activation_mode": "selective"}, "activation_mode: expected one of none, full, selective-op, every-k, swap, "
                                       "got 'selective'; did you mean 'selective-op'?"),
    ({"activation_mode": "swap", "activation": {"swap": {"target": "ssd"}}},
     "hyper_parallel_args.activation.swap.target: expected one of"),
    ({"activation_mode": "full", "activation": {"evry_k": 2}}, "hyper_parallel_args.activation.evry_k: unknown key"),
    ({"activation": {"every_k": 2}}, "hyper_parallel_args.activation: given while activation_mode is 'none'"),
    ({"activation_mode": "full", "activation": {"mode": "full"}}, "hyper_parallel_args.activation.mode: give the"),
    ({"reshard_after_forward": 0}, "hyper_parallel_args.reshard_after_forward: expected true, false or a positive"),
    ({"wrap_modules": "LlamaDecoderLayer"}, "hyper_parallel_args.wrap_modules: expected a list of module class"),
])
def test_bad_values_are_one_line_naming_the_key(data, message):
    with pytest.raises(ValueError) as info:
        HyperParallelArguments.from_dict(data)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_from_finetuning_args(tmp_path):
    assert HyperParallelArguments.from_finetuning_args(SimpleNamespace()) == HyperParallelArguments()
    path = tmp_path / "hp.json"
    path.write_text(json.dumps({"tp_size": 2, "activation_mode": "full"}))
    args = HyperParallelArguments.from_finetuning_args(SimpleNamespace(hyper_parallel_args=str(path)))
    assert (args.tp_size, args.activation_mode) == (2, "full")
    inline = HyperParallelArguments.from_finetuning_args(SimpleNamespace(hyper_parallel_args='{"tp_size": 2}'))
    assert inline.tp_size == 2
    cp = HyperParallelArguments.from_finetuning_args(SimpleNamespace(hyper_parallel_args=None,
                                                                     hyper_parallel_cp_size=2))
    assert cp.cp_size == cp.context_parallel_size == 2
    cp.context_parallel_size = 4
    assert cp.cp_size == 4
    with pytest.raises(ValueError, match=r"hyper_parallel_args: '.*missing.json' is not a file"):
        HyperParallelArguments.from_finetuning_args(SimpleNamespace(hyper_parallel_args=str(tmp_path / "missing.json")))
    path.write_text("{tp_size: 2")
    with pytest.raises(ValueError, match=r"hp.json: invalid JSON"):
        HyperParallelArguments.from_finetuning_args(SimpleNamespace(hyper_parallel_args=str(path)))
    path.write_text(json.dumps({"cp_size": 4}))
    with pytest.raises(ValueError, match="cp_size: 4 differs from hyper_parallel_cp_size=2"):
        HyperParallelArguments.from_finetuning_args(SimpleNamespace(hyper_parallel_args=str(path),
                                                                    hyper_parallel_cp_size=2))


class _Seq:
    """A stand-in for a 2-D tensor: records the slice it was cut with (no framework in UT)."""

    def __init__(self, n, cut=None):
        self.shape, self.cut = (1, n), cut

    def dim(self):
        return 2

    def __getitem__(self, index):
        return _Seq(index[1].stop - index[1].start, (index[1].start, index[1].stop))

    def contiguous(self):
        return self


def test_shard_inputs_for_cp():
    inputs = {"input_ids": _Seq(8), "labels": _Seq(8), "pixel_values": "kept"}
    out = shard_inputs_for_cp(inputs, 1, 2)
    assert out["input_ids"].cut == (4, 8) and out["labels"].cut == (4, 8) and out["pixel_values"] == "kept"
    assert shard_inputs_for_cp(inputs, 0, 1)["input_ids"] is inputs["input_ids"]
    with pytest.raises(ValueError, match=r"inputs\['input_ids'\] has sequence length 8, not divisible by cp_size=3"):
        shard_inputs_for_cp(inputs, 0, 3)
    with pytest.raises(ValueError, match=r"shard_inputs_for_cp\(cp_rank\): expected an int in \[0, 2\), got 2"):
        shard_inputs_for_cp(inputs, 2, 2)


def test_integration_packages_import_no_framework():
    code = ("import sys, hyper_parallel.integration.transformers, hyper_parallel.integration.llamafactory, "
            "hyper_parallel.integration.llamafactory.context_parallel as cp; "
            "bad = [m for m in ('torch', 'transformers', 'accelerate', 'mindspore') if m in sys.modules]; "
            "assert not bad, bad; print(sorted(hyper_parallel.integration.llamafactory.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    names = eval(out)  # pylint: disable=eval-used
    assert {"HSDPModule", "HyperParallelArguments", "HyperParallelTrainer", "fsdp2_prepare_model",
            "hsdp_sync_stream", "clip_grad_norm_", "save_hsdp_checkpoint", "load_hsdp_model",
            "load_hsdp_optimizer_and_scheduler", "export_to_hf_format",
            "wrap_optimizer_with_skip_dtensor_dispatch"} <= set(names)
