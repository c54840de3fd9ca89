# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fine-tuning end to end on 2 gloo ranks: a tiny Llama built and saved by transformers is the starting point
(``[model] init_from``) under FSDP, TP, PP and CP (the loss of the loaded model equals transformers' on the same
rows, each rank holding only its shards); SFT with packing trains the same losses as one process under FSDP,
CP and PP; ``export_hf`` writes a folder transformers loads with logits equal to ours; ``hp-ckpt convert``
writes a config.json of the trained shapes; ``hp-generate`` samples from the export."""
import json
import os
import subprocess
import sys

import pytest
import torch

from hyper_parallel.testing import multi_rank

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SFT = os.path.join(ROOT, "examples", "finetune", "sft.jsonl")


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A tiny Llama folder written by transformers (tokenizer with a chat template, padded vocabulary)."""
    from hyper_parallel.testing.hf_models import make_tiny_model, sft_texts
    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama"), list(sft_texts(SFT)))


def _cfg(folder, out, **extra):
    from hyper_parallel.trainer.config import load_config
    overrides = {"model.init_from": f"hf:{folder}", "job.out_dir": out, "data.source": "files", "data.paths": [SFT],
                 "data.format": "messages", "data.eval_fraction": 0.1, "training.seq_len": 64,
                 "training.global_batch": 4, "training.steps": 3, "metrics.progress": False, "metrics.plot": False,
                 "metrics.jsonl": False, "optimizer.lr": 1e-3, "optimizer.total_steps": 10}
    overrides.update({k.replace("__", "."): v for k, v in extra.items()})
    return load_config(None, list(overrides.items()))


def _hf_loss(folder, rows):
    """transformers' mean next-token loss over the loss tokens of unpacked rows (padding masked)."""
    import transformers
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids = torch.tensor([r["input_ids"] for r in rows])
    labels = torch.tensor([r["labels"] for r in rows])
    mask = (torch.tensor([r["doc_ids"] for r in rows]) >= 0).long()
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=mask).logits
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100).item()


LAYOUTS = {"fsdp": {"parallelism.dp_shard": 2}, "tp": {"parallelism.dp_shard": 1, "parallelism.tp": 2},
           "pp": {"parallelism.dp_shard": 1, "parallelism.pp": 2}, "cp": {"parallelism.dp_shard": 1,
                                                                          "parallelism.cp": 2}}


@multi_rank(world_size=2, timeout=300)
def test_init_from_under_every_layout_equals_transformers(tmp_path, tiny_llama):
    """Each layout loads the HF folder (meta build, local shards only) and its loss on the same rows equals
    transformers' loss on one process."""
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer
    want = None
    for name, layout in LAYOUTS.items():
        trainer = LLMTrainer(_cfg(tiny_llama, str(tmp_path / name), data__packing=False, **{
            k.replace(".", "__"): v for k, v in layout.items()}))
        trainer.setup()
        rows = [trainer.dataset.sequence(i) for i in range(4)]
        if want is None:
            want = _hf_loss(tiny_llama, rows)
        b = trainer.backend
        per = 4 // b.dp_size
        got = b.eval_loss(rows[b.dp_rank * per:(b.dp_rank + 1) * per])
        parts = b.model if isinstance(b.model, list) else [b.model]
        local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
                    for part in parts for p in part.parameters())
        total = sum(p.numel() for p in trainer.backend._build_model(trainer.dataset.vocab_size).parameters())
        print(f"init_from {name}: loss {got:.7f} vs transformers {want:.7f}; rank {dist.get_rank()} holds "
              f"{local}/{total} parameters")
        assert abs(got - want) <= 1e-5 * abs(want), (name, got, want)
        assert local < total, (name, local, total)  # FSDP shards over dp_shard x cp; TP / PP split the model
        trainer.close()
        dist.barrier()


def _one_process_losses(cfg, out):
    from hyper_parallel.trainer.api import LLMTrainer, derived_config
    single = derived_config(cfg, parallelism={"dp_shard": -1, "tp": 1, "cp": 1, "ep": 1, "pp": 1},
                            checkpoint={"enable": False, "export_hf": False}, job={"out_dir": out},
                            metrics={"eval_every": 0})
    return [m["loss"] for m in LLMTrainer(single, distributed=False).train()]


SFT_LAYOUTS = {"fsdp": {"parallelism.dp_shard": 2}, "cp": {"parallelism.dp_shard": 1, "parallelism.cp": 2},
               "pp": {"parallelism.dp_shard": 1, "parallelism.pp": 2, "training.grad_accum": 2}}


