# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: ``hp-ckpt`` on a checkpoint saved by 2 ranks — inspect, verify, convert to hf / torch / dcp and back,
in one process without a process group."""
import json
import os
import subprocess
import sys

from click.testing import CliRunner

from hyper_parallel.testing import multi_rank


@multi_rank(world_size=2, timeout=120)
def save_training_checkpoint(path):
    """FSDP Llama + AdamW after one step, saved with a step counter; returns the full parameters (rank 0)."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    from tests.st.torch.test_checkpoint import fsdp_llama, full_params, llama_batch, llama_step
    mesh = hp.init_device_mesh("cpu", (2,))
    model = fsdp_llama(0, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    llama_step(model, opt, llama_batch(0, dist.get_rank(), 2))
    msd, osd = ckpt.get_state_dict(model, opt)
    ckpt.save({"model": msd, "optim": osd, "step": 1}, checkpoint_id=path)
    return full_params(model)


def _cli(*args):
    from hyper_parallel.checkpoint.cli import cli
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result.exit_code, result.output


def test_hp_ckpt_inspect_verify_convert(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from hyper_parallel import checkpoint as ckpt
    src = tmp_path / "ckpt"
    want = save_training_checkpoint(src)

    # the console script, in a fresh interpreter (inspect of our format imports no framework)
    out = subprocess.run([sys.executable, "-m", "hyper_parallel.checkpoint.cli", "inspect", str(src), "--json"],
                         check=True, capture_output=True, text=True).stdout
    s = json.loads(out)
    assert s["format"] == "hyper-parallel" and s["world_size"] == 2 and s["objects"]["step"] == 1
    w = s["tensors"]["model.model.layers.0.mlp.up_proj.weight"]
    assert w == {"dtype": "float32", "shape": [128, 64], "shards": 2, "bytes": 128 * 64 * 4}
    assert s["tensors"]["optim.state.lm_head.weight.exp_avg"]["shards"] == 2
    assert s["total_bytes"] == sum(t["bytes"] for t in s["tensors"].values())
    code, text = _cli("inspect", src, "--verify")
    assert code == 0 and "every chunk and object matches its checksum" in text and "model.model.norm.weight" in text

    # Hugging Face in bf16 with the Llama adapter
    adapter = "hyper_parallel.models.llama3.state_dict_adapter:debug_adapter"
    code, text = _cli("convert", src, tmp_path / "hf", "--to", "hf", "--dtype", "bfloat16", "--adapter", adapter,
                      "--max-file-bytes", 100_000)
    assert code == 0, text
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    read = {}
    for f in set(index["weight_map"].values()):
        read.update(load_file(str(tmp_path / "hf" / f)))
    assert sorted(read) == sorted(want)
    for name, value in want.items():
        assert torch.equal(read[name], value.bfloat16()), name
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "llama"

    # one torch file; HF back to our DCP format; our format to torch's DCP format
    code, text = _cli("convert", src, tmp_path / "all.pt", "--to", "torch")
    assert code == 0, text
    full = torch.load(tmp_path / "all.pt", weights_only=False)
    assert full["step"] == 1 and sorted(full["model"]) == sorted(want)
    for name, value in want.items():
        assert torch.equal(full["model"][name], value), name
    code, text = _cli("convert", tmp_path / "hf", tmp_path / "from_hf", "--to", "dcp")
    assert code == 0, text
    # HF -> DCP nests the weights under "model", as the trainer's {"model": ModelState(m)} loads them
    back = {"model": {name: torch.zeros_like(v) for name, v in want.items()}}
    ckpt.load(back, checkpoint_id=tmp_path / "from_hf")
    for name, value in want.items():
        assert torch.equal(back["model"][name], value.bfloat16().float()), name
    code, text = _cli("convert", src, tmp_path / "torch_dcp", "--to", "dcp", "--torch-format")
    assert code == 0, text
    tgt = {"model": {name: torch.zeros_like(v) for name, v in want.items()}, "step": 0}
    dcp.load(tgt, checkpoint_id=tmp_path / "torch_dcp", no_dist=True)
    assert tgt["step"] == 1 and all(torch.equal(tgt["model"][n], v) for n, v in want.items())
    code, text = _cli("inspect", tmp_path / "torch_dcp")
    assert code == 0 and "torch-dcp" in text

    # a damaged chunk: verify names the file and fails
    victim = src / "__0_0.safetensors"
    raw = bytearray(victim.read_bytes())
    raw[-100] ^= 0xFF
    victim.write_bytes(bytes(raw))
    code, text = _cli("inspect", src, "--verify")
    assert code == 1 and "__0_0.safetensors" in text and "checksum mismatch" in text
    code, text = _cli("convert", src, tmp_path / "x", "--to", "torch", "--dtype", "bfloat16")
    assert code == 2 and "--dtype applies to --to hf" in text
    assert not os.path.exists(tmp_path / "x")
