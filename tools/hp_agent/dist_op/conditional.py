# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Conditional strategies: placements that hold only for some argument values or shard layouts.

The synthesis (:mod:`hp_agent.dist_op.synth`) keeps a strategy for a signature only if it holds on 2 and 3
ranks, for every value generator and with the sample's other arguments moved. A strategy that fails one
of those may still hold *under a condition* (:mod:`hyper_parallel.core.ops.conditions`): ``masked_fill``
with a ``Partial(sum)`` input when ``value == 0``; ``ravel`` of ``S(0)`` when the shards are ``even``;
``avg_pool1d`` of a spatial shard when ``kernel_size == 1``, the stride is absent and no shard is empty.

:func:`derive` finds them per sample call: each input-placement combination (``R``, ``S(d)``, ``P(sum)``)
that is not accepted unconditionally but assembles on one of the simulated mesh sizes is put to the
most specific condition the call satisfies (every non-tensor argument equal to its value in the call,
then ``nonempty``, then ``even``), which is then generalised greedily: an argument atom is dropped (or
``arg == v`` widened to ``arg != d`` for a sharded dim ``d``) while the condition still **validates**.
A condition validates when, on every variant call (the sample; each free argument moved alone and all
together; each sharded dim resized to 1, 2, 3, 5 and 6) and on 2 and 3 ranks, wherever the condition
holds (evaluated exactly as the rule evaluates it, on the dispatcher's ``OpCall``) the combination
assembles under one output placement for every value generator. So a row is emitted only when every
generator passes under its condition; a too-loose condition is rejected by some variant.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["ConditionalRow", "derive", "validate", "argument_atoms", "SIZES", "op_calls"]

#: sizes a sharded dim is resized to when a condition is validated (empty, uneven and even shards on 2 and 3)
SIZES = (1, 2, 3, 5, 6)
MAX_NON_R = 2
_LITERAL_TYPES = (bool, int, float)


@dataclass
class ConditionalRow:
    """One conditional strategy of a signature: ``inputs->outputs when condition`` and its evidence."""

    signature: str
    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]
    condition: str
    evidence: str = ""

    def text(self) -> str:
        """``S(0)->S(0) when even``."""
        return f"{','.join(self.inputs)}->{','.join(self.outputs)} when {self.condition}"


@dataclass
class _Atom:
    """``ref == literal`` (or ``ref != literal``) about one non-tensor argument."""

    ref: str
    value: Any
    op: str = "=="
    arg: Tuple[Any, Any] = field(default=(None, None))  # (position or None, keyword name)

    def text(self) -> str:
        """``value@2 == 0``."""
        return f"{self.ref} {self.op} {_literal(self.value)}"


def _literal(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = value[0]
    return repr(value) if not isinstance(value, float) or value != int(value) else repr(int(value))


def _expressible(value: Any) -> bool:
    """A value the condition language can name: None, a bool, an int, a float, or a sequence of one repeated
    int (``kernel_size=(1, 1)`` equals ``1``)."""
    if value is None or isinstance(value, _LITERAL_TYPES):
        return True
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(v, int) and not isinstance(v, bool) and v == value[0] for v in value)


def argument_atoms(iface: Any, args: list, kwargs: dict) -> List[_Atom]:
    """One ``==`` atom per non-tensor argument of the call (an absent parameter with a default: ``== None``),
    each read as ``name@position`` (the interface's name; ``arg<i>`` when the interface does not fit)."""
    params = list(getattr(iface, "params", []) or [])
    fits = len(args) <= len(params) and all(p.name not in kwargs or i >= len(args) for i, p in enumerate(params))
    atoms = _positional_atoms(args, params if fits else [])
    atoms += _keyword_atoms(kwargs, params if fits else [])
    if fits:
        atoms += [_Atom(f"{p.name}@{i}", None, arg=(i, p.name)) for i, p in enumerate(params[len(args):], len(args))
                  if not p.tensor and p.name not in kwargs and p.has_default]
    _normalise_dims(atoms, getattr(args[0], "ndim", 0) if args else 0)
    return atoms