@multi_rank(world_size=2, timeout=300)
def test_packed_sft_matches_one_process_and_exports_to_transformers(tmp_path, tiny_llama):
    """Packed SFT (document masks, positions restarting per sample, loss on assistant tokens) trains the same
    losses on 2 ranks under FSDP, CP and PP as on one process; the FSDP run's export loads in transformers with
    logits equal to ours."""
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer
    for name, layout in SFT_LAYOUTS.items():
        cfg = _cfg(tiny_llama, str(tmp_path / name), checkpoint__export_hf=name == "fsdp",
                   **{k.replace(".", "__"): v for k, v in layout.items()})
        trainer = LLMTrainer(cfg)
        got = [m["loss"] for m in trainer.train()]
        full = None
        if name == "fsdp":  # every rank takes part in the gather
            from hyper_parallel.checkpoint._torch.state_dict import get_model_state_dict
            from hyper_parallel.checkpoint.api import StateDictOptions
            full = get_model_state_dict(trainer.backend.model, options=StateDictOptions(full_state_dict=True))
        trainer.close()
        if dist.get_rank() == 0:
            want = _one_process_losses(cfg, str(tmp_path / f"{name}-single"))
            print(f"packed SFT {name}: {got} vs one process {want}")
            assert all(abs(a - b) <= 2e-5 * abs(b) for a, b in zip(got, want)), (name, got, want)
            if full is not None:
                _check_export(trainer, full, str(tmp_path / name / "hf"))
        dist.barrier()


def _check_export(trainer, full, folder):
    import transformers
    names = set(os.listdir(folder))
    assert {"config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
            "tokenizer_config.json"} <= names, names
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    assert hf.model.embed_tokens.weight.shape[0] == config["vocab_size"] == trainer.backend.model_config.vocab_size
    ours = trainer.backend.model_config
    from hyper_parallel.trainer.models import model_spec
    single = model_spec("llama3").model_cls(ours).eval()
    single.load_state_dict({k: v.detach() for k, v in full.items()})
    ids = torch.tensor([trainer.dataset.sequence(0)["input_ids"][:40]])
    with torch.no_grad():
        diff = (hf(input_ids=ids).logits - single(ids)).abs().max().item()
    print(f"export: transformers logits vs ours {diff:.2e}")
    assert diff <= 1e-5
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert tok.chat_template and tok.eos_token == "<|end|>"


def test_convert_generate_and_resume_from_a_converted_folder(tmp_path, tiny_llama, capsys):
    """One process: a trained checkpoint converts to an HF folder whose config.json has the trained vocabulary
    (the flavor's adapter says 256 rows, the tensors have the tokenizer's 384) and which transformers loads with
    our logits; HF -> DCP nests the model under "model" and a run refuses to resume from it in one line;
    hp-generate samples from the export (greedy twice the same, top-p) and from the trainer config."""
    import transformers
    from hyper_parallel.checkpoint.cli import main as ckpt_main
    from hyper_parallel.trainer.api import LLMTrainer
    from hyper_parallel.trainer.generate import main as generate_main
    cfg = _cfg(tiny_llama, str(tmp_path / "run"), training__steps=2, checkpoint__enable=True,
               checkpoint__interval=2, checkpoint__async_mode="disabled", checkpoint__resume=False)
    trainer = LLMTrainer(cfg, distributed=False)
    trainer.train()
    step = trainer.checkpointer.checkpoint_path(2)
    out = str(tmp_path / "hf")
    assert ckpt_main(["convert", step, out, "--to", "hf", "--tokenizer", tiny_llama,
                      "--adapter", "hyper_parallel.models.llama3.state_dict_adapter:debug_adapter"]) == 0
    with open(os.path.join(out, "config.json"), encoding="utf-8") as fh:
        assert json.load(fh)["vocab_size"] == trainer.backend.model_config.vocab_size == 384
    assert {"generation_config.json", "tokenizer.json", "chat_template.jinja"} <= set(os.listdir(out))
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
    ids = torch.tensor([trainer.dataset.sequence(0)["input_ids"][:30]])
    with torch.no_grad():
        diff = (hf(input_ids=ids).logits - trainer.backend.model.eval()(ids)).abs().max().item()
    print(f"hp-ckpt convert --to hf: transformers logits vs ours {diff:.2e}")
    assert diff <= 1e-5

    again = LLMTrainer(_cfg(tiny_llama, str(tmp_path / "again"), checkpoint__enable=True,
                            checkpoint__folder=str(tmp_path / "ckpts")), distributed=False)
    again.setup()
    dcp_dir = again.checkpointer.checkpoint_path(5)
    assert ckpt_main(["convert", out, dcp_dir, "--to", "dcp", "--adapter",
                      "hyper_parallel.models.llama3.state_dict_adapter:debug_adapter"]) == 0
    from hyper_parallel.checkpoint.cli import summarize
    assert "model.model.embed_tokens.weight" in summarize(dcp_dir)["tensors"]
    with pytest.raises(ValueError, match=r"holds the model weights only \(no data, lr_scheduler, optim, rng, "
                                         r"trainer state.*model.init_from = 'hf:DIR'"):
        again.resume(5)

    capsys.readouterr()
    args = ["--model", out, "--prompt", "What does FSDP shard?", "--chat", "--max-new-tokens", "6"]
    assert generate_main(args) == 0 and generate_main(args) == 0
    greedy = capsys.readouterr().out.splitlines()
    assert len(greedy) == 2 and greedy[0] == greedy[1] and greedy[0].startswith("What does FSDP shard? -> ")
    assert generate_main(args + ["--top-p", "0.9", "--temperature", "1.5", "--seed", "3"]) == 0
    config_path = str(tmp_path / "run.toml")
    with open(config_path, "w", encoding="utf-8") as fh:
        fh.write(f'[model]\ninit_from = "hf:{tiny_llama}"\n[job]\nout_dir = "{tmp_path / "run"}"\n'
                 f'[data]\nsource = "files"\npaths = ["{SFT}"]\nformat = "messages"\n')
    assert generate_main(["--config", config_path, "--prompt", "Hi", "--max-new-tokens", "3"]) == 0
    assert generate_main(["--model", str(tmp_path / "nothing"), "--prompt", "x"]) == 2
    assert "hp-generate: error: --model:" in capsys.readouterr().err


