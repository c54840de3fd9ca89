# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Extra sharding strategies of a registry entry, as data (``strategies:`` next to ``rule:``).

A hand-written rule class covers an op family; a strategy it does not offer for one op (found by
``hp-agent dist-op resynth``, confirmed by a person) is added to the op's entry instead of to the class::

    torch.addcmul: {strategies: ['P(sum),R,P(sum)->P(sum)', 'P(sum),P(sum),R->P(sum)']}
    torch.addmm:   {rule: AddmmRule, strategies: {'2,2,2': ['P(sum),S(1),S(0)->P(sum)']}}

A row names one placement per tensor input and per tensor output on **one mesh dim** (``R``, ``S(d)``,
``P(sum|avg|max|min)``); rows in a mapping apply only to calls whose inputs have those ranks (key
``"*"``: any ranks). A
row may end in ``when CONDITION`` (:mod:`hyper_parallel.core.ops.conditions`): it applies only to calls for
which the condition holds (``'P(sum),R->P(sum) when value@2 == 0'`` for ``masked_fill``). The
rule decides first; when it would redistribute an input, each mesh dim whose current input placements
equal a row's inputs exactly (not all ``R``) takes the row, and the rule decides the other mesh dims on
the call with those dims replicated (a strategy per mesh dim, composed like torch DTensor's). The rows
are never used when the rule's decision for the other dims needs an expand, when an ``S(d)`` of a row is
out of range, or when an output tensor dim would be sharded by two mesh dims: then the rule's own
decision stands. Rows only add strategies; nothing the rule offers is removed.

For rules whose tensors are lists (``ForeachRule``) the rows apply per list position: the rule receives
them through ``use_strategies`` and reads them itself.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

from hyper_parallel.core.ops.conditions import Row, parse_condition, split_row
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, RuleError, TensorArg
from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard

__all__ = ["Row", "parse_row", "parse_strategies", "attach_strategies", "placement_of", "row_applies"]

_PLACEMENT = re.compile(r"^(R|S\((\d+)\)|P\((sum|avg|max|min)\))$")
_RANKS = re.compile(r"^\d+(,\d+)*$")



def placement_of(text: str) -> Placement:
    """``"S(1)"`` -> ``Shard(1)``, ``"P(max)"`` -> ``Partial("max")``, ``"R"`` -> ``Replicate()``."""
    m = _PLACEMENT.match(text)
    if m is None:
        raise RuleError(f"placement {text!r}: expected R, S(d) or P(sum|avg|max|min)")
    if m.group(2) is not None:
        return Shard(int(m.group(2)))
    return Partial(m.group(3)) if m.group(3) else Replicate()


def parse_row(text: Any, where: str) -> Row:
    """``"P(sum),R->P(sum)"`` -> ``(("P(sum)", "R"), ("P(sum)",))``, with its ``when`` condition (see
    :mod:`hyper_parallel.core.ops.conditions`) in ``.when``; a RuleError naming ``where``."""
    if not isinstance(text, str) or split_row(text)[0].count("->") != 1:
        raise RuleError(f"{where}: {text!r}: expected a string 'inputs->outputs' like 'P(sum),R->P(sum)' "
                        "(optionally followed by 'when CONDITION')")
    strategy, when = split_row(text)
    condition = parse_condition(when, f"{where}: {text!r}") if when is not None else None
    left, right = (tuple(p.strip() for p in side.split(",")) for side in strategy.split("->"))
    for p in left + right:
        if not _PLACEMENT.match(p):
            raise RuleError(f"{where}: {text!r}: placement {p!r} is not R, S(d) or P(sum|avg|max|min)")
    if all(p == "R" for p in left):
        raise RuleError(f"{where}: {text!r}: an all-R row adds nothing (every rule handles replicated inputs)")
    return Row(left, right, condition)


def parse_strategies(op: str, spec: Any, where: str = "") -> Dict[Optional[str], List[Row]]:
    """The ``strategies`` field: a list of rows (any input ranks) or a mapping ``"2,1"`` (input ranks) ->
    rows. Returns ranks (``None``: any) -> parsed rows."""
    where = f"{where}: {op}: strategies" if where else f"{op}: strategies"
    if isinstance(spec, list):
        return {None: [parse_row(r, where) for r in spec]}
    if isinstance(spec, dict):
        out: Dict[Optional[str], List[Row]] = {}
        for ranks, rows in spec.items():
            if not isinstance(ranks, str) or not (ranks == "*" or _RANKS.match(ranks)) or not isinstance(rows, list):
                raise RuleError(f"{where}: key {ranks!r}: expected input ranks like '2,1' (or '*': any) mapping "
                                "to a list of rows")
            out[None if ranks == "*" else ranks] = [parse_row(r, f"{where}[{ranks!r}]") for r in rows]
        return out
    raise RuleError(f"{where}: expected a list of rows or a mapping of input ranks to rows, got {spec!r}")


def _rows_for(rows: Dict[Optional[str], List[Row]], tensors: Sequence[TensorArg]) -> List[Row]:
    ranks = ",".join(str(t.ndim) for t in tensors)
    return rows.get(None, []) + rows.get(ranks, [])


def row_applies(row: Row, current: Sequence[str], ndims: Sequence[int]) -> bool:
    """True when ``current`` (one placement text per tensor on one mesh dim) equals the row's inputs and
    every ``S(d)`` of the row is in range for its tensor."""
    ins, _ = row
    if len(ins) != len(current) or tuple(ins) != tuple(current):
        return False
    return all(not p.startswith("S(") or int(p[2:-1]) < n for p, n in zip(ins, ndims))


def _current(t: TensorArg, d: int) -> str:
    return t.placements[d].short() if t.is_dtensor else "R"


def _keeps_inputs(call: OpCall, decision: Decision) -> bool:
    for t, need in zip(call.tensors, decision.inputs):
        if need is not None and t.is_dtensor and tuple(need) != tuple(t.placements):
            return False
    return True


def _single_outputs(outputs: Any) -> Optional[List[Any]]:
    """The decision's tensor outputs as a flat list of specs (None when the structure is nested or has
    non-tensor entries: rows are not composed then)."""
    if outputs is None:
        return None
    if hasattr(outputs, "placements"):
        return [outputs]
    if isinstance(outputs, (list, tuple)) and all(o is not None and hasattr(o, "placements") for o in outputs):
        return list(outputs)
    return None


def _compose(call: OpCall, base: Decision, matched: Dict[int, Row]) -> Optional[Decision]:
    """``base`` (decided on the call with the matched mesh dims replicated) with those dims from the rows."""
    outs = _composable(base, matched)
    if outs is None:
        return None
    inputs = list(base.inputs) + [None] * (len(call.tensors) - len(base.inputs))
    need = [_need_list(n, t, call.mesh_ndim) for n, t in zip(inputs, call.tensors)]
    out_pl = [list(o.placements) for o in outs]
    for d, (ins, res) in matched.items():
        for i, p in enumerate(ins):
            need[i][d] = placement_of(p)
        if not _set_outputs(out_pl, outs, res, d):
            return None
    specs = [(tuple(p), tuple(o.shape)) for p, o in zip(out_pl, outs)]
    outputs = specs[0] if hasattr(base.outputs, "placements") else type(base.outputs)(specs)
    kept = [None if n is None and not t.is_dtensor else tuple(m) for n, m, t in zip(inputs, need, call.tensors)]
    return Decision(inputs=kept, outputs=outputs, extra=dict(base.extra))


def _composable(base: Decision, matched: Dict[int, Row]) -> Optional[List[Any]]:
    """The base decision's outputs when rows can replace some of its mesh dims (no expand, flat outputs of
    the rows' count), else None."""
    outs = _single_outputs(base.outputs)
    if base.expand or outs is None or any(len(r[1]) != len(outs) for r in matched.values()):
        return None
    return outs


def _need_list(need: Any, t: TensorArg, mesh_ndim: int) -> List[Placement]:
    return list(need) if need is not None else [_placement(t, d) for d in range(mesh_ndim)]


def _set_outputs(out_pl: List[List[Placement]], outs: List[Any], res: Sequence[str], d: int) -> bool:
    """Mesh dim ``d`` of every output from the row (False when a shard clashes)."""
    for k, p in enumerate(res):
        q = placement_of(p)
        dim = getattr(q, "dim", None) if isinstance(q, Shard) else None
        if dim is not None and _clashes(dim, outs[k].shape, out_pl[k], d):
            return False
        out_pl[k][d] = q
    return True


def _clashes(dim: int, shape: Sequence[int], placements: Sequence[Placement], d: int) -> bool:
    """True when output dim ``dim`` is out of range or already sharded by a mesh dim other than ``d``."""
    if dim >= len(shape):
        return True
    return any(isinstance(o, Shard) and o.dim == dim for e, o in enumerate(placements) if e != d)


def _placement(t: TensorArg, d: int) -> Placement:
    return t.placements[d] if t.is_dtensor else Replicate()


def _replicated(call: OpCall, dims: Sequence[int]) -> OpCall:
    tensors = []
    for t in call.tensors:
        if t.is_dtensor:
            pl = tuple(Replicate() if d in dims else p for d, p in enumerate(t.placements))
            t = TensorArg(t.slot, t.shape, pl, t.requires_grad)
        tensors.append(t)
    return OpCall(call.op, tensors, call.args, call.kwargs, call.mesh_shape)


class _WithRows:
    """``infer`` of a rule extended by strategy rows (see the module docstring)."""

    def __init__(self, infer: Any, rows: Dict[Optional[str], List[Row]]) -> None:
        self.base_infer = infer
        self.rows = rows

    def __call__(self, call: OpCall) -> Decision:
        try:
            decision = self.base_infer(call)
        except RuleError as exc:
            found = self._with_rows(call)
            if found is None:
                raise exc
            return found
        if _keeps_inputs(call, decision):
            return decision
        found = self._with_rows(call)
        return found if found is not None else decision

    def _with_rows(self, call: OpCall) -> Optional[Decision]:
        rows = _rows_for(self.rows, call.tensors)
        ndims = [t.ndim for t in call.tensors]
        matched: Dict[int, Row] = {}
        for d in range(call.mesh_ndim):
            current = [_current(t, d) for t in call.tensors]
            if all(p == "R" for p in current):
                continue
            row = next((r for r in rows if row_applies(r, current, ndims)
                        and (r.when is None or r.when.holds(call, d, r[0]))), None)
            if row is not None:
                matched[d] = row
        if not matched:
            return None
        try:
            base = self.base_infer(_replicated(call, list(matched)))
        except RuleError:
            return None
        return _compose(call, base, matched)


def attach_strategies(rule: OpRule, spec: Any, where: str = "") -> OpRule:
    """``rule`` with the entry's ``strategies`` (a rule with ``use_strategies`` reads them itself; any
    other rule's ``infer`` is extended per mesh dim). Returns ``rule``."""
    rows = parse_strategies(rule.op, spec, where)
    hook = getattr(rule, "use_strategies", None)
    if callable(hook):
        hook(rows)
    else:
        rule.infer = _WithRows(rule.infer, rows)  # instance attribute: every caller of rule.infer sees it
    rule.strategies = rows
    return rule
