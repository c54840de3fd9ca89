# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Image-text SFT rows for :class:`~hyper_parallel.trainer.vl.VLTrainer` (Qwen3-VL's token layout).

* :class:`VLProcessor`: the parts of a Hugging Face Qwen3-VL processor folder (``AutoTokenizer`` with the chat
  template, ``AutoImageProcessor``: Qwen2-VL patches and grids) and the placeholder expansion
  ``Qwen3VLProcessor`` does (each ``<|image_pad|>`` becomes one token per merged patch). ``max_pixels`` /
  ``min_pixels`` bound each image's resolution (the processor resizes to fit). :func:`make_vl_processor`
  writes such a folder offline (a byte-level BPE trained on given texts, a ChatML template with image parts).
* Records: a ``.jsonl`` of ``{"messages": [...]}`` (user content parts ``{"type": "image", "path": ...}`` /
  ``{"type": "text", "text": ...}``), or a folder of images with captions (``metadata.jsonl`` with
  ``file_name`` and ``text``/``caption`` as Hugging Face's image folders have, else ``<image stem>.txt`` beside
  each image). A bad record (missing image, unreadable file, wrong dimensions, malformed conversation) is
  named with its file and line.
* Loss only on assistant tokens: the conversation is rendered incrementally by the chat template (the
  generation prompt belongs to the context, each assistant reply through its end marker carries loss).
* Packing respects image boundaries: whole samples go into rows of ``seq_len`` positions (document ids for
  the attention mask, MRoPE positions restarting per sample); a sample longer than ``seq_len + 1`` tokens is cut
  before the first image whose placeholders would not fit (never inside an image), or dropped when nothing
  with loss is left.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from hyper_parallel.trainer.sft import IGNORE_INDEX, SFTStats
from hyper_parallel.trainer.vl_data import VLDataError, check_record

__all__ = ["VL_SPECIAL_TOKENS", "VL_CHAT_TEMPLATE", "make_vl_processor", "vl_texts", "VLProcessor", "VLSample",
           "iter_vl_records", "encode_vl_record", "pack_vl_samples", "VLDataset", "build_vl_dataset"]