def test_seeds_and_trackers_tensorboard_and_wandb_offline(tmp_path, tiny_llama, monkeypatch):
    """job.seed seeds Python's random and NumPy too; [metrics] tensorboard writes event files and wandb = "offline"
    writes a local run, without any network."""
    import random

    import numpy as np
    from hyper_parallel.trainer.api import LLMTrainer
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = _cfg(tiny_llama, str(tmp_path / "run"), training__steps=2, job__seed=7, metrics__tensorboard=True,
               metrics__wandb="offline", metrics__wandb_project="hp-test")
    trainer = LLMTrainer(cfg, distributed=False)
    trainer.setup()
    assert random.random() == random.Random(7).random()
    assert np.random.rand() == np.random.RandomState(7).rand()
    trainer.train()
    events = [n for n in os.listdir(tmp_path / "run" / "tb") if n.startswith("events.out.tfevents")]
    assert events and os.path.getsize(tmp_path / "run" / "tb" / events[0]) > 0
    runs = [n for n in os.listdir(tmp_path / "run" / "wandb") if n.startswith("offline-run-")]
    assert runs, os.listdir(tmp_path / "run" / "wandb")
    assert any(n.endswith(".wandb") for n in os.listdir(tmp_path / "run" / "wandb" / runs[0]))


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory):
    """A tiny Qwen3-MoE folder written by transformers (4 experts, top 2)."""
    from hyper_parallel.testing.hf_models import make_tiny_model, sft_texts
    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "moe"), list(sft_texts(SFT)), model_type="qwen3_moe",
                           config={"moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
                                   "norm_topk_prob": True, "head_dim": 16})


@multi_rank(world_size=2, timeout=300)
def test_init_from_moe_under_expert_parallel_equals_transformers(tmp_path, tiny_moe):
    """A Qwen3-MoE folder loads under EP x FSDP (each rank reads its experts' slices) with transformers' loss."""
    from hyper_parallel.trainer.api import LLMTrainer
    trainer = LLMTrainer(_cfg(tiny_moe, str(tmp_path / "ep"), data__packing=False, parallelism__ep=2,
                              parallelism__dp_shard=2))
    trainer.setup()
    assert trainer.config.model.name == "qwen3_moe"
    rows = [trainer.dataset.sequence(i) for i in range(4)]
    want = _hf_loss(tiny_moe, rows)
    b = trainer.backend
    per = 4 // b.dp_size
    got = b.eval_loss(rows[b.dp_rank * per:(b.dp_rank + 1) * per])
    print(f"init_from qwen3_moe ep=2: loss {got:.7f} vs transformers {want:.7f}")
    assert abs(got - want) <= 1e-5 * abs(want), (got, want)
    trainer.close()
