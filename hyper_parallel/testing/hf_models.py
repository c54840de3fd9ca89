# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Tiny Hugging Face model folders built offline by ``transformers`` (for tests, the fine-tuning example and
benchmarks): a byte-level BPE tokenizer trained on the given texts with a chat template, and a randomly
initialised ``LlamaForCausalLM`` (or another architecture) saved with ``save_pretrained``.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, Optional

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "make_tokenizer", "make_tiny_model", "sft_texts"]

#: a ChatML-like template that renders conversations incrementally (``hyper_parallel.trainer.sft`` needs that)
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SPECIAL_TOKENS = ["<pad>", "<s>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]


def sft_texts(path: str) -> Iterable[str]:
    """Every string of a jsonl file of SFT records (the tokenizer's training text)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            for value in rec.values():
                if isinstance(value, str):
                    yield value
                elif isinstance(value, list):
                    yield from (m.get("content", "") for m in value if isinstance(m, dict))


def make_tokenizer(texts: Iterable[str], folder: str, vocab_size: int = 360) -> Any:
    """Train a byte-level BPE on ``texts`` and save it in ``folder`` as a ``PreTrainedTokenizerFast`` (bos ``<s>``,
    eos ``<|end|>``, pad ``<pad>``, :data:`CHAT_TEMPLATE`); returns the transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<|end|>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def make_tiny_model(folder: str, texts: Iterable[str], *, model_type: str = "llama", seed: int = 0,
                    config: Optional[Dict[str, Any]] = None, vocab_multiple: int = 64) -> str:
    """A tokenizer trained on ``texts`` and a random ``model_type`` model (hidden 64, 2 layers, 4 heads) saved by
    transformers in ``folder``; the embedding has the tokenizer's size rounded up to ``vocab_multiple`` rows (as
    published models pad it). ``config`` overrides fields. Returns ``folder``."""
    import torch
    import transformers
    os.makedirs(folder, exist_ok=True)
    tok = make_tokenizer(texts, folder)
    vocab = -(-len(tok) // vocab_multiple) * vocab_multiple
    fields = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id)
    fields.update(config or {})
    hf_config = transformers.AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
    model.generation_config.bos_token_id = tok.bos_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    return folder
