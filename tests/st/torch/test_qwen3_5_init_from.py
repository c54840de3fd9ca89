# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Qwen3.5 / Qwen3.5-MoE text models start from Hugging Face folders and export them (``[model] init_from`` /
``[checkpoint] export_hf``), 2 gloo ranks under FSDP.

* A ``Qwen3_5ForCausalLM`` / ``Qwen3_5MoeForCausalLM`` folder written by transformers (``model_type``
  ``qwen3_5_text`` / ``qwen3_5_moe_text``: the name comes from it) is read shard by shard, trained one step at
  learning rate 0 and exported: every exported tensor equals the original bit for bit (the parameters are
  allocated uninitialised before the load, so a tensor the load missed would differ) and transformers loads the
  export back to the same tensors.
* ``[model] name = "qwen3_5"`` (``"qwen3_5_moe"``) with a ``Qwen3_5ForConditionalGeneration`` folder (the
  published checkpoints' class, tied head as Qwen3.5-0.8B) trains its language model: the banner notes the
  skipped vision tensors, our text model's logits equal transformers' on the same weights, and the export is a
  text-only ``Qwen3_5ForCausalLM`` folder that transformers loads with the same logits."""
import json
import os

import pytest
import torch
from safetensors.torch import load_file

import transformers
from hyper_parallel.testing import multi_rank

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SFT = os.path.join(ROOT, "examples", "finetune", "sft.jsonl")
_TEXT = dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
             linear_key_head_dim=16, linear_value_head_dim=16, full_attention_interval=2, tie_word_embeddings=False)
_MOE = dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, shared_expert_intermediate_size=32)


def _tensors(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, name)))
    return out


def _save(model, folder):
    """Save ``model`` with its norms and ``dt_bias`` moved off their constant initial values (a tensor the load
    left out or mixed up would then differ)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("dt_bias"):
                p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(folder)


@pytest.fixture(scope="module")
def q35_folders(tmp_path_factory):
    """{kind: folder}: text ``qwen3_5`` / ``qwen3_5_moe`` and vision-language ``qwen3_5_vl`` / ``qwen3_5_moe_vl``
    folders written by transformers, each with a tokenizer (chat template) trained on the SFT texts."""
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.testing.hf_models import make_tokenizer, sft_texts
    root, texts, out = tmp_path_factory.mktemp("q35"), list(sft_texts(SFT)), {}
    torch.manual_seed(0)
    for kind, config in (("qwen3_5", transformers.Qwen3_5TextConfig(**_TEXT)),
                         ("qwen3_5_moe", transformers.Qwen3_5MoeTextConfig(**_TEXT, **_MOE))):
        folder = str(root / kind)
        make_tokenizer(texts, folder)
        _save(transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32), folder)
        out[kind] = folder
    for kind, cls in (("qwen3_5_vl", "Qwen3_5"), ("qwen3_5_moe_vl", "Qwen3_5Moe")):
        spec = get_model_spec(kind)
        hf_cfg = getattr(transformers, cls + "Config")(**spec.state_dict_adapter(spec.config("debug")).hf_config())
        folder = str(root / kind)
        make_tokenizer(texts, folder)
        _save(getattr(transformers, cls + "ForConditionalGeneration")(hf_cfg).float(), folder)
        out[kind] = folder
    return out


def _cfg(folder, out, **extra):
    from hyper_parallel.trainer.config import load_config
    overrides = {"model.init_from": f"hf:{folder}", "job.out_dir": out, "data.source": "files", "data.paths": [SFT],
                 "data.format": "messages", "training.seq_len": 64, "training.global_batch": 4, "training.steps": 1,
                 "optimizer.lr": 0.0, "optimizer.weight_decay": 0.0, "metrics.progress": False,
                 "metrics.plot": False, "metrics.jsonl": False, "metrics.eval_every": 0, "checkpoint.enable": False,
                 "checkpoint.export_hf": True, "parallelism.dp_shard": 2}
    overrides.update({k.replace("__", "."): v for k, v in extra.items()})
    return load_config(None, list(overrides.items()))


def _export_config(export):
    with open(os.path.join(export, "config.json"), encoding="utf-8") as fh:
        return json.load(fh)


@multi_rank(world_size=2, timeout=400)
def test_text_folders_init_from_and_export_bit_exact(tmp_path, q35_folders):
    """A transformers text folder -> 2-rank FSDP load -> lr 0 step -> export: bit-exact, transformers reads it."""
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer
    for kind, model_type in (("qwen3_5", "qwen3_5_text"), ("qwen3_5_moe", "qwen3_5_moe_text")):
        out = str(tmp_path / kind)
        trainer = LLMTrainer(_cfg(q35_folders[kind], out))
        assert trainer.config.model.name == kind and trainer.config.model.flavor == "hf"
        history = trainer.train()
        assert len(history) == 1 and history[0]["loss"] > 0
        trainer.close()
        if dist.get_rank() == 0:
            export, original = os.path.join(out, "hf"), _tensors(q35_folders[kind])
            exported = _tensors(export)
            assert sorted(exported) == sorted(original), (kind, sorted(set(exported) ^ set(original))[:5])
            assert all(torch.equal(exported[k], original[k]) for k in original), kind
            assert _export_config(export)["model_type"] == model_type
            back = transformers.AutoModelForCausalLM.from_pretrained(export)
            back.save_pretrained(os.path.join(out, "resaved"))  # transformers' in-memory names fuse the experts
            resaved = _tensors(os.path.join(out, "resaved"))
            assert sorted(resaved) == sorted(original), kind
            assert all(torch.equal(resaved[k], original[k]) for k in original), kind
            print(f"{kind}: {len(original)} tensors exported bit-exact; transformers loads {type(back).__name__}")
        dist.barrier()