def _normalise_dims(atoms: List[_Atom], ndim: int) -> None:
    """A negative dim argument's value counted from the rank, as the condition reads the call's."""
    for atom in atoms:
        if "dim" in str(atom.arg[1]) and isinstance(atom.value, int) and not isinstance(atom.value, bool) \
                and atom.value < 0 and ndim:
            atom.value %= ndim


def _tensor_like(a: Any) -> bool:
    import torch
    return isinstance(a, torch.Tensor) or (type(a) in (list, tuple)  # pylint: disable=unidiomatic-typecheck
                                           and any(isinstance(t, torch.Tensor) for t in a))


def _positional_atoms(args: list, params: list) -> List[_Atom]:
    atoms = []
    for i, a in enumerate(args):
        if i == 0 or _tensor_like(a) or not _expressible(a):
            continue
        name = params[i].name if params else f"arg{i}"
        atoms.append(_Atom(f"{name}@{i}", a, arg=(i, name)))
    return atoms


def _keyword_atoms(kwargs: dict, params: list) -> List[_Atom]:
    atoms = []
    for k, v in kwargs.items():
        if not _tensor_like(v) and _expressible(v):
            pos = next((i for i, p in enumerate(params) if p.name == k), None)
            atoms.append(_Atom(f"{k}@{pos}" if pos is not None else k, v, arg=(pos, k)))
    return atoms


def _condition_text(atoms: Sequence[_Atom], layout: Sequence[str]) -> str:
    return " and ".join([a.text() for a in atoms] + list(layout))


# ---------------------------------------------------------------------- variants
def _set_arg(args: list, kwargs: dict, atom: _Atom, value: Any) -> Tuple[list, dict]:
    pos, name = atom.arg
    a, k = list(args), dict(kwargs)
    if pos is not None and pos < len(a):
        a[pos] = value
    else:
        k[name] = value
    return a, k


def _moves(value: Any, ndim: int) -> List[Any]:
    """Other values of a free argument: moved (ints + 1, floats + 0.7, bools flipped), and for ints each dim
    index; an absent argument gets 1 and 2 (a stride, a dim)."""
    from hp_agent.dist_op.synth import _move  # pylint: disable=import-outside-toplevel,protected-access
    if value is None:
        return [1, 2]
    out = [_move(value)]
    if isinstance(value, int) and not isinstance(value, bool):
        out += [v for v in range(max(ndim, 2)) if v != value]
    unique = {repr(v): v for v in out if repr(v) != repr(value)}
    return list(unique.values())


def _arg_variants(args: list, kwargs: dict, free: Sequence[_Atom], fixed: Sequence[_Atom], ndim: int):
    """The call with each free argument moved alone, all moved together, and each ``!=`` atom's argument at
    other dim indices."""
    for atom in free:
        for v in _moves(atom.value, ndim):
            yield _set_arg(args, kwargs, atom, v)
    if len(free) > 1:
        a, k = args, kwargs
        for atom in free:
            a, k = _set_arg(a, k, atom, _moves(atom.value, ndim)[0])
        yield a, k
    for atom in fixed:
        if atom.op == "!=":
            for v in range(-ndim, ndim):  # negative dims too: the rule reads them counted from the rank
                if v % max(ndim, 1) != atom.value:
                    yield _set_arg(args, kwargs, atom, v)


def _shape_variants(args: list, kwargs: dict, combo: Sequence[str]):
    """The call with each dim the combination shards resized (the same dim of every tensor of that rank and
    size too: a mask, a broadcast partner), values redrawn."""
    import torch
    from hp_agent.dist_op.probe import _get, _put, collect_tensors  # pylint: disable=protected-access
    locs = collect_tensors(args, kwargs)
    tensors = [_get(args, kwargs, loc) for loc in locs]
    for i, p in enumerate(combo):
        if not p.startswith("S("):
            continue
        d = int(p[2:-1])
        base = tensors[i]
        for size in SIZES:
            if size == base.shape[d]:
                continue
            a, k = list(args), dict(kwargs)
            for loc, t in zip(locs, tensors):
                if t.dim() == base.dim() and t.shape[d] == base.shape[d]:
                    shape = list(t.shape)
                    shape[d] = size
                    _put(a, k, loc, _redraw(t, shape, torch))
            yield a, k


