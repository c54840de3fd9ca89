# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The data pipeline: corpus -> tokenizer (HF ``tokenizers``) -> packed sequences -> deterministic, DP-sharded,
resumable batches. Framework-free (token ids are plain Python ints in ``array('i')``).

* Corpus: ``source = "stdlib"`` reads the ``.py`` files of the running interpreter's standard library (exists on
  every machine, no download; tests, ``site-packages`` and ``idlelib`` excluded; sorted; capped by
  ``max_corpus_mb``); ``source = "files"`` reads ``.txt`` (one document per file), ``.jsonl`` (``text_key``
  of each line) and anything else HF ``datasets`` can load (``parquet``, ``csv``, ``json``) when installed.
* Tokenizer: ``tokenizer = "bpe"`` trains a byte-level BPE of ``vocab_size`` on the corpus once and caches it
  (``tokenizer.json``, keyed by the corpus hash); a path to a ``tokenizer.json`` file uses that tokenizer.
* Packing: documents joined with ``<|endoftext|>`` and cut into sequences of ``seq_len + 1`` tokens (inputs
  and next-token labels); the last ``eval_fraction`` of them is held out for evaluation.
* Batches: epoch ``e`` visits the training sequences in the order ``random.Random(seed + e)`` shuffles them;
  global batch ``s`` is the next ``global_batch`` of them whatever the layout, and data-parallel rank ``r``
  of ``dp`` takes rows ``[r*B/dp, (r+1)*B/dp)``. The loader's state is the number of sequences consumed.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import sysconfig
from array import array
from typing import Any, Dict, Iterator, List, Optional, Sequence

__all__ = ["EOS", "stdlib_files", "read_documents", "default_cache_dir", "load_tokenizer", "TokenDataset",
           "DistributedBatchLoader", "prepare_dataset"]

EOS = "<|endoftext|>"
_EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__", "lib2to3",
                  "turtledemo", "tkinter"}


def stdlib_files(max_bytes: Optional[int] = None) -> List[str]:
    """The standard library's ``.py`` files in a fixed order, up to ``max_bytes`` in total."""
    root = sysconfig.get_paths()["stdlib"]
    out, total = [], 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _EXCLUDED_DIRS)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            size = os.path.getsize(path)
            if max_bytes is not None and total + size > max_bytes and out:
                return out
            out.append(path)
            total += size
    if not out:
        raise RuntimeError(f"data.source = 'stdlib': no .py files under {root}")
    return out


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _read_jsonl(path: str, text_key: str) -> List[str]:
    docs = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON: {exc}") from None
            if not isinstance(row, dict) or not isinstance(row.get(text_key), str):
                raise ValueError(f"{path}:{lineno}: expected an object with a string field {text_key!r} "
                                 f"(data.text_key)")
            docs.append(row[text_key])
    return docs


def _read_with_datasets(path: str, text_key: str) -> List[str]:
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    kind = {"parquet": "parquet", "csv": "csv", "json": "json"}.get(ext)
    if kind is None:
        raise ValueError(f"data.paths: {path}: unsupported file type {ext!r}; expected .txt, .py, .md, .jsonl, "
                         f".json, .csv or .parquet")
    try:
        import datasets  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ValueError(f"data.paths: {path}: reading .{ext} files needs HF datasets (pip install "
                         f"'hyper-parallel[data]')") from None
    table = datasets.load_dataset(kind, data_files=path, split="train")
    if text_key not in table.column_names:
        raise ValueError(f"data.paths: {path}: no column {text_key!r} (data.text_key); columns: {table.column_names}")
    return [str(t) for t in table[text_key]]


def _expand_paths(paths: Sequence[str]) -> List[str]:
    files: List[str] = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs))
        elif os.path.isfile(path):
            files.append(path)
        else:
            raise ValueError(f"data.paths: {path!r} does not exist")
    return files


def _read_file(path: str, text_key: str) -> List[str]:
    ext = os.path.splitext(path)[1].lower()
    if ext in (".txt", ".py", ".md", ".rst"):
        return [_read_text(path)]
    if ext == ".jsonl":
        return _read_jsonl(path, text_key)
    return _read_with_datasets(path, text_key)


def read_documents(source: str, paths: Sequence[str] = (), *, text_key: str = "text",
                   max_bytes: Optional[int] = None) -> List[str]:
    """The corpus as a list of documents (see the module docstring), capped near ``max_bytes`` characters."""
    if source == "stdlib":
        return [_read_text(p) for p in stdlib_files(max_bytes)]
    if source != "files":
        raise ValueError(f"data.source: expected 'stdlib' or 'files', got {source!r}")
    files = _expand_paths(paths)
    docs: List[str] = []
    total = 0
    for path in files:
        new = _read_file(path, text_key)
        docs.extend(new)
        total += sum(len(d) for d in new)
        if max_bytes is not None and total >= max_bytes:
            break
    if not docs:
        raise ValueError(f"data.paths: no documents in {list(paths)}")
    return docs


