# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Load-balancing index maps for context parallelism (pure Python, no framework).

A :class:`SeqLayout` says which global sequence positions each CP rank holds, as *runs*
(``(global_start, length)`` pairs, in the rank's local order). A load balancer builds the layout
for a sequence length and CP degree:

* :class:`Contiguous` (``load_balance=None``): rank ``r`` holds positions ``[r*S/c, (r+1)*S/c)``.
  With a causal mask rank ``c-1`` then does ``2c-1`` times the attention work of rank 0.
* :class:`HeadTail` (``"headtail"``, alias ``"zigzag"``; Megatron's zig-zag): the sequence is cut
  into ``2c`` chunks and rank ``r`` holds chunks ``r`` and ``2c-1-r``, so every rank computes the
  same number of causal (query, key) pairs. Needs ``S % 2c == 0``.
* :class:`PerDocumentHeadTail` (``PerDocumentHeadTail(doc_lengths)``): packed documents, each cut
  into ``2c`` chunks and spread head-tail, so a per-document causal mask is balanced too. Needs
  every document length divisible by ``2c``.

The *gathered order* is what an all-gather of the local shards produces (rank 0's positions, then
rank 1's, ...); :meth:`SeqLayout.gather_order` maps gathered index -> global position and
:meth:`SeqLayout.restore_order` is its inverse (global position -> gathered index).

Lengths that do not divide: we raise :class:`SequenceLengthError` (naming the tensor, its length
and the multiple needed) instead of padding silently; see ``docs/cp.md`` ("Lengths") for how to pad
a causal LM batch (pad at the end, label the pad tokens ``-100``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import List, Sequence, Tuple, Union

__all__ = ["SeqLayout", "LoadBalancer", "Contiguous", "HeadTail", "PerDocumentHeadTail", "SequenceLengthError",
           "make_load_balancer", "LOAD_BALANCE_NAMES"]

Run = Tuple[int, int]

LOAD_BALANCE_NAMES = ("headtail", "zigzag", "none")


class SequenceLengthError(ValueError):
    """A sequence length does not fit the CP degree and load balancer."""


@dataclass(frozen=True)
class SeqLayout:
    """Which global positions each of ``cp`` ranks holds (``runs[rank]`` in local order)."""

    seq_len: int
    cp: int
    runs: Tuple[Tuple[Run, ...], ...]

    def __post_init__(self) -> None:
        if len(self.runs) != self.cp:
            raise ValueError(f"SeqLayout: {len(self.runs)} run lists for cp={self.cp}")
        seen = sorted(p for r in range(self.cp) for p in self.positions(r))
        if seen != list(range(self.seq_len)):
            raise ValueError(f"SeqLayout: the runs do not partition range({self.seq_len})")

    def local_len(self, rank: int) -> int:
        """Number of positions rank ``rank`` holds."""
        return sum(length for _, length in self.runs[rank])

    @property
    def even(self) -> bool:
        """True when every rank holds the same number of positions."""
        return len({self.local_len(r) for r in range(self.cp)}) == 1

    def positions(self, rank: int) -> List[int]:
        """Global positions held by ``rank``, in local order."""
        return [p for start, length in self.runs[rank] for p in range(start, start + length)]

    def is_sorted(self, rank: int) -> bool:
        """True when the local order of ``rank`` is increasing in global position."""
        pos = self.positions(rank)
        return all(a < b for a, b in zip(pos, pos[1:]))

    def gather_order(self) -> List[int]:
        """Global position of each element of the concatenation of all ranks' shards."""
        return [p for r in range(self.cp) for p in self.positions(r)]

    def restore_order(self) -> List[int]:
        """Inverse of :meth:`gather_order`: for each global position, its index in the gathered order."""
        inv = [0] * self.seq_len
        for i, p in enumerate(self.gather_order()):
            inv[p] = i
        return inv

    def sorted_runs(self) -> Tuple[Run, ...]:
        """Every run of every rank, sorted by global start (a partition of ``range(seq_len)``)."""
        return tuple(sorted(run for runs in self.runs for run in runs))


class LoadBalancer(ABC):
    """Builds the :class:`SeqLayout` of a sequence for a CP degree."""

    name = "abstract"

    @abstractmethod
    def required_multiple(self, cp: int) -> int:
        """The sequence length must be a multiple of this."""

    @abstractmethod
    def _runs(self, seq_len: int, cp: int) -> Tuple[Tuple[Run, ...], ...]:
        """Per-rank runs for a valid length."""

    def layout(self, seq_len: int, cp: int, what: str = "sequence") -> SeqLayout:
        """The layout of a length-``seq_len`` sequence over ``cp`` ranks; ``what`` names the tensor in errors."""
        if not isinstance(cp, int) or cp < 1:
            raise ValueError(f"{self.name} load balancer: cp degree must be a positive int, got {cp!r}")
        self.check_length(seq_len, cp, what)
        return SeqLayout(seq_len, cp, self._runs(seq_len, cp))

    def check_length(self, seq_len: int, cp: int, what: str = "sequence") -> None:
        """Raise :class:`SequenceLengthError` unless ``seq_len`` fits."""
        multiple = self.required_multiple(cp)
        if not isinstance(seq_len, int) or seq_len <= 0 or seq_len % multiple:
            raise SequenceLengthError(
                f"{what}: sequence length {seq_len} is not a positive multiple of {multiple} (cp={cp}, "
                f"load_balance={self.name!r}); pad it at the end to a multiple of {multiple} (labels -100 for "
                f"the pad tokens; with a causal mask real tokens never attend to them), see docs/cp.md")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Contiguous(LoadBalancer):
    """No balancing: rank ``r`` holds the ``r``-th of ``cp`` equal contiguous chunks."""

    name = "none"

    def required_multiple(self, cp: int) -> int:
        return cp

    def _runs(self, seq_len, cp):
        size = seq_len // cp
        return tuple(((r * size, size),) for r in range(cp))


class HeadTail(LoadBalancer):
    """Zig-zag: ``2*cp`` chunks, rank ``r`` holds chunks ``r`` and ``2*cp-1-r``."""

    name = "headtail"

    def required_multiple(self, cp: int) -> int:
        return 2 * cp

    def _runs(self, seq_len, cp):
        size = seq_len // (2 * cp)
        return tuple(((r * size, size), ((2 * cp - 1 - r) * size, size)) for r in range(cp))


class PerDocumentHeadTail(LoadBalancer):
    """Head-tail inside every document of a packed sequence (``doc_lengths`` in order)."""

    name = "perdocument"

    def __init__(self, doc_lengths: Sequence[int]) -> None:
        lengths = tuple(doc_lengths)
        if not lengths or any(not isinstance(n, int) or n <= 0 for n in lengths):
            raise ValueError(f"PerDocumentHeadTail(doc_lengths): expected positive ints, got {doc_lengths!r}")
        self.doc_lengths = lengths

    def required_multiple(self, cp: int) -> int:
        return 2 * cp

    def check_length(self, seq_len: int, cp: int, what: str = "sequence") -> None:
        total = sum(self.doc_lengths)
        if seq_len != total:
            raise SequenceLengthError(f"{what}: sequence length {seq_len} differs from the sum of the document "
                                      f"lengths {total} given to PerDocumentHeadTail")
        bad = [(i, n) for i, n in enumerate(self.doc_lengths) if n % (2 * cp)]
        if bad:
            raise SequenceLengthError(f"{what}: documents (index, length) {bad} are not multiples of 2*cp={2 * cp}; "
                                      "pad each document at its end (labels -100), see docs/cp.md")

    def _runs(self, seq_len, cp):
        per_rank: List[List[Run]] = [[] for _ in range(cp)]
        offset = 0
        for n in self.doc_lengths:
            size = n // (2 * cp)
            for r in range(cp):
                per_rank[r].append((offset + r * size, size))
                per_rank[r].append((offset + (2 * cp - 1 - r) * size, size))
            offset += n
        return tuple(tuple(runs) for runs in per_rank)

    def __repr__(self) -> str:
        return f"PerDocumentHeadTail({list(self.doc_lengths)})"


def make_load_balancer(spec: Union[None, str, LoadBalancer]) -> LoadBalancer:
    """``None``/``"none"`` -> :class:`Contiguous`, ``"headtail"``/``"zigzag"`` -> :class:`HeadTail`,
    a :class:`LoadBalancer` instance -> itself."""
    if isinstance(spec, LoadBalancer):
        return spec
    if spec is None or spec == "none":
        return Contiguous()
    if spec in ("headtail", "zigzag"):
        return HeadTail()
    raise ValueError(f"load_balance: expected one of {LOAD_BALANCE_NAMES}, None or a LoadBalancer "
                     f"(e.g. PerDocumentHeadTail(doc_lengths)), got {spec!r}")