def _redraw(t: Any, shape: List[int], torch: Any) -> Any:
    if t.dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if t.is_floating_point():
        return torch.rand(shape, dtype=t.dtype) + 0.5
    return torch.randint(0, 3, shape, dtype=t.dtype)


# ---------------------------------------------------------------------- validation
def validate(op: str, fn: Callable, sample: Tuple[list, dict], combo: Tuple[str, ...], condition: str,
             free: Sequence[_Atom] = (), ranks: Sequence[int] = (2, 3), generators: Optional[Sequence[str]] = None,
             fixed: Sequence[_Atom] = ()) -> Optional[Tuple[str, ...]]:
    """The output placements under which ``combo`` holds wherever ``condition`` holds (see the module
    docstring), or None when some variant call where the condition holds does not assemble (too loose), or
    the condition holds nowhere. ``free``: argument atoms not in the condition (moved in the variants);
    ``fixed``: ``!=`` atoms of the condition (their argument takes every other dim index)."""
    from hyper_parallel.core.ops.conditions import parse_condition
    from hp_agent.dist_op.synth import _best, _partials_consistent  # pylint: disable=protected-access
    cond = parse_condition(condition, f"{op}: {','.join(combo)}") if condition else None  # '': always
    common: Optional[List[set]] = None
    for found in _outputs_where(op, fn, sample, combo, cond, (free, fixed), ranks, generators):
        if not found:
            return None
        common = [set(f) for f in found] if common is None else [c & set(f) for c, f in zip(common, found)]
        if not all(common):
            return None
    if not common:
        return None
    outs = _best(common)
    return outs if _partials_consistent(combo, outs) and "value" not in outs else None


def _outputs_where(op: str, fn: Callable, sample, combo, cond, atoms, ranks, generators):
    """Per variant call and mesh size where ``cond`` holds, the output placements every generator accepts
    for ``combo`` (empty: it does not assemble)."""
    import torch
    from hp_agent.dist_op.probe import collect_tensors, parse_placement
    from hp_agent.dist_op.synth import GENERATORS, _agreed, _runs  # pylint: disable=protected-access
    from hp_agent.dist_op.verify import _opcall  # pylint: disable=protected-access  # the dispatcher's OpCall
    placements = [parse_placement(p) for p in combo]
    args, kwargs = sample
    ndim = args[0].dim() if args and isinstance(args[0], torch.Tensor) else 0
    variants = (v for base in itertools.chain([sample], _arg_variants(args, kwargs, atoms[0], atoms[1], ndim))
                for v in itertools.chain([base], _shape_variants(base[0], base[1], combo)))
    for a, k in variants:
        if len(collect_tensors(a, k)) != len(combo) or not _runs(fn, a, k):
            continue
        for n in ranks:
            if cond is None or cond.holds(_opcall(op, a, k, placements, n), 0, combo):
                yield _agreed(fn, a, k, [combo], (n,), generators or GENERATORS).get(combo) or []


def _layouts(combo: Sequence[str]) -> List[List[str]]:
    return [[], ["nonempty"], ["even"]] if any(p.startswith("S(") for p in combo) else [[]]


