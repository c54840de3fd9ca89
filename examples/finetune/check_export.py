# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Reload an exported folder in transformers and compare its logits with ours (the same folder loaded by
``hyper_parallel.checkpoint.load_hf``) on a chat prompt; exits 1 when they differ by more than 1e-5.

    python examples/finetune/check_export.py runs/finetune/hf
"""
import sys

import torch
import transformers

from hyper_parallel.trainer.generate import load_model_and_tokenizer

if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else "runs/finetune/hf"
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    ours, _ = load_model_and_tokenizer(model=folder)
    text = tok.apply_chat_template([{"role": "user", "content": "What does FSDP shard?"}], tokenize=False,
                                   add_generation_prompt=True)
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        diff = (hf(input_ids=ids).logits - ours(ids)).abs().max().item()
        out = hf.generate(ids, max_new_tokens=24, do_sample=False)
    print(f"transformers loads {folder}: {type(hf).__name__}, max |logit diff| vs hyper-parallel {diff:.2e}")
    print(f"transformers generate: {tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)!r}")
    sys.exit(0 if diff <= 1e-5 else 1)