def default_cache_dir() -> str:
    """``$HP_CACHE_DIR`` or ``~/.cache/hyper_parallel``."""
    return os.environ.get("HP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "hyper_parallel")


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _train_bpe(docs: Sequence[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    return tok


def load_tokenizer(spec: str, docs: Sequence[str], vocab_size: int, cache_dir: str, corpus_key: str) -> Any:
    """A ``tokenizers.Tokenizer``: ``spec == "bpe"`` trains (or reuses the cached) BPE for the corpus;
    ``"hf:<folder>"`` reads the folder's ``tokenizer.json``; otherwise ``spec`` is a ``tokenizer.json`` path."""
    from tokenizers import Tokenizer
    if spec.startswith("hf:"):
        from hyper_parallel.trainer.hf_folder import tokenizer_file  # pylint: disable=import-outside-toplevel
        path = tokenizer_file(spec[3:])
        if path is None:
            raise ValueError(f"data.tokenizer: {spec[3:]} has no tokenizer.json")
        return Tokenizer.from_file(path)
    if spec != "bpe":
        if not os.path.isfile(spec):
            raise ValueError(f"data.tokenizer: expected 'bpe' or a tokenizer.json file, got {spec!r} (not a file)")
        return Tokenizer.from_file(spec)
    path = os.path.join(cache_dir, f"bpe-{vocab_size}-{corpus_key}.json")
    if os.path.isfile(path):
        return Tokenizer.from_file(path)
    tok = _train_bpe(docs, vocab_size)
    os.makedirs(cache_dir, exist_ok=True)
    _atomic_write(path, tok.to_str().encode())
    return tok


class TokenDataset:
    """Packed sequences of ``seq_len + 1`` token ids over one token stream; train and eval indices."""

    def __init__(self, tokens: "array", seq_len: int, eval_fraction: float, vocab_size: int) -> None:
        n = (len(tokens) - 1) // seq_len
        if n < 4:
            raise ValueError(f"data: the corpus holds {len(tokens)} tokens, too few for sequences of "
                             f"training.seq_len={seq_len}; raise data.max_corpus_mb or lower seq_len")
        self.tokens = tokens
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        n_eval = max(1, int(n * eval_fraction))
        self.num_train = n - n_eval
        self.num_eval = n_eval

    def sequence(self, index: int, split: str = "train") -> List[int]:
        """Sequence ``index`` of ``split`` (``seq_len + 1`` ids; consecutive sequences share one token)."""
        start = (index if split == "train" else self.num_train + index) * self.seq_len
        return self.tokens[start:start + self.seq_len + 1].tolist()

    def __len__(self) -> int:
        return self.num_train


def prepare_dataset(source: str, paths: Sequence[str], *, text_key: str, tokenizer: str, vocab_size: int,
                    max_corpus_mb: float, cache_dir: str, seq_len: int, eval_fraction: float) -> TokenDataset:
    """Corpus -> (cached) tokenizer -> (cached) token stream -> :class:`TokenDataset`. Safe to call on every
    rank at once (atomic cache writes); call on one rank first to train the tokenizer once."""
    docs = read_documents(source, paths, text_key=text_key, max_bytes=int(max_corpus_mb * 1e6))
    digest = hashlib.sha256()
    for d in docs:
        digest.update(d.encode("utf-8", "replace"))
        digest.update(b"\0")
    corpus_key = digest.hexdigest()[:16]
    cache_dir = cache_dir or default_cache_dir()
    tok = load_tokenizer(tokenizer, docs, vocab_size, cache_dir, corpus_key)
    tok_key = hashlib.sha256(tok.to_str().encode()).hexdigest()[:16]
    path = os.path.join(cache_dir, f"tokens-{corpus_key}-{tok_key}.i32")
    tokens = array("i")
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            tokens.frombytes(fh.read())
    else:
        eos = tok.token_to_id(EOS)
        if eos is None and tokenizer.startswith("hf:"):  # the folder's own end-of-text token
            from hyper_parallel.trainer.tokenizer import load_hf_tokenizer  # pylint: disable=C0415
            eos = load_hf_tokenizer(tokenizer[3:]).eos_id
        for enc in tok.encode_batch_fast(docs) if hasattr(tok, "encode_batch_fast") else tok.encode_batch(docs):
            tokens.extend(enc.ids)
            if eos is not None:
                tokens.append(eos)
        os.makedirs(cache_dir, exist_ok=True)
        _atomic_write(path, tokens.tobytes())
    return TokenDataset(tokens, seq_len, eval_fraction, tok.get_vocab_size())


class DistributedBatchLoader:
    """Global batches of ``global_batch`` sequences in a seeded order; this rank gets its data-parallel slice.

    ``next_batch()`` returns this rank's rows (lists of ``seq_len + 1`` ids); ``state_dict()`` /
    ``load_state_dict()`` hold the position (sequences consumed), so a resumed run sees the same batches.

    ``micro_batches``: how many micro-batches a step consumes the global batch in (gradient accumulation x
    pipeline micro-batches). Global micro-batch ``i`` is the ``i``-th contiguous slice of the global batch, split
    over the data-parallel ranks: this rank's rows are its share of micro-batch 0, then of micro-batch 1, ...
    (the trainer cuts them into ``micro_batches`` equal consecutive groups). So every layout with ``n``
    micro-batches sees the same micro-batches as one process with ``grad_accum = n``: what statistics taken per
    micro-batch (the MoE auxiliary loss) need to be layout-independent. With 1 (the default) a rank's rows
    are one contiguous slice of the global batch.
    """

    def __init__(self, dataset: TokenDataset, global_batch: int, *, dp_rank: int = 0, dp_size: int = 1,
                 seed: int = 0, split: str = "train", micro_batches: int = 1) -> None:
        if global_batch % dp_size:
            raise ValueError(f"training.global_batch={global_batch} is not divisible by the data-parallel degree "
                             f"{dp_size}")
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1 \
                or global_batch % (dp_size * micro_batches):
            raise ValueError(f"DistributedBatchLoader(micro_batches): expected an int >= 1 with global_batch "
                             f"{global_batch} divisible by data-parallel degree {dp_size} x micro_batches, got "
                             f"{micro_batches!r}")
        if not 0 <= dp_rank < dp_size:
            raise ValueError(f"DistributedBatchLoader(dp_rank): expected 0 <= dp_rank < {dp_size}, got {dp_rank}")
        self.dataset = dataset
        self.global_batch = global_batch
        self.dp_rank = dp_rank
        self.dp_size = dp_size
        self.seed = seed
        self.split = split
        self.micro_batches = micro_batches
        self.consumed = 0
        self._order: Dict[int, List[int]] = {}

    def _size(self) -> int:
        return self.dataset.num_train if self.split == "train" else self.dataset.num_eval

    def _index(self, position: int) -> int:
        n = self._size()
        epoch, offset = divmod(position, n)
        order = self._order.get(epoch)
        if order is None:
            order = list(range(n))
            if self.split == "train":
                random.Random(self.seed + epoch).shuffle(order)
            self._order = {epoch: order}
        return order[offset]

    def global_indices(self, step: Optional[int] = None) -> List[int]:
        """The sequence indices of global batch ``step`` (default: the next one)."""
        start = self.consumed if step is None else step * self.global_batch
        return [self._index(start + i) for i in range(self.global_batch)]

    def next_batch(self) -> List[List[int]]:
        """This rank's rows of the next global batch; advances the position."""
        whole = self.global_indices()
        span = self.global_batch // self.micro_batches  # one global micro-batch
        per = span // self.dp_size  # this rank's share of it
        idx = [i for start in range(0, self.global_batch, span)
               for i in whole[start + self.dp_rank * per:start + (self.dp_rank + 1) * per]]
        self.consumed += self.global_batch
        return [self.dataset.sequence(i, self.split) for i in idx]

    def __iter__(self) -> Iterator[List[List[int]]]:
        while True:
            yield self.next_batch()

    def reset(self) -> None:
        """Back to the first batch (evaluation passes start over)."""
        self.consumed = 0

    def state_dict(self) -> Dict[str, Any]:
        """The position (and what it is valid for)."""
        return {"consumed": self.consumed, "seed": self.seed, "global_batch": self.global_batch,
                "num_sequences": self._size()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume at a saved position; refuses a state from a different dataset or batch size."""
        mine = {"seed": self.seed, "global_batch": self.global_batch, "num_sequences": self._size()}
        for key, value in mine.items():
            if key in state and int(state[key]) != value:
                raise ValueError(f"DistributedBatchLoader.load_state_dict: the checkpoint's {key}={int(state[key])} "
                                 f"does not match this run's {value}; the data would not continue where it stopped")
        self.consumed = int(state["consumed"])
