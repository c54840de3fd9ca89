# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Supervised fine-tuning data: records -> token samples with a loss mask -> (packed) rows (pure Python).

Records come from ``.jsonl`` files (one JSON object a line), or ``.parquet`` / ``.json`` / ``.csv`` files read
with Hugging Face ``datasets`` (the ``hf`` extra). Three formats (``[data] format``):

* ``text``: ``{"text": "..."}``: every token carries loss;
* ``prompt_completion``: ``{"prompt": "...", "completion": "..."}``: loss on the completion (and the end
  token) only;
* ``messages``: ``{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}]}``: rendered
  with the tokenizer's chat template; loss on the assistant turns only (each assistant turn's text after the
  template's generation prompt, through its end-of-turn marker).

A sample of ``n`` tokens gives ``n - 1`` (input, label) positions; a label whose token carries no loss is
``-100``. **Truncation**: a sample longer than ``seq_len + 1`` tokens keeps its first ``seq_len + 1`` tokens
(the tail is dropped and counted); one left with no loss token is dropped and counted. **Packing**
(``packing = true``): samples are placed in order into rows of ``seq_len`` positions, a new row starting when
the next sample does not fit; each sample keeps its own positions ``0, 1, ...`` and document id, and the model
attends within a document only (``document_mask``); the rest of a row is padding (label ``-100``, document
``-1``). Without packing each sample has a row of its own. **Bad records** (not an object, a missing or
non-string key, empty text, a malformed conversation) are reported as ``file:line: reason``;
``bad_records = "fail"`` stops at the first, ``"skip"`` drops them and counts them.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

__all__ = ["IGNORE_INDEX", "SFTStats", "Sample", "read_records", "record_segments", "tokenize_record",
           "pack_samples", "SFTDataset", "build_sft_dataset"]

IGNORE_INDEX = -100
_DATASETS_KINDS = {".parquet": "parquet", ".json": "json", ".csv": "csv"}