def _generalise(op: str, fn: Callable, sample, combo, atoms: List[_Atom], layout: List[str],
                ranks, generators) -> Tuple[str, List[_Atom], Optional[Tuple[str, ...]]]:
    """Drop (or, for a dim argument, widen to ``!= d``) each atom while the condition still validates.
    Returns (``"conditional"``, the atoms kept, the output placements), (``"unconditional"``, ...) when the
    combination holds with no condition at all, or (``"none"``, ...) when no condition validates."""
    kept = list(atoms)
    outs = validate(op, fn, sample, combo, _condition_text(kept, layout), [], ranks, generators)
    if outs is None:
        return "none", kept, None
    if not kept and not layout:
        return "unconditional", [], outs
    for atom in list(atoms):
        if not _moved_runs(fn, sample, atom):
            continue  # no other value of it runs on one device: no evidence that the row holds without it
        rest = [a for a in kept if a is not atom]
        found = validate(op, fn, sample, combo, _condition_text(rest, layout), [a for a in atoms if a not in rest],
                         ranks, generators)
        if found is not None and not rest and not layout:
            return "unconditional", [], found  # the synthesis' business, not a conditional row
        if found is not None:
            kept, outs = rest, found
        elif _dim_argument(atom):
            kept, outs = _widen(op, fn, sample, combo, (atoms, kept, atom), layout, ranks, generators, outs)
    return "conditional", kept, outs


def _moved_runs(fn: Callable, sample, atom: _Atom) -> bool:
    """Some other value of the atom's argument (:func:`_moves`) runs on one device with the sample. When none
    does (``repeat_interleave``'s ``output_size``: only the global size is valid, and a shard's local call
    raises with it), the atom is kept: the variants could not show the row holds for other values."""
    from hp_agent.dist_op.synth import _runs  # pylint: disable=import-outside-toplevel,protected-access
    args, kwargs = sample
    ndim = getattr(args[0], "ndim", 0) if args else 0
    return any(_runs(fn, *_set_arg(args, kwargs, atom, v)) for v in _moves(atom.value, ndim))


def _widen(op, fn, sample, combo, state, layout, ranks, generators, outs):
    """``dim == v`` widened to ``dim != d`` for a dim ``d`` the combination shards, when that validates;
    else the atoms unchanged. Returns (atoms, output placements)."""
    atoms, kept, atom = state
    for d in (int(p[2:-1]) for p in combo if p.startswith("S(")):
        if d == atom.value:
            continue
        wide = _Atom(atom.ref, d, "!=", atom.arg)
        trial = [wide if a is atom else a for a in kept]
        found = validate(op, fn, sample, combo, _condition_text(trial, layout),
                         [a for a in atoms if a not in trial and a is not atom], ranks, generators, fixed=[wide])
        if found is not None:
            return trial, found
    return kept, outs


def _dim_argument(atom: _Atom) -> bool:
    """An integer argument naming a tensor dim (``dim``, ``dimension``): ``== v`` may widen to ``!= d``."""
    name = str(atom.arg[1] or "")
    return "dim" in name and isinstance(atom.value, int) and not isinstance(atom.value, bool) and atom.op == "=="


def _combos(tensors: Sequence[Any], accepted: set, mutated: Sequence[int] = ()) -> List[Tuple[str, ...]]:
    """R / S(d) / P(sum) per tensor (R only for a tensor written in place), at most :data:`MAX_NON_R` not
    replicated, minus the all-R combination and those accepted unconditionally."""
    cands = [["R"] + ([] if i in mutated else [f"S({d})" for d in range(t.dim())]
                      + (["P(sum)"] if t.is_floating_point() else []))
             for i, t in enumerate(tensors)]
    out = []
    for combo in itertools.product(*cands):
        non_r = sum(1 for p in combo if p != "R")
        if 0 < non_r <= MAX_NON_R and combo not in accepted:
            out.append(tuple(combo))
    return out


def derive(op: str, fn: Callable, calls: Dict[str, Any], iface: Any,
           accepted: Dict[str, set], ranks: Sequence[int] = (2, 3), generators: Optional[Sequence[str]] = None,
           budget: Optional[float] = 120.0, mutated: Sequence[int] = ()) -> List[ConditionalRow]:
    """Conditional rows for each signature's sample calls in ``calls`` (a call or a list of calls per
    signature; see the module docstring); ``accepted``: per signature, the input-placement tuples the
    synthesis accepted unconditionally; ``mutated``: tensor inputs the op writes in place (running
    statistics): only replicated in any row (the probes compare outputs, and a partial or sharded buffer
    updated on every rank is not the update); ``budget``: seconds after which no further combination starts."""
    from hp_agent.dist_op.synth import GENERATORS  # pylint: disable=import-outside-toplevel
    deadline = time.monotonic() + budget if budget is not None else None
    how = (ranks, generators or GENERATORS, tuple(mutated), deadline)
    rows: List[ConditionalRow] = []
    seen: set = set()
    for key, found in calls.items():
        for args, kwargs in (found if isinstance(found, list) else [found]):
            if _derive_call(op, fn, (key, args, kwargs), iface, accepted.get(key, set()), how, (rows, seen)):
                return rows  # the budget ran out
    return rows


