# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Write a tiny Llama as a Hugging Face folder, offline: a byte-level BPE tokenizer (with a chat template) trained
on examples/finetune/sft.jsonl and a random ``LlamaForCausalLM`` built by transformers from a config and saved
with ``save_pretrained``. ``make finetune`` starts from it (configs/finetune.toml).

    python examples/finetune/make_tiny_llama.py [FOLDER]   # default runs/tiny-llama
"""
import os
import sys

from hyper_parallel.testing.hf_models import make_tiny_model, sft_texts

HERE = os.path.dirname(os.path.abspath(__file__))

if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else "runs/tiny-llama"
    make_tiny_model(folder, list(sft_texts(os.path.join(HERE, "sft.jsonl"))))
    print(f"wrote a tiny Llama (transformers save_pretrained) to {folder}: {sorted(os.listdir(folder))}")