def _hf_logits(folder, ids, cls):
    hf = getattr(transformers, cls).from_pretrained(folder).eval()
    with torch.no_grad():
        return hf(input_ids=ids).logits


def _check_text_export(folder, out, ids, ours, cls, text, vision):
    """Our logits equal transformers' VL model's; the export is its language model, text-only, bit for bit,
    and transformers' text class reloads it with the same logits."""
    want = _hf_logits(folder, ids, cls + "ForConditionalGeneration")
    diff = (ours - want).abs().max().item()
    export, original = os.path.join(out, "hf"), _tensors(folder)
    exported = _tensors(export)
    language = {"model." + k[len("model.language_model."):]: v for k, v in original.items()
                if k.startswith("model.language_model.")}
    language.update({k: v for k, v in original.items() if k == "lm_head.weight"})
    assert sorted(exported) == sorted(language), (text, sorted(set(exported) ^ set(language))[:5])
    assert all(torch.equal(exported[k], language[k]) for k in language), text
    config = _export_config(export)
    assert config["model_type"] == text + "_text" and config["tie_word_embeddings"] is True
    back_diff = (_hf_logits(export, ids, cls + "ForCausalLM") - want).abs().max().item()
    print(f"{text} from a {cls}ForConditionalGeneration folder: ours vs transformers logits {diff:.2e}; "
          f"text-only export reloaded {back_diff:.2e}; {vision} vision tensors skipped")
    assert diff <= 1e-5, (text, diff)
    assert back_diff <= 1e-5, (text, back_diff)


@multi_rank(world_size=2, timeout=400)
def test_language_model_of_a_vl_folder(tmp_path, q35_folders):
    """``name = "qwen3_5"`` with a Qwen3_5ForConditionalGeneration folder: the language model only, with
    transformers' logits; the export is a text-only folder transformers loads with the same logits."""
    import torch.distributed as dist
    from hyper_parallel.trainer.api import LLMTrainer
    from hyper_parallel.trainer.finetune import banner_lines
    for kind, text, cls in (("qwen3_5_vl", "qwen3_5", "Qwen3_5"), ("qwen3_5_moe_vl", "qwen3_5_moe", "Qwen3_5Moe")):
        folder, out = q35_folders[kind], str(tmp_path / kind)
        trainer = LLMTrainer(_cfg(folder, out, model__name=text))
        trainer.setup()
        assert trainer.config.model.name == text
        vision = sum(1 for k in _tensors(folder) if k.startswith("model.visual."))
        lines = [x for x in banner_lines(trainer) if "model.visual" in x]
        assert len(lines) == 1 and f"{vision} other tensors" in lines[0] and vision > 0, banner_lines(trainer)
        ids = torch.tensor([trainer.dataset.sequence(0)["input_ids"][:40]])
        with torch.no_grad():
            ours = trainer.backend.model(ids)
        ours = ours.full_tensor() if hasattr(ours, "full_tensor") else ours
        trainer.train()
        trainer.close()
        if dist.get_rank() == 0:
            _check_text_export(folder, out, ids, ours, cls, text, vision)
        dist.barrier()


def test_sft_document_mask_equals_each_document_alone():
    """The trainer's packed SFT inputs (restarting positions, the boolean ``[b, 1, s, s]`` document mask, padding
    at the end) give each document's logits as the document alone does, for both layer kinds."""
    from hyper_parallel.models import get_model_spec
    from hyper_parallel.trainer._torch.finetune import sft_inputs
    torch.manual_seed(0)
    model = get_model_spec("qwen3_5").build("debug").eval()
    lengths, pad = (7, 11, 5), 9
    ids = torch.randint(0, 256, (sum(lengths) + pad,))
    row = {"input_ids": ids.tolist(), "labels": ids.tolist(),
           "position_ids": [p for n in lengths for p in range(n)] + list(range(pad)),
           "doc_ids": [d for d, n in enumerate(lengths) for _ in range(n)] + [-1] * pad}
    t = sft_inputs([row])
    assert t["attention_mask"].shape == (1, 1, len(ids), len(ids))
    with torch.no_grad():
        packed = model(t["input_ids"], position_ids=t["position_ids"], attention_mask=t["attention_mask"])[0]
        start = 0
        for n in lengths:
            alone = model(ids[None, start:start + n])[0]
            assert (packed[start:start + n] - alone).abs().max().item() <= 1e-5, (start, n)
            start += n