def _derive_call(op: str, fn: Callable, call, iface: Any, accepted: set, how, out) -> bool:
    """Conditional rows of one sample call appended to ``out[0]``; True when the budget ran out."""
    from hp_agent.dist_op.probe import _get, collect_tensors  # pylint: disable=protected-access
    from hp_agent.dist_op.synth import _agreed  # pylint: disable=protected-access
    key, args, kwargs = call
    ranks, generators, mutated, deadline = how
    rows, seen = out
    tensors = [_get(args, kwargs, loc) for loc in collect_tensors(args, kwargs)]
    if not tensors or any(t.numel() == 0 for t in tensors):
        return False
    combos = _combos(tensors, accepted, mutated)
    somewhere: set = set()
    for n in ranks:
        somewhere |= set(_agreed(fn, args, kwargs, combos, (n,), generators))
    atoms = argument_atoms(iface, args, kwargs)
    for combo in sorted(c for c in somewhere if (key, c) not in seen):
        if deadline is not None and time.monotonic() > deadline:
            return True
        row = _derive_one(op, fn, (args, kwargs), combo, atoms, ranks, generators)
        if row is not None:
            seen.add((key, combo))
            rows.append(ConditionalRow(key, combo, row[0], row[1], _evidence(tensors, kwargs)))
    return False


def _derive_one(op, fn, sample, combo, atoms, ranks, generators) -> Optional[Tuple[Tuple[str, ...], str]]:
    """(output placements, condition) of one combination, or None when no condition validates."""
    for layout in _layouts(combo):
        status, kept, outs = _generalise(op, fn, sample, combo, atoms, layout, ranks, generators)
        if status == "unconditional":
            return None
        if status == "conditional" and outs is not None:
            return outs, _condition_text(kept, layout)
    return None


def _evidence(tensors: Sequence[Any], kwargs: dict) -> str:
    shapes = ", ".join("x".join(str(s) for s in t.shape) or "scalar" for t in tensors)
    return f"({shapes})" + (f" {kwargs}" if kwargs else "")


def op_calls(op: str, fn: Callable, synthesis: Any, iface: Any) -> Dict[str, List[Tuple[list, dict]]]:
    """Per signature, the sample calls conditions are derived on: the synthesis' first call, the pipeline's own
    samples (:func:`hp_agent.dist_op.samples.samples_for`: ``kernel_size=1``, ``value=0.0``), and each call
    with a float argument set to ``0.0`` (a fill value that keeps ``Partial(sum)``) — argument values swept."""
    from hp_agent.dist_op.samples import samples_for
    from hp_agent.dist_op.synth import (LAYOUT_KWARGS, _keywordize, _runs, _with_layout_defaults,  # pylint: disable=protected-access
                                        op_layout, signature)
    layout = op_layout(iface) if iface is not None else {}
    try:
        own = [_with_layout_defaults(_keywordize(s, iface, LAYOUT_KWARGS), layout) for s in samples_for(op)]
    except Exception:  # pylint: disable=broad-except  # no own sample: the synthesis' calls only
        own = []
    out: Dict[str, List[Tuple[list, dict]]] = {}
    for args, kwargs in own + list(synthesis.calls.values()):  # the small own samples first (budget)
        seeds = [(args, kwargs)]
        for atom in argument_atoms(iface, args, kwargs):
            if isinstance(atom.value, float) and atom.value != 0.0:
                seeds.append(_set_arg(args, kwargs, atom, 0.0))
        for a, k in seeds:
            if _runs(fn, a, k):
                out.setdefault(signature(a, k), []).append((a, k))
    return out
