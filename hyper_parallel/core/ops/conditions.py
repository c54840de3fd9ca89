# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Row conditions: a strategy row that holds only for some argument values or shard layouts (pure Python).

A strategy row of a :class:`~hyper_parallel.core.ops.rules.table.StrategyTableRule` table or of an entry's
``strategies`` (:mod:`hyper_parallel.core.ops.strategies`) may end in ``when CONDITION``::

    'P(sum),R->P(sum) when value@2 == 0'                      # masked_fill: filled entries sum to 0
    'S(0)->S(0) when even'                                    # ravel: every shard the same size
    'S(1)->S(1) when kernel_size@1 == stride@2 == 1 and nonempty'

The language is deliberately small (data, never code):

* ``CONDITION := ATOM ( and ATOM )*`` — every atom must hold;
* ``ATOM := TERM OP TERM ( OP TERM )*`` with ``OP`` ``==`` or ``!=`` — a chain compares neighbours
  (``a == b == 1`` means ``a == b and b == 1``);
* ``TERM`` — a literal (an integer, a decimal number, ``True``, ``False``, ``None``) or an argument
  ``name@position`` (positional ``position`` of the call, else keyword ``name``, else ``None``), or a bare
  ``name`` that the rule's ``layout``/``args`` option places (else read by keyword only); an argument whose
  name contains ``dim`` reads a negative integer counted from the first tensor's rank (``dim=-1`` of a 2-D
  input is ``1``); a sequence equals a number when every item does (``kernel_size=(1, 1)`` equals ``1``);
* layout atoms, about the tensor dims the row shards (``S(d)`` inputs) on the mesh dim being decided, with
  the sizes of the call's global shapes: ``even`` — every shard has the same size (the dim's size is a
  multiple of the mesh dims that shard it); ``nonempty`` — no shard is empty.

A row whose condition does not hold for a call is not offered: the rule decides as if the row were
absent (the next row, ultimately gathering); never a guessed result. A malformed condition is a
:class:`RuleError` naming the row and what was expected.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from hyper_parallel.core.ops.rule import OpCall, RuleError
from hyper_parallel.core.placement import Shard, chunk_sizes

__all__ = ["Condition", "Row", "parse_condition", "split_row", "condition_places", "LAYOUT_ATOMS"]

#: atoms about the shard layout (no argument involved)
LAYOUT_ATOMS = ("even", "nonempty")
_WHEN = " when "
_TERM = re.compile(r"^(?:(?P<name>[A-Za-z_]\w*)(?:@(?P<pos>\d+))?|(?P<num>-?\d+(?:\.\d+)?(?:e-?\d+)?))$")
_LITERALS = {"True": True, "False": False, "None": None}
_OPS = re.compile(r"\s*(==|!=)\s*")


class Row(tuple):
    """One strategy row: a pair ``(inputs, outputs)`` of placement texts (it unpacks as two items) with its
    parsed ``when`` condition in :attr:`when` (None: the row always holds)."""

    when: Optional["Condition"]

    def __new__(cls, inputs: Tuple[str, ...], outputs: Tuple[str, ...], when: Optional["Condition"] = None):
        row = super().__new__(cls, (tuple(inputs), tuple(outputs)))
        row.when = when
        return row

    def text(self) -> str:
        """The row as written: ``"S(0)->S(0) when even"``."""
        base = f"{','.join(self[0])}->{','.join(self[1])}"
        return base + (f"{_WHEN}{self.when.text}" if self.when is not None else "")


def split_row(text: str) -> Tuple[str, Optional[str]]:
    """``"S(0)->S(0) when even"`` -> ``("S(0)->S(0)", "even")``; a row without ``when`` -> ``(text, None)``."""
    parts = re.split(r"\s+when(?:\s+|$)", text.strip(), maxsplit=1)
    if len(parts) == 1:
        return text.strip(), None
    return parts[0].strip(), parts[1].strip()


@dataclass(frozen=True)
class _Term:
    """A literal (``name`` None) or an argument (``name``, ``pos`` or None)."""

    value: Any = None
    name: Optional[str] = None
    pos: Optional[int] = None

    def read(self, call: OpCall, places: Mapping[str, Sequence[Any]]) -> Any:
        """The term's value for ``call`` (an absent argument reads as its default, else ``None``; a negative
        integer of a dim argument — its name contains ``dim`` — counts from the first tensor's rank)."""
        if self.name is None:
            return self.value
        if self.pos is not None:
            value = call.arg(self.pos, self.name, None)
        elif self.name in places:
            value = call.arg(places[self.name][0], self.name, places[self.name][1])
        else:
            value = call.kwargs.get(self.name)
        if "dim" in self.name and isinstance(value, int) and not isinstance(value, bool) and value < 0 \
                and call.tensors and call.tensors[0].ndim:
            return value % call.tensors[0].ndim  # dim=-1 is the last dim, as torch reads it
        return value


def _term(text: str, where: str) -> _Term:
    if text in _LITERALS:
        return _Term(_LITERALS[text])
    m = _TERM.match(text)
    if m is None:
        raise RuleError(f"{where}: term {text!r}: expected an argument 'name' or 'name@position', or a literal "
                        "(integer, decimal number, True, False, None)")
    if m.group("num") is not None:
        num = m.group("num")
        return _Term(float(num) if any(c in num for c in ".e") else int(num))
    return _Term(name=m.group("name"), pos=int(m.group("pos")) if m.group("pos") else None)


