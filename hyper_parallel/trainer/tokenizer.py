# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The tokenizer of a fine-tuning run: a Hugging Face folder's (``transformers.AutoTokenizer`` when installed,
with its chat template; else ``tokenizers`` on ``tokenizer.json``), or the trainer's own BPE.

:class:`TextTokenizer` is what the SFT pipeline and ``hp-generate`` use: ``encode`` (no special tokens added),
``decode``, ``render_chat``, ``bos_id`` / ``eos_id`` / ``pad_id``, ``vocab_size``, and ``source`` (the file
it was read from, for the run banner)."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from hyper_parallel.trainer.hf_folder import read_tokenizer_config, tokenizer_file

__all__ = ["TextTokenizer", "load_hf_tokenizer", "wrap_tokenizers"]


def _token_text(value: Any) -> Optional[str]:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older tokenizer_config.json files
        value = value.get("content")
    return value if isinstance(value, str) else None


class TextTokenizer:
    """A tokenizer with the few operations the trainer needs (see the module docstring)."""

    def __init__(self, *, encode, decode, vocab_size: int, bos_id: Optional[int], eos_id: Optional[int],
                 pad_id: Optional[int], render_chat=None, source: str = "", backend: Any = None) -> None:
        self._encode, self._decode, self._render = encode, decode, render_chat
        self.vocab_size = vocab_size
        self.bos_id, self.eos_id, self.pad_id = bos_id, eos_id, pad_id
        self.source = source
        self.backend = backend

    def encode(self, text: str) -> List[int]:
        """Token ids of ``text`` (no special tokens added)."""
        return list(self._encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens skipped)."""
        return self._decode(list(ids))

    @property
    def has_chat_template(self) -> bool:
        """Whether :meth:`render_chat` works."""
        return self._render is not None

    def render_chat(self, messages: List[Dict[str, str]], add_generation_prompt: bool = False) -> str:
        """The conversation rendered by the chat template (a ``ValueError`` when there is none)."""
        if self._render is None:
            raise ValueError(f"{self.source or 'the tokenizer'}: no chat template (tokenizer_config.json has no "
                             f"chat_template, or transformers is not installed: pip install 'hyper-parallel[hf]')")
        return self._render(messages, add_generation_prompt)


def _auto_tokenizer(folder: str) -> Optional[TextTokenizer]:
    try:
        from transformers import AutoTokenizer  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    tok = AutoTokenizer.from_pretrained(folder)
    def render(messages, add_generation_prompt):
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    source = tokenizer_file(folder) or os.path.join(folder, "tokenizer_config.json")
    return TextTokenizer(encode=lambda t: tok.encode(t, add_special_tokens=False),
                         decode=lambda ids: tok.decode(ids, skip_special_tokens=True), vocab_size=len(tok),
                         bos_id=tok.bos_token_id, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id,
                         render_chat=render if getattr(tok, "chat_template", None) else None,
                         source=f"{source} (transformers.AutoTokenizer)", backend=tok)


def wrap_tokenizers(tok: Any, *, bos: Optional[str] = None, eos: Optional[str] = None, pad: Optional[str] = None,
                    source: str = "") -> TextTokenizer:
    """A :class:`TextTokenizer` over a ``tokenizers.Tokenizer`` (no chat template)."""
    ids = {name: (tok.token_to_id(t) if t else None) for name, t in (("bos", bos), ("eos", eos), ("pad", pad))}
    return TextTokenizer(encode=lambda t: tok.encode(t, add_special_tokens=False).ids,
                         decode=lambda x: tok.decode(x, skip_special_tokens=True), vocab_size=tok.get_vocab_size(),
                         bos_id=ids["bos"], eos_id=ids["eos"], pad_id=ids["pad"], source=source, backend=tok)


def load_hf_tokenizer(folder: str) -> TextTokenizer:
    """The tokenizer of an HF folder: ``transformers.AutoTokenizer`` when installed (chat template included),
    else ``tokenizers`` on ``tokenizer.json`` with the special tokens of ``tokenizer_config.json``."""
    auto = _auto_tokenizer(folder)
    if auto is not None:
        return auto
    path = tokenizer_file(folder)
    if path is None:
        raise ValueError(f"{folder}: no tokenizer.json (and transformers, which reads other tokenizer formats, is "
                         f"not installed: pip install 'hyper-parallel[hf]')")
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    conf = read_tokenizer_config(folder)
    return wrap_tokenizers(Tokenizer.from_file(path), bos=_token_text(conf.get("bos_token")),
                           eos=_token_text(conf.get("eos_token")), pad=_token_text(conf.get("pad_token")),
                           source=f"{path} (tokenizers)")
