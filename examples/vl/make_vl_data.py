# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Write the VL demo's inputs, offline: the generated image-caption set (shapes and colours drawn with Pillow,
captions from the drawing) and a Qwen3-VL processor folder (a BPE tokenizer trained on the captions with a chat
template, a Qwen2-VL image processor config). ``make vl-demo`` runs it, then ``hp-train --config
configs/vl_demo.toml``.

    python examples/vl/make_vl_data.py [FOLDER] [N]   # default runs/vl_data, 96 images
"""
import os
import sys

from hyper_parallel.trainer.vl_data import draw_caption_set
from hyper_parallel.trainer.vl_sft import make_vl_processor, vl_texts

if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else "runs/vl_data"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 96
    captions = draw_caption_set(os.path.join(folder, "set"), n=n, seed=0)
    make_vl_processor(os.path.join(folder, "processor"), vl_texts(captions))
    print(f"wrote {n} images and {captions}, and the processor folder {folder}/processor")