@dataclass
class SFTStats:
    """What the pipeline did: records read / skipped (with the first reasons), samples truncated or dropped,
    rows, real (non-pad) tokens and loss tokens."""

    records: int = 0
    skipped: int = 0
    truncated: int = 0
    dropped: int = 0
    rows: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    reasons: List[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the run banner."""
        out = (f"{self.records} records -> {self.rows} rows, {self.tokens} tokens ({self.loss_tokens} with loss)"
               f", {self.truncated} truncated, {self.dropped} dropped (no loss token left), {self.skipped} bad "
               f"records skipped")
        return out + (f" (first: {self.reasons[0]})" if self.reasons else "")


@dataclass
class Sample:
    """Token ids of one record and, per token, whether it carries loss."""

    ids: List[int]
    train: List[bool]


def _jsonl(path: str) -> Iterator[Tuple[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, ValueError(f"not valid JSON: {exc.msg} (column {exc.colno})")


def _with_datasets(path: str, kind: str) -> Iterator[Tuple[str, Any]]:
    try:
        import datasets  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ValueError(f"data.paths: {path}: reading {os.path.splitext(path)[1]} files needs Hugging Face "
                         f"datasets: pip install 'hyper-parallel[hf]'") from None
    table = datasets.load_dataset(kind, data_files=path, split="train")
    for i, row in enumerate(table):
        yield f"{path}:row {i + 1}", dict(row)


def read_records(path: str) -> Iterator[Tuple[str, Any]]:
    """``(where, record)`` of every record of ``path`` (``where`` is ``file:line`` or ``file:row n``); a line
    that is not JSON yields a ``ValueError`` as its record."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".jsonl":
        return _jsonl(path)
    if ext in _DATASETS_KINDS:
        return _with_datasets(path, _DATASETS_KINDS[ext])
    raise ValueError(f"data.paths: {path}: unsupported file type {ext!r} for SFT records; expected .jsonl, "
                     f".parquet, .json or .csv")


def _string(rec: Dict[str, Any], key: str) -> str:
    if key not in rec:
        raise ValueError(f"missing key {key!r}")
    value = rec[key]
    if not isinstance(value, str):
        raise ValueError(f"key {key!r}: expected a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"key {key!r} is empty")
    return value


def _messages(rec: Dict[str, Any], key: str) -> List[Dict[str, str]]:
    if key not in rec:
        raise ValueError(f"missing key {key!r}")
    msgs = rec[key]
    if not isinstance(msgs, list) or not msgs:
        raise ValueError(f"key {key!r}: expected a non-empty list of {{role, content}} objects")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"{key}[{i}]: expected an object with string 'role' and 'content'")
    if not any(m["role"] == "assistant" and m["content"].strip() for m in msgs):
        raise ValueError(f"key {key!r}: no assistant turn with content (nothing to learn)")
    return [{"role": m["role"], "content": m["content"]} for m in msgs]


def record_segments(rec: Any, fmt: str, keys: Dict[str, str], tokenizer: Any) -> List[Tuple[str, bool]]:
    """The record as text segments ``(text, carries loss)``; a ``ValueError`` (the reason) for a bad record."""
    if isinstance(rec, Exception):
        raise ValueError(str(rec))
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    if fmt == "text":
        return [(_string(rec, keys["text"]), True)]
    if fmt == "prompt_completion":
        return [(_string(rec, keys["prompt"]), False), (_string(rec, keys["completion"]), True)]
    msgs = _messages(rec, keys["messages"])
    segments: List[Tuple[str, bool]] = []
    done = ""
    for i, m in enumerate(msgs):
        if m["role"] == "assistant":  # the generation prompt belongs to the context, the reply to the loss
            prompt = tokenizer.render_chat(msgs[:i], add_generation_prompt=True) if i else ""
            if not prompt.startswith(done):
                raise ValueError("the chat template does not render conversations incrementally")
            segments.append((prompt[len(done):], False))
            done = prompt
        full = tokenizer.render_chat(msgs[:i + 1], add_generation_prompt=False)
        if not full.startswith(done):
            raise ValueError("the chat template does not render conversations incrementally")
        segments.append((full[len(done):], m["role"] == "assistant"))
        done = full
    return [(t, train) for t, train in segments if t]


def tokenize_record(segments: Sequence[Tuple[str, bool]], tokenizer: Any, fmt: str) -> Sample:
    """Token ids and loss flags of the segments: BOS first when the tokenizer has one (not for ``messages``:
    the template writes it), EOS last with loss for ``text`` / ``prompt_completion``."""
    ids: List[int] = []
    train: List[bool] = []
    if fmt != "messages" and tokenizer.bos_id is not None:
        ids.append(tokenizer.bos_id)
        train.append(False)
    for text, flag in segments:
        new = tokenizer.encode(text)
        ids.extend(new)
        train.extend([flag] * len(new))
    if fmt != "messages" and tokenizer.eos_id is not None:
        ids.append(tokenizer.eos_id)
        train.append(True)
    return Sample(ids, train)


def _positions(sample: Sample, seq_len: int, stats: SFTStats) -> Optional[Tuple[List[int], List[int]]]:
    """(inputs, labels) of a sample, truncated to ``seq_len`` positions; None when no loss token is left."""
    ids, train = sample.ids, sample.train
    if len(ids) - 1 > seq_len:
        stats.truncated += 1
        ids, train = ids[:seq_len + 1], train[:seq_len + 1]
    labels = [ids[i + 1] if train[i + 1] else IGNORE_INDEX for i in range(len(ids) - 1)]
    if len(ids) < 2 or all(x == IGNORE_INDEX for x in labels):
        stats.dropped += 1
        return None
    return ids[:-1], labels


def pack_samples(samples: Sequence[Sample], seq_len: int, *, packing: bool, pad_id: int,
                 stats: Optional[SFTStats] = None) -> List[Dict[str, List[int]]]:
    """Rows of ``seq_len`` positions: ``input_ids``, ``labels`` (``-100``: no loss), ``position_ids``
    (restarting per sample) and ``doc_ids`` (``-1``: padding); see the module docstring."""
    stats = stats if stats is not None else SFTStats()
    rows: List[Dict[str, List[int]]] = []
    cur: Dict[str, List[int]] = {"input_ids": [], "labels": [], "position_ids": [], "doc_ids": []}

    def close() -> None:
        n = len(cur["input_ids"])
        if not n:
            return
        pad = seq_len - n
        rows.append({"input_ids": cur["input_ids"] + [pad_id] * pad, "labels": cur["labels"] + [IGNORE_INDEX] * pad,
                     "position_ids": cur["position_ids"] + list(range(pad)), "doc_ids": cur["doc_ids"] + [-1] * pad})
        stats.tokens += n
        for key in cur:
            cur[key] = []

    for sample in samples:
        pair = _positions(sample, seq_len, stats)
        if pair is None:
            continue
        inputs, labels = pair
        if not packing or len(cur["input_ids"]) + len(inputs) > seq_len:
            close()
        doc = len(set(cur["doc_ids"]))
        cur["input_ids"] += inputs
        cur["labels"] += labels
        cur["position_ids"] += list(range(len(inputs)))
        cur["doc_ids"] += [doc] * len(inputs)
        stats.loss_tokens += sum(1 for x in labels if x != IGNORE_INDEX)
    close()
    stats.rows += len(rows)
    return rows


class SFTDataset:
    """Rows for :class:`hyper_parallel.trainer.data.DistributedBatchLoader` (the interface of
    ``TokenDataset``: ``num_train``, ``num_eval``, ``vocab_size``, ``sequence(i, split)``)."""

    def __init__(self, train: List[Dict[str, List[int]]], evaluation: List[Dict[str, List[int]]], seq_len: int,
                 vocab_size: int, stats: SFTStats) -> None:
        if not train:
            raise ValueError("data: no SFT training rows (every record was bad, empty or truncated away)")
        if not evaluation:
            raise ValueError("data: no SFT evaluation rows: add data.eval_paths or more records")
        self.train, self.evaluation = train, evaluation
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.num_train, self.num_eval = len(train), len(evaluation)
        self.stats = stats

    def sequence(self, index: int, split: str = "train") -> Dict[str, List[int]]:
        """Row ``index`` of ``split``."""
        return (self.train if split == "train" else self.evaluation)[index]

    def __len__(self) -> int:
        return self.num_train


def _samples(paths: Sequence[str], fmt: str, keys: Dict[str, str], tokenizer: Any, bad_records: str,
             stats: SFTStats) -> List[Sample]:
    out = []
    for path in paths:
        for where, rec in read_records(path):
            stats.records += 1
            try:
                out.append(tokenize_record(record_segments(rec, fmt, keys, tokenizer), tokenizer, fmt))
            except ValueError as exc:
                if bad_records == "fail":
                    raise ValueError(f"{where}: {exc} (data.bad_records = 'skip' drops such records)") from None
                stats.skipped += 1
                if len(stats.reasons) < 3:
                    stats.reasons.append(f"{where}: {exc}")
    return out


def build_sft_dataset(paths: Sequence[str], eval_paths: Sequence[str], tokenizer: Any, *, fmt: str, seq_len: int,
                      packing: bool, bad_records: str, eval_fraction: float, keys: Dict[str, str]) -> SFTDataset:
    """Read, tokenize, truncate and pack the records of ``paths`` (held out: ``eval_paths``, else the last
    ``eval_fraction`` of the rows, at least one)."""
    stats = SFTStats()
    pad = tokenizer.pad_id if tokenizer.pad_id is not None else (tokenizer.eos_id or 0)
    rows = pack_samples(_samples(paths, fmt, keys, tokenizer, bad_records, stats), seq_len, packing=packing,
                        pad_id=pad, stats=stats)
    if eval_paths:
        held = pack_samples(_samples(eval_paths, fmt, keys, tokenizer, bad_records, SFTStats()), seq_len,
                            packing=packing, pad_id=pad)
        train = rows
    else:
        n_eval = max(1, int(len(rows) * eval_fraction)) if len(rows) > 1 else 0
        train, held = rows[:len(rows) - n_eval], rows[len(rows) - n_eval:]
    return SFTDataset(train, held, seq_len, tokenizer.vocab_size, stats)