@dataclass(frozen=True)
class _Compare:
    """A chain ``t0 op0 t1 op1 t2 ...``."""

    terms: Tuple[_Term, ...]
    ops: Tuple[str, ...]

    def holds(self, call: OpCall, places: Mapping[str, Sequence[Any]]) -> bool:
        """True when every neighbouring pair of the chain compares as written."""
        values = [t.read(call, places) for t in self.terms]
        for op, a, b in zip(self.ops, values, values[1:]):
            same = _same(a, b)
            if (op == "==") != same:
                return False
        return True


def _same(a: Any, b: Any) -> bool:
    """Argument equality: ``None`` only equals ``None``; numbers by value (``0 == 0.0``); sequences item by
    item (``kernel_size=(1, 1)`` equals ``[1, 1]``); a sequence equals a number when every item does
    (``(1, 1) == 1``, ``(1,) == 1``)."""
    if isinstance(a, (list, tuple)) != isinstance(b, (list, tuple)):  # (1, 1) == 1: every item equals it
        seq, one = (a, b) if isinstance(a, (list, tuple)) else (b, a)
        return bool(seq) and all(_same(x, one) for x in seq)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return False  # a tensor placeholder or another object never equals a literal


def _compare(text: str, where: str) -> _Compare:
    parts = _OPS.split(text.strip())
    if len(parts) < 3 or len(parts) % 2 == 0:
        raise RuleError(f"{where}: atom {text!r}: expected 'TERM == TERM' or 'TERM != TERM' (chains allowed: "
                        f"'a == b == 1'), or one of {list(LAYOUT_ATOMS)}")
    terms = tuple(_term(p.strip(), where) for p in parts[0::2])
    if all(t.name is None for t in terms):
        raise RuleError(f"{where}: atom {text!r} compares only literals (it names no argument)")
    return _Compare(terms, tuple(parts[1::2]))


@dataclass(frozen=True)
class Condition:
    """A parsed ``when`` clause (see the module docstring); :meth:`holds` evaluates it for one call."""

    text: str
    compares: Tuple[_Compare, ...]
    layout: Tuple[str, ...]

    def names(self) -> Tuple[str, ...]:
        """The argument names the condition reads."""
        return tuple(t.name for c in self.compares for t in c.terms if t.name is not None)

    def holds(self, call: OpCall, d: int, inputs: Sequence[str], places: Optional[Mapping[str, Any]] = None,
              current: Optional[Sequence[Sequence[Any]]] = None) -> bool:
        """True when the row with input placements ``inputs`` (one text per tensor) may decide mesh dim ``d``
        of ``call``: every argument comparison holds, and every layout atom holds for the tensor dims the
        row shards. ``places``: name -> [position, default] of bare argument names (the rule's ``layout`` /
        ``args`` option); ``current``: per tensor, the placements of the other mesh dims (default: the
        call's own), which also shard a dim the row shards."""
        places = places or {}
        if not all(c.holds(call, places) for c in self.compares):
            return False
        return all(_layout_holds(atom, call, d, inputs, current) for atom in self.layout)


def _layout_holds(atom: str, call: OpCall, d: int, inputs: Sequence[str],
                  current: Optional[Sequence[Sequence[Any]]]) -> bool:
    for i, text in enumerate(inputs):
        if not text.startswith("S(") or i >= len(call.tensors):
            continue
        t = call.tensors[i]
        dim = int(text[2:-1])
        if dim >= t.ndim:
            return False
        placements = current[i] if current is not None else (t.placements if t.is_dtensor else ())
        parts = [call.mesh_shape[e] for e, p in enumerate(placements)
                 if e != d and isinstance(p, Shard) and p.dim == dim and e < len(call.mesh_shape)]
        parts.append(call.mesh_shape[d])
        if not _layout_ok(atom, t.shape[dim], parts):
            return False
    return True


def _layout_ok(atom: str, size: int, parts: Sequence[int]) -> bool:
    """``even``: ``size`` splits into equal chunks over every mesh dim in ``parts`` (nested); ``nonempty``:
    no nested chunk is empty (``torch.chunk`` semantics, as :class:`Shard`)."""
    sizes = [size]
    for n in parts:
        sizes = [c for s in sizes for c in chunk_sizes(s, n)]
    if atom == "even":
        return len(set(sizes)) == 1
    return min(sizes) > 0


def parse_condition(text: str, where: str = "condition") -> Condition:
    """Parse a ``when`` clause; a :class:`RuleError` naming ``where`` when it is malformed."""
    if not isinstance(text, str) or not text.strip():
        raise RuleError(f"{where}: empty condition after 'when': expected atoms like 'value@2 == 0' or "
                        f"{list(LAYOUT_ATOMS)} joined by 'and'")
    compares, layout = [], []
    for atom in (a.strip() for a in re.split(r"\s+and\s+", text.strip())):
        if atom in LAYOUT_ATOMS:
            layout.append(atom)
        elif not atom:
            raise RuleError(f"{where}: {text!r}: an empty atom around 'and'")
        else:
            compares.append(_compare(atom, where))
    return Condition(text.strip(), tuple(compares), tuple(layout))


def condition_places(layout: Mapping[str, Any], args: Mapping[str, Any], op: str) -> Dict[str, Sequence[Any]]:
    """The ``name -> [position, default]`` map of bare names: the table's ``layout`` plus its ``args``
    option (checked: each a ``[position, default]`` pair)."""
    out: Dict[str, Sequence[Any]] = dict(layout or {})
    for name, spec in (args or {}).items():
        if not isinstance(spec, (list, tuple)) or len(spec) != 2 or not isinstance(spec[0], int) \
                or isinstance(spec[0], bool) or spec[0] < 0:
            raise RuleError(f"{op}: option args.{name}={spec!r}: expected [position, default]")
        out[name] = spec
    return out
