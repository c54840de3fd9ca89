# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Write the tiny models LlamaFactory fine-tunes in ``make llamafactory-check``, offline:
``python make_assets.py OUT`` -> ``OUT/llama`` (``LlamaForCausalLM``) and ``OUT/qwen3`` (``Qwen3ForCausalLM``,
tied embeddings), random weights from a fixed seed, saved by ``transformers`` with a byte-level BPE tokenizer
trained (``tokenizers``) on the two datasets of ``data/``."""
import json
import os
import sys

import torch
import transformers
from tokenizers import ByteLevelBPETokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]


def _texts():
    with open(os.path.join(HERE, "data", "alpaca_tiny.json"), encoding="utf-8") as fh:
        for row in json.load(fh):
            yield " ".join((row["instruction"], row["input"], row["output"]))
    with open(os.path.join(HERE, "data", "sharegpt_tiny.json"), encoding="utf-8") as fh:
        for row in json.load(fh):
            yield " ".join([row["system"]] + [t["value"] for t in row["conversations"]])
    yield "Human: Assistant: System:"


def tokenizer() -> "transformers.PreTrainedTokenizerFast":
    """A byte-level BPE trained on the two datasets, as a transformers fast tokenizer."""
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(list(_texts()), vocab_size=400, min_frequency=1, special_tokens=SPECIAL)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>",
                                                eos_token="</s>", unk_token="<unk>")


def main(out: str) -> None:  # pylint: disable=unexpected-keyword-arg  # transformers 5 configs: **kwargs inits
    """Write both models and the tokenizer under ``out``."""
    tok = tokenizer()
    common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, pad_token_id=tok.pad_token_id,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    # transformers 5's config classes take their fields as keyword arguments; pylint does not infer them
    configs = {"llama": transformers.LlamaConfig(tie_word_embeddings=False, **common),  # pylint: disable=E1123
               "qwen3": transformers.Qwen3Config(head_dim=16, tie_word_embeddings=True, **common)}  # pylint: disable=E1123
    for name, config in configs.items():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(os.path.join(out, name))
        tok.save_pretrained(os.path.join(out, name))
        print(f"wrote {os.path.join(out, name)}: {type(model).__name__}, "
              f"{sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main(sys.argv[1])
