# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Image-text SFT data for vision-language models (Qwen3-VL's token layout), from local files.

* :func:`draw_caption_set` writes a tiny image-caption set (shapes and colours drawn with Pillow, captions
  from the drawing) so demos and tests run offline: ``images/*.png`` + ``captions.jsonl``;
* :func:`read_records` reads a jsonl of ``{"messages": [...]}`` records (a user turn whose content lists
  ``{"type": "image", "path": ...}`` and ``{"type": "text", "text": ...}`` parts, an assistant turn with the
  answer); a bad record (missing key, wrong type, missing or unreadable image) raises :class:`VLDataError`
  naming the file and line;
* :class:`VLEncoder` turns a record into ``input_ids`` (each image becomes vision-start, one placeholder per
  merged patch, vision-end), ``labels`` (loss only on the assistant's tokens), ``pixel_values`` and
  ``image_grid_thw`` through transformers' Qwen2-VL image processor (a max-pixels budget bounds each
  image's resolution), and :func:`collate` pads a batch (right padding, ``attention_mask``).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

__all__ = ["VLDataError", "draw_caption_set", "read_records", "check_record", "VLEncoder", "collate", "SHAPES",
           "COLOURS"]

SHAPES = ("circle", "square", "triangle")
COLOURS = {"red": (220, 30, 30), "green": (30, 160, 60), "blue": (40, 70, 220), "yellow": (230, 200, 20)}
QUESTION = "What is in the picture?"


class VLDataError(ValueError):
    """A bad image-text record; the message names the file and line."""


def _draw(shape: str, colour: str, size, where: str):
    from PIL import Image, ImageDraw  # pylint: disable=import-outside-toplevel
    w, h = size
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    x0 = 0 if where == "left" else w // 2
    box = [x0 + w // 10, h // 5, x0 + w // 2 - w // 10, 4 * h // 5]
    fill = COLOURS[colour]
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])], fill=fill)
    return img


def draw_caption_set(folder: Any, n: int = 32, seed: int = 0) -> Path:
    """Write ``n`` images and ``captions.jsonl`` under ``folder``; returns the jsonl path. The caption names
    the shape, colour and side of the drawing, so a model can learn it from the pixels alone."""
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        shape, colour = rng.choice(SHAPES), rng.choice(sorted(COLOURS))
        where = rng.choice(("left", "right"))
        size = (rng.choice((32, 48, 64)), rng.choice((32, 48)))
        rel = f"images/{i:04d}.png"
        _draw(shape, colour, size, where).save(folder / rel)
        lines.append(json.dumps({"messages": [
            {"role": "user", "content": [{"type": "image", "path": rel}, {"type": "text", "text": QUESTION}]},
            {"role": "assistant", "content": f"a {colour} {shape} on the {where}"}]}))
    path = folder / "captions.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _check_parts(where: str, content: Any) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise VLDataError(f"{where}: content must be a string or a list of parts, got {type(content).__name__}")
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image" and isinstance(part.get("path"), str):
            continue
        if kind == "text" and isinstance(part.get("text"), str):
            continue
        raise VLDataError(f"{where}: a part must be {{'type': 'image', 'path': str}} or {{'type': 'text', "
                          f"'text': str}}, got {part!r}")


def _check_images(where: str, base: Path, record: Dict[str, Any]) -> None:
    from PIL import Image, UnidentifiedImageError  # pylint: disable=import-outside-toplevel
    for turn in record["messages"]:
        for part in turn["content"] if isinstance(turn["content"], list) else ():
            if part["type"] != "image":
                continue
            path = base / part["path"]
            if not path.is_file():
                raise VLDataError(f"{where}: image {part['path']!r} not found (looked at {path})")
            try:
                with Image.open(path) as img:
                    img.verify()
                    size = img.size
            except (UnidentifiedImageError, OSError) as exc:
                raise VLDataError(f"{where}: image {part['path']!r} cannot be read: {exc}") from None
            if min(size) < 2 or max(size) > 200 * min(size):
                raise VLDataError(f"{where}: image {part['path']!r} has unusable dimensions {size[0]}x{size[1]} "
                                  f"(expected both sides >= 2 pixels and an aspect ratio under 200)")


def check_record(where: str, base: Path, record: Any) -> None:
    """Raise :class:`VLDataError` naming ``where`` unless ``record`` is a well-formed conversation whose
    images (resolved against ``base``) exist, can be decoded and have a usable size."""
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise VLDataError(f"{where}: expected a non-empty list under 'messages'")
    for turn in messages:
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant", "system"):
            raise VLDataError(f"{where}: each message needs a role of user, assistant or system, got {turn!r}")
        _check_parts(where, turn.get("content"))
    if not any(t["role"] == "assistant" for t in messages):
        raise VLDataError(f"{where}: no assistant message (nothing to learn)")
    _check_images(where, Path(base), record)


def read_records(path: Any) -> List[Dict[str, Any]]:
    """Every record of a jsonl file, checked; image paths are resolved against the file's folder."""
    path = Path(path)
    if not path.is_file():
        raise VLDataError(f"{path}: no such file")
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise VLDataError(f"{where}: not valid JSON: {exc.msg}") from None
        check_record(where, path.parent, record)
        out.append({**record, "_base": str(path.parent), "_where": where})
    return out


@dataclass
class VLEncoder:
    """Record -> model inputs. ``tokenize(text) -> List[int]``; ``image_processor``: transformers' Qwen2-VL
    image processor (its ``merge_size`` must be the model's ``spatial_merge_size``); ``config``: the model's
    :class:`~hyper_parallel.models.qwen3_vl.args.Qwen3VLConfig` (special token ids)."""

    tokenize: Callable[[str], List[int]]
    image_processor: Any
    config: Any

    def _image(self, base: str, part: Dict[str, Any]):
        from PIL import Image  # pylint: disable=import-outside-toplevel
        with Image.open(Path(base) / part["path"]) as img:
            out = self.image_processor(images=[img.convert("RGB")], return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def encode(self, record: Dict[str, Any]) -> Dict[str, Any]:
        """``input_ids``, ``labels`` (``-100`` outside assistant turns), ``pixel_values``, ``image_grid_thw``."""
        import torch  # pylint: disable=import-outside-toplevel
        cfg, ids, labels, pixels, grids = self.config, [], [], [], []
        merge = cfg.vision.spatial_merge_size
        for turn in record["messages"]:
            parts = turn["content"]
            if not isinstance(parts, list):
                parts = [{"type": "text", "text": parts}]
            piece: List[int] = []
            for part in parts:
                if part["type"] == "text":
                    piece += self.tokenize(part["text"])
                    continue
                pix, grid = self._image(record["_base"], part)
                pixels.append(pix)
                grids.append(grid)
                piece += [cfg.vision_start_token_id] + [cfg.image_token_id] * int(grid.prod() // merge ** 2) \
                    + [cfg.vision_end_token_id]
            ids += piece
            labels += piece if turn["role"] == "assistant" else [-100] * len(piece)
        out = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}
        if pixels:
            out.update(pixel_values=torch.cat(pixels), image_grid_thw=torch.cat(grids))
        return out


def collate(samples: Sequence[Dict[str, Any]], pad_id: int = 0) -> Dict[str, Any]:
    """Right-padded batch: ``input_ids``, ``attention_mask``, next-token ``labels`` (shifted, ``-100`` on
    padding and on the last position), and the images of every sample concatenated in order."""
    import torch  # pylint: disable=import-outside-toplevel
    width = max(len(s["input_ids"]) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    labels = torch.full((len(samples), width), -100, dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s["input_ids"])
        ids[i, :n], mask[i, :n] = s["input_ids"], 1
        labels[i, :n - 1] = s["labels"][1:]
    out = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    with_images = [s for s in samples if "pixel_values" in s]
    if with_images:
        out["pixel_values"] = torch.cat([s["pixel_values"] for s in with_images])
        out["image_grid_thw"] = torch.cat([s["image_grid_thw"] for s in with_images])
    return out
