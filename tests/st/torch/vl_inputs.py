# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Inputs of the Qwen3-VL tests: images drawn with Pillow and preprocessed by transformers' Qwen2-VL image
processor (two sizes), a text-only sample, padding on both sides, and a 4-frame video patchified in the
processor's order; the special token ids of the ``debug`` flavor."""
import torch
from PIL import Image, ImageDraw

import transformers

PATCH, MERGE, TPS = 8, 2, 2


def _image(width, height, colour, shape="ellipse"):
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    box = [width // 5, height // 5, 4 * width // 5, 4 * height // 5]
    (draw.ellipse if shape == "ellipse" else draw.rectangle)(box, fill=colour)
    return img


def _processor():
    return transformers.Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TPS,
                                                 min_pixels=16 * 16, max_pixels=64 * 64)


def _video(frames):
    """Frames ``[T, C, H, W]`` (already normalised) -> (pixel_values_videos, video_grid_thw) in the processor's
    patch order (temporal pairs, merge blocks row-major, channels, time, rows, columns)."""
    t, c, h, w = frames.shape
    gt, gh, gw = t // TPS, h // PATCH, w // PATCH
    x = frames.reshape(gt, TPS, c, gh // MERGE, MERGE, PATCH, gw // MERGE, MERGE, PATCH)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gt * gh * gw, c * TPS * PATCH * PATCH)
    return x, torch.tensor([[gt, gh, gw]])


def vl_batch(cfg):
    images = _processor()(images=[_image(48, 32, "red"), _image(32, 64, "blue", "box")], return_tensors="pt")
    pix, grid = images["pixel_values"], images["image_grid_thw"]
    torch.manual_seed(1)
    vpix, vgrid = _video(torch.randn(4, 3, 32, 32))
    n_img = (grid.prod(-1) // MERGE ** 2).tolist()
    n_frame = int(vgrid[0, 1] * vgrid[0, 2]) // MERGE ** 2
    s, e, im, vid = cfg.vision_start_token_id, cfg.vision_end_token_id, cfg.image_token_id, cfg.video_token_id
    rows = [[1, 2, s] + [im] * n_img[0] + [e, 7, 8, s] + [im] * n_img[1] + [e, 9],
            [3, 4, 5, 6, 10, 11, 12],
            [13, s] + [vid] * n_frame + [e, 14, s] + [vid] * n_frame + [e, 15]]
    width = max(len(r) for r in rows)
    ids = torch.tensor([rows[0] + [0] * (width - len(rows[0])), [0] * (width - len(rows[1])) + rows[1],
                        rows[2] + [0] * (width - len(rows[2]))])
    mask = torch.tensor([[1] * len(rows[0]) + [0] * (width - len(rows[0])),
                         [0] * (width - len(rows[1])) + [1] * len(rows[1]),
                         [1] * len(rows[2]) + [0] * (width - len(rows[2]))])
    types = (ids == im).int() + 2 * (ids == vid).int()
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pix, "image_grid_thw": grid,
            "pixel_values_videos": vpix, "video_grid_thw": vgrid, "mm_token_type_ids": types}