VL_SPECIAL_TOKENS = ["<pad>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                     "<|video_pad|>"]
#: ChatML with image parts rendered as Qwen3-VL does (vision start, one image pad, vision end)
VL_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}{% if p['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif p['type'] == 'text' %}{{ p['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")


def vl_texts(path: Any) -> List[str]:
    """Every text of a jsonl of messages (and the role names), to train a tokenizer on."""
    out = ["user", "assistant", "system"]
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        for turn in json.loads(line).get("messages", []):
            content = turn.get("content")
            out += [content] if isinstance(content, str) else [p.get("text", "") for p in content or []]
    return [t for t in out if t]


def make_vl_processor(folder: Any, texts: Sequence[str], *, patch_size: int = 8, merge_size: int = 2,
                      temporal_patch_size: int = 2, min_pixels: int = 16 * 16, max_pixels: int = 64 * 64,
                      vocab_size: int = 400) -> str:
    """Write a Qwen3-VL processor folder offline: a byte-level BPE trained on ``texts`` with
    :data:`VL_SPECIAL_TOKENS` and :data:`VL_CHAT_TEMPLATE` (``AutoTokenizer`` reads it), and a Qwen2-VL image
    processor config (``AutoImageProcessor``). Returns the folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # pylint: disable=C0415
    import transformers  # pylint: disable=import-outside-toplevel
    os.makedirs(folder, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=VL_SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>")
    fast.chat_template = VL_CHAT_TEMPLATE
    fast.save_pretrained(folder)
    image = transformers.Qwen2VLImageProcessorPil(patch_size=patch_size, merge_size=merge_size,
                                                  temporal_patch_size=temporal_patch_size, min_pixels=min_pixels,
                                                  max_pixels=max_pixels)
    image.save_pretrained(folder)
    return str(folder)


class VLProcessor:
    """A Qwen3-VL processor folder: chat rendering, tokenisation with image placeholders expanded, image
    patches (``pixel_values``) and grids (``image_grid_thw``)."""

    def __init__(self, folder: str, *, max_pixels: int = 0, min_pixels: int = 0) -> None:
        import transformers  # pylint: disable=import-outside-toplevel
        if not os.path.isdir(folder):
            raise ValueError(f"data.processor: {folder} is not a folder (a Hugging Face processor folder: "
                             f"tokenizer files with a chat template and preprocessor_config.json)")
        self.folder = folder
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.image_processor = transformers.AutoImageProcessor.from_pretrained(folder)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"data.processor: {folder}: the tokenizer has no chat template")
        size = dict(getattr(self.image_processor, "size", None) or {})
        self.size = {"shortest_edge": min_pixels or size.get("shortest_edge") or 56 * 56,
                     "longest_edge": max_pixels or size.get("longest_edge") or 28 * 28 * 1280}
        self.merge_size = int(self.image_processor.merge_size)
        ids = {}
        for name, token in (("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                            ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")):
            value = self.tokenizer.convert_tokens_to_ids(token)
            if value is None or value == self.tokenizer.unk_token_id:
                raise ValueError(f"data.processor: {folder}: the tokenizer has no {token} token")
            ids[name] = int(value)
        self.token_ids = ids
        self.image_token = "<|image_pad|>"
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.vocab_size = len(self.tokenizer)

    def render(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = False) -> str:
        """The conversation as the chat template writes it (one ``<|image_pad|>`` per image)."""
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def images(self, images: Sequence[Any]) -> Tuple[Any, Any]:
        """``(pixel_values [patches, C*T*P*P], image_grid_thw [n, 3])`` of PIL images within the pixel budget."""
        out = self.image_processor(images=list(images), size=self.size, return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def encode(self, text: str, grids: Sequence[Sequence[int]] = ()) -> List[int]:
        """Token ids of ``text`` with its i-th ``<|image_pad|>`` repeated once per merged patch of ``grids[i]``."""
        pieces = text.split(self.image_token)
        if len(pieces) - 1 != len(grids):
            raise ValueError(f"{len(pieces) - 1} image placeholders in the text but {len(grids)} images")
        out = pieces[0]
        for grid, piece in zip(grids, pieces[1:]):
            t, h, w = (int(x) for x in grid)
            out += self.image_token * (t * h * w // self.merge_size ** 2) + piece
        return self.tokenizer.encode(out, add_special_tokens=False)


@dataclass
class VLSample:
    """One record: token ids, per-token loss flags, and its images' patches and grids (in token order)."""

    ids: List[int]
    train: List[bool]
    pixels: List[Any] = field(default_factory=list)
    grids: List[List[int]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- records
def _caption_records(folder: Path) -> Iterator[Tuple[str, Any]]:
    """``(where, record)`` of a folder of images with captions."""
    meta = folder / "metadata.jsonl"
    if meta.is_file():
        for number, line in enumerate(meta.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{meta}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, VLDataError(f"{where}: not valid JSON: {exc.msg}")
                continue
            caption = row.get("text", row.get("caption")) if isinstance(row, dict) else None
            if not isinstance(row, dict) or not isinstance(row.get("file_name"), str) or not isinstance(caption, str):
                yield where, VLDataError(f"{where}: expected {{'file_name': str, 'text' (or 'caption'): str}}")
                continue
            yield where, _caption_record(row["file_name"], caption)
        return
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in _IMAGE_EXT)
    if not images:
        raise VLDataError(f"{folder}: no images and no metadata.jsonl (expected a folder of images with captions)")
    for image in images:
        where = str(image)
        sidecar = image.with_suffix(".txt")
        if not sidecar.is_file():
            yield where, VLDataError(f"{where}: no caption (expected {sidecar.name} beside it, or a metadata.jsonl)")
            continue
        yield where, _caption_record(image.name, sidecar.read_text(encoding="utf-8").strip())


def _caption_record(file_name: str, caption: str) -> Dict[str, Any]:
    return {"messages": [{"role": "user", "content": [{"type": "image", "path": file_name}]},
                         {"role": "assistant", "content": caption}]}


def iter_vl_records(path: str) -> Iterator[Tuple[str, Any]]:
    """``(where, record)`` of every record of ``path`` (a ``.jsonl`` of messages or a caption folder); a bad
    record comes as a :class:`VLDataError` naming ``file:line``. Image paths are resolved against the file's
    (or folder's) directory; each record is checked (roles, parts, images readable)."""
    p = Path(path)
    if p.is_dir():
        base, rows = p, _caption_records(p)
    elif p.is_file() and p.suffix == ".jsonl":
        base, rows = p.parent, _jsonl(p)
    else:
        raise VLDataError(f"data.paths: {path}: expected a .jsonl of messages or a folder of images with captions")
    for where, rec in rows:
        if isinstance(rec, Exception):
            yield where, rec
            continue
        try:
            check_record(where, base, rec)
        except VLDataError as exc:
            yield where, exc
            continue
        yield where, {**rec, "_base": str(base), "_where": where}


def _jsonl(path: Path) -> Iterator[Tuple[str, Any]]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            where = f"{path}:{number}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, VLDataError(f"{where}: not valid JSON: {exc.msg}")


def _record_images(record: Dict[str, Any]) -> List[str]:
    return [part["path"] for turn in record["messages"] if isinstance(turn["content"], list)
            for part in turn["content"] if part["type"] == "image"]


def _segments(record: Dict[str, Any], proc: VLProcessor) -> List[Tuple[str, bool]]:
    """The conversation as ``(text, carries loss)`` segments (incremental rendering, see the module doc)."""
    msgs = [{"role": m["role"], "content": m["content"]} for m in record["messages"]]
    out: List[Tuple[str, bool]] = []
    done = ""
    for i, m in enumerate(msgs):
        texts = []
        if m["role"] == "assistant" and i:
            texts.append((proc.render(msgs[:i], add_generation_prompt=True), False))
        texts.append((proc.render(msgs[:i + 1]), m["role"] == "assistant"))
        for text, train in texts:
            if not text.startswith(done):
                raise ValueError("the chat template does not render conversations incrementally")
            out.append((text[len(done):], train))
            done = text
    return [(t, train) for t, train in out if t]


def encode_vl_record(record: Dict[str, Any], proc: VLProcessor) -> VLSample:
    """A checked record -> :class:`VLSample` (a ``VLDataError`` naming the record for an image the processor
    refuses, e.g. an aspect ratio over 200, or a conversation the template cannot render)."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    where = record.get("_where", "record")
    paths = _record_images(record)
    pixels, grids = [], []
    try:
        segments = _segments(record, proc)
        if paths:
            loaded = []
            for rel in paths:
                with Image.open(Path(record["_base"]) / rel) as img:
                    loaded.append(img.convert("RGB"))
            pix, grid = proc.images(loaded)
            sizes = (grid.prod(-1)).tolist()
            pixels = list(pix.split(sizes))
            grids = grid.tolist()
    except ValueError as exc:
        raise VLDataError(f"{where}: {exc}") from None
    sample = VLSample([], [], pixels, grids)
    used = 0
    for text, train in segments:
        n = text.count(proc.image_token)
        ids = proc.encode(text, grids[used:used + n])
        used += n
        sample.ids += ids
        sample.train += [train] * len(ids)
    if used != len(grids):
        raise VLDataError(f"{where}: the chat template wrote {used} image placeholders for {len(grids)} images")
    return sample


# ---------------------------------------------------------------------------------------------- packing
def _image_spans(ids: Sequence[int], image_id: int) -> List[Tuple[int, int]]:
    """``[start, end)`` of each run of image placeholders (consecutive runs of one image each, split by grids
    later)."""
    spans, start = [], None
    for i, t in enumerate(list(ids) + [None]):
        if t == image_id and start is None:
            start = i
        elif t != image_id and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _truncate(sample: VLSample, seq_len: int, proc: VLProcessor, stats: SFTStats) -> VLSample:
    """At most ``seq_len + 1`` tokens, cut before the first image that would not fit whole in the inputs."""
    if len(sample.ids) - 1 <= seq_len:
        return sample
    stats.truncated += 1
    keep, kept_images = seq_len + 1, 0
    start_id = proc.token_ids["vision_start_token_id"]
    pos = 0
    for grid in sample.grids:  # images in token order; each is one placeholder run
        n = grid[0] * grid[1] * grid[2] // proc.merge_size ** 2
        first = sample.ids.index(proc.token_ids["image_token_id"], pos)
        if first + n > keep - 1:  # its placeholders must all be inputs (the last token is a label only)
            keep = first - 1 if first and sample.ids[first - 1] == start_id else first
            break
        kept_images += 1
        pos = first + n
    return VLSample(sample.ids[:keep], sample.train[:keep], sample.pixels[:kept_images], sample.grids[:kept_images])


def _positions(ids: List[int], grids: List[List[int]], config: Any) -> List[List[int]]:
    import torch  # pylint: disable=import-outside-toplevel
    from hyper_parallel.models.qwen3_vl.model import rope_index  # pylint: disable=import-outside-toplevel
    grid = torch.tensor(grids, dtype=torch.long) if grids else None
    return rope_index(torch.tensor([ids]), config, grid)[:, 0].tolist()


def pack_vl_samples(samples: Sequence[VLSample], seq_len: int, proc: VLProcessor, config: Any, *, packing: bool,
                    stats: Optional[SFTStats] = None) -> List[Dict[str, Any]]:
    """Rows of ``seq_len`` positions: ``input_ids``, ``labels`` (``-100``: no loss), ``position_ids``
    (``[3][seq_len]`` MRoPE, restarting per sample), ``doc_ids`` (``-1``: padding), ``pixel_values`` (the row's
    images' patches, or None) and ``image_grid_thw`` (``[[t, h, w], ...]``). Whole samples only."""
    stats = stats if stats is not None else SFTStats()
    rows: List[Dict[str, Any]] = []
    cur: Dict[str, Any] = {}

    def close() -> None:
        n = len(cur.get("input_ids", []))
        if not n:
            return
        pad = seq_len - n
        import torch  # pylint: disable=import-outside-toplevel
        rows.append({"input_ids": cur["input_ids"] + [proc.pad_id] * pad,
                     "labels": cur["labels"] + [IGNORE_INDEX] * pad,
                     "position_ids": [axis + [0] * pad for axis in cur["position_ids"]],
                     "doc_ids": cur["doc_ids"] + [-1] * pad,
                     "pixel_values": torch.cat(cur["pixels"]) if cur["pixels"] else None,
                     "image_grid_thw": list(cur["grids"])})
        stats.tokens += n
        cur.clear()

    for sample in samples:
        sample = _truncate(sample, seq_len, proc, stats)
        ids, train = sample.ids, sample.train
        labels = [ids[i + 1] if train[i + 1] else IGNORE_INDEX for i in range(len(ids) - 1)]
        if len(ids) < 2 or all(x == IGNORE_INDEX for x in labels):
            stats.dropped += 1
            continue
        inputs = ids[:-1]
        if not packing or len(cur.get("input_ids", [])) + len(inputs) > seq_len:
            close()
        if not cur:
            cur.update(input_ids=[], labels=[], position_ids=[[], [], []], doc_ids=[], pixels=[], grids=[])
        doc = len(set(cur["doc_ids"]))
        pos = _positions(inputs, sample.grids, config)
        cur["input_ids"] += inputs
        cur["labels"] += labels
        for axis, values in zip(cur["position_ids"], pos):
            axis += values
        cur["doc_ids"] += [doc] * len(inputs)
        cur["pixels"] += sample.pixels
        cur["grids"] += sample.grids
        stats.loss_tokens += sum(1 for x in labels if x != IGNORE_INDEX)
    close()
    stats.rows += len(rows)
    return rows


class VLDataset:
    """Rows for :class:`hyper_parallel.trainer.data.DistributedBatchLoader` (``num_train``, ``num_eval``,
    ``vocab_size``, ``sequence(i, split)``); ``model_overrides``: the special token ids the model config takes
    from the processor; ``images``: images per split."""

    def __init__(self, train: List[Dict[str, Any]], evaluation: List[Dict[str, Any]], seq_len: int,
                 proc: VLProcessor, stats: SFTStats, vocab_multiple: int = 64) -> None:
        if not train:
            raise ValueError("data: no image-text training rows (every record was bad or truncated away)")
        if not evaluation:
            raise ValueError("data: no image-text evaluation rows: add data.eval_paths or more records")
        self.train, self.evaluation = train, evaluation
        self.seq_len = seq_len
        self.vocab_size = -(-proc.vocab_size // vocab_multiple) * vocab_multiple
        self.num_train, self.num_eval = len(train), len(evaluation)
        self.stats = stats
        self.processor = proc
        self.model_overrides = dict(proc.token_ids)
        self.images = sum(len(r["image_grid_thw"]) for r in train)

    def sequence(self, index: int, split: str = "train") -> Dict[str, Any]:
        """Row ``index`` of ``split``."""
        return (self.train if split == "train" else self.evaluation)[index]

    def __len__(self) -> int:
        return self.num_train


def _samples(paths: Sequence[str], proc: VLProcessor, bad_records: str, stats: SFTStats) -> List[VLSample]:
    out = []
    for path in paths:
        for where, rec in iter_vl_records(path):
            stats.records += 1
            try:
                if isinstance(rec, Exception):
                    raise rec
                out.append(encode_vl_record(rec, proc))
            except VLDataError as exc:
                if bad_records == "fail":
                    raise VLDataError(f"{exc} (data.bad_records = 'skip' drops such records)") from None
                stats.skipped += 1
                if len(stats.reasons) < 3:
                    stats.reasons.append(str(exc) or where)
    return out


def build_vl_dataset(paths: Sequence[str], eval_paths: Sequence[str], proc: VLProcessor, config: Any, *,
                     seq_len: int, packing: bool, bad_records: str, eval_fraction: float) -> VLDataset:
    """Read, encode, truncate (at image boundaries) and pack the records of ``paths`` (held out:
    ``eval_paths``, else the last ``eval_fraction`` of the rows, at least one). ``config``: the model's
    :class:`~hyper_parallel.models.qwen3_vl.args.Qwen3VLConfig` (MRoPE positions)."""
    import dataclasses  # pylint: disable=import-outside-toplevel
    config = dataclasses.replace(config, **proc.token_ids)
    if proc.merge_size != config.vision.spatial_merge_size:
        raise ValueError(f"data.processor: merge_size {proc.merge_size} != the model's spatial_merge_size "
                         f"{config.vision.spatial_merge_size}")
    stats = SFTStats()
    rows = pack_vl_samples(_samples(paths, proc, bad_records, stats), seq_len, proc, config, packing=packing,
                           stats=stats)
    if eval_paths:
        held = pack_vl_samples(_samples(eval_paths, proc, bad_records, SFTStats()), seq_len, proc, config,
                               packing=packing)
        train = rows
    else:
        n_eval = max(1, int(len(rows) * eval_fraction)) if len(rows) > 1 else 0
        train, held = rows[:len(rows) - n_eval], rows[len(rows) - n_eval:]
    return VLDataset(train, held, seq_len, proc, stats)
