# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent dist-op resynth``: re-derive registered ops through the synthesis and propose what their rules miss.

For each registered op, :func:`hp_agent.dist_op.synth.synth_op` finds every strategy on simulated meshes
(OpInfo samples + the pipeline's own, five value generators, 2 and 3 ranks). Each synthesised strategy is
then put to the registered rule (``rule.infer`` on the dispatcher's :class:`OpCall` for that sample and
those placements, 1-D meshes of 2 and 3 ranks):

* **covered** — the rule keeps every input as given;
* **missing** — the rule redistributes or refuses: a false negative the synthesis can fix. A missing
  strategy is proposed only when it also holds with the sample's non-tensor numbers moved (``value=0`` of
  ``masked_fill`` makes ``P(sum)`` pass by coincidence; ``value=0.7`` does not);
* **rule only** — combinations (``R``, ``S(d)``, ``P(sum)``) the rule keeps that the synthesis did not
  confirm: listed for the reviewer, never removed (``verify`` checks them for false positives).

The proposal is a **plan update** (``plans/updates/<op>.yaml``, status ``proposed``) that a person
confirms with ``hp-agent dist-op apply-updates`` (recording who/when/sha256 in the file):

* a hand-written rule gets ``strategies:`` rows in its YAML entry
  (:mod:`hyper_parallel.core.ops.strategies`), merged with rows it already has;
* a generated ``StrategyTableRule`` entry gets its table regenerated: old rows kept, synthesised rows and
  signatures added.

Rows only add strategies: nothing a rule offers is removed.
"""
from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

__all__ = ["Missing", "OpDiff", "rederive", "diff_synthesis", "proposal", "write_update", "apply_update",
           "UpdateError", "edit_entry"]

RANKS = (2, 3)
MAX_RULE_ONLY = 48
SCALAR_SHIFT = 0.7
TABLE_RULES = ("StrategyTableRule",)
REPLICATE_RULES = ("ReplicateRule",)


class UpdateError(ValueError):
    """A plan update that cannot be applied; the message names the file and what is wrong."""


@dataclass
class Missing:
    """One synthesised strategy the registered rule does not offer."""

    signature: str
    strategy: str
    evidence: str
    rule_does: str

    def to_dict(self) -> Dict[str, str]:
        """JSON/YAML form."""
        return dict(self.__dict__)


@dataclass
class OpDiff:
    """The synthesis of one registered op against its rule."""

    op: str
    rule: str
    source: str
    covered: int = 0
    missing: List[Missing] = field(default_factory=list)
    coincidences: List[Missing] = field(default_factory=list)
    rule_only: List[str] = field(default_factory=list)
    synthesis: Any = None
    seconds: float = 0.0
    error: str = ""
    entry: Optional[Dict[str, Any]] = None  # the registry entry the synthesis emits (see synth.emit)

    def to_dict(self) -> Dict[str, Any]:
        """JSON form."""
        return {"op": self.op, "rule": self.rule, "source": self.source, "covered": self.covered,
                "missing": [m.to_dict() for m in self.missing],
                "coincidences": [m.to_dict() for m in self.coincidences], "rule_only": self.rule_only,
                "seconds": round(self.seconds, 1), "error": self.error}


# ---------------------------------------------------------------------- the diff
def _rule_view(rule: Any, op: str, args: list, kwargs: dict, texts: Sequence[str]) -> str:
    """``keeps`` when the rule keeps every input as given on 2 and 3 ranks, else what it does."""
    from hyper_parallel.core.ops.rule import RuleError
    from hp_agent.dist_op.probe import parse_placement
    from hp_agent.dist_op.verify import _opcall  # pylint: disable=protected-access  # the dispatcher's OpCall
    given = [parse_placement(t) for t in texts]
    for n in RANKS:
        try:
            decision = rule.infer(_opcall(op, args, kwargs, given, n))
        except RuleError as exc:
            return f"refuses ({str(exc).splitlines()[0][:120]})"
        need = [tuple(d)[0] if d is not None else g for d, g in zip(decision.inputs, given)]
        moved = [f"{g.short()}->{p.short()}" for g, p in zip(given, need) if g != p]
        if moved:
            return f"redistributes {moved}"
    return "keeps"


def _shift_scalars(args: list, kwargs: dict, layout: Sequence[str]) -> Tuple[list, dict, bool]:
    """The sample with every non-tensor float (not a layout argument) moved by ``SCALAR_SHIFT``, every bool
    flag flipped and every boolean tensor (a mask) inverted; the flag is False when the sample has none."""
    import torch
    moved = [False]

    def shift(v):
        if isinstance(v, bool):  # a mode switch (training=True): the strategy must hold in both modes
            moved[0] = True
            return not v
        if isinstance(v, float):
            moved[0] = True
            return v + SCALAR_SHIFT
        if isinstance(v, torch.Tensor) and v.dtype == torch.bool:
            moved[0] = True
            return ~v
        if type(v) in (list, tuple) and any(isinstance(t, torch.Tensor) for t in v):  # pylint: disable=unidiomatic-typecheck
            return type(v)(shift(t) for t in v)
        return v
    new_args = [shift(a) for a in args]
    new_kwargs = {k: v if k in layout else shift(v) for k, v in kwargs.items()}
    return new_args, new_kwargs, moved[0]


def _holds_shifted(fn: Callable, args: list, kwargs: dict, strategy: Any, layout: Sequence[str]) -> bool:
    """True when ``strategy`` also assembles with the sample's numbers moved (or the sample has none, or the op
    refuses the moved numbers on one device too); a moved sample whose probe fails is not proven."""
    from hp_agent.dist_op.probe import probe_call
    from hp_agent.dist_op.synth import _runs  # pylint: disable=protected-access
    new_args, new_kwargs, moved = _shift_scalars(args, kwargs, layout)
    if not moved or not _runs(fn, new_args, new_kwargs):
        # nothing moved, or the op refuses the moved values on one device too (lu_factor's pivot=False on
        # CPU): no call the strategy could get wrong; the synthesis and verify's scope treat it the same way
        return True
    try:
        probe = probe_call(fn, new_args, new_kwargs, ranks=RANKS, combos=[tuple(strategy.inputs)])
    except Exception:  # pylint: disable=broad-except  # the moved sample is invalid for the op: not proven
        return False
    found = probe.table.get(tuple(strategy.inputs))
    return bool(found) and all(o in f for o, f in zip(strategy.outputs, found))


def _degenerate(args: list, kwargs: dict) -> bool:
    """True when a tensor of the sample is empty, or every tensor has at most one element."""
    from hp_agent.dist_op.probe import collect_tensors
    from hp_agent.dist_op.verify import _nth  # pylint: disable=protected-access
    sizes = [_nth(args, kwargs, loc).numel() for loc in collect_tensors(args, kwargs)]
    return not sizes or min(sizes) == 0 or max(sizes) <= 1


def _inplace(op: str) -> bool:
    base = op.rsplit(".", 1)[-1]
    return base.endswith("_") and not base.endswith("__")


def diff_synthesis(op: str, rule: Any, synthesis: Any, fn: Callable, partials: Sequence[str] = ("sum",)) -> OpDiff:
    """Each synthesised strategy of ``synthesis`` (with input partials in ``partials``) against ``rule``."""
    from hp_agent.dist_op.synth import LAYOUT_KWARGS
    diff = OpDiff(op, type(rule).__name__, "", synthesis=synthesis)
    for key in sorted(synthesis.strategies):
        args, kwargs = synthesis.calls[key]
        if _degenerate(args, kwargs):
            continue  # empty or single-element tensors assemble under (almost) any placement: no evidence
        for s in synthesis.strategies[key]:
            if all(p == "R" for p in s.inputs) or any(p.startswith("P(") and p[2:-1] not in partials
                                                      for p in s.inputs):
                continue
            if _inplace(op) and s.outputs[0] != s.inputs[0]:
                continue  # an in-place result keeps self's placement
            if all(o == "R" for o in s.outputs):
                continue  # a partial or sharded input with a replicated result: the sample ignored that input
            does = _rule_view(rule, op, args, kwargs, s.inputs)
            if does == "keeps":
                diff.covered += 1
                continue
            item = Missing(key, _row_text(synthesis, key, s), synthesis.evidence.get(key, ""), does)
            (diff.missing if _holds_shifted(fn, args, kwargs, s, LAYOUT_KWARGS) else diff.coincidences).append(item)
        diff.rule_only.extend(_rule_only(rule, op, args, kwargs, key, synthesis.strategies[key]))
    return diff


def _row_text(synthesis: Any, key: str, strategy: Any) -> str:
    """The table row of a synthesised strategy: in a signature whose samples return different numbers of
    outputs, its one output placement repeats to the call's count (``S(1)->S(1)*``, see rules/table.py)."""
    from hp_agent.dist_op.synth import REPEAT, _varying_outputs  # pylint: disable=protected-access
    return strategy.text() + (REPEAT if key in _varying_outputs(synthesis) else "")


def _rule_only(rule: Any, op: str, args: list, kwargs: dict, key: str, strategies: Sequence[Any]) -> List[str]:
    """Combinations (R, S(d), P(sum)) the rule keeps that the synthesis did not accept."""
    import torch
    from hp_agent.dist_op.probe import collect_tensors, fmt, placements_for
    from hp_agent.dist_op.verify import _nth  # pylint: disable=protected-access
    tensors = [_nth(args, kwargs, loc) for loc in collect_tensors(args, kwargs)]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return []
    accepted = {tuple(s.inputs) for s in strategies}
    out = []
    options = [[fmt(p) for p in placements_for(t)] for t in tensors]
    for combo in itertools.islice(itertools.product(*options), MAX_RULE_ONLY):
        if combo in accepted or all(p == "R" for p in combo):
            continue
        if _rule_view(rule, op, args, kwargs, combo) == "keeps":
            out.append(f"{key}: {','.join(combo)}")
    return out


def rederive(op: str, entry: Any = None, partials: Sequence[str] = ("sum",), use_opinfo: bool = True,
             conditional: bool = False) -> OpDiff:
    """Synthesise registered ``op`` and diff the result against its rule (errors are reported in the diff);
    ``conditional``: also derive conditional strategies (:func:`conditional_missing`)."""
    from hyper_parallel.core.ops.registry import get_registry
    from hp_agent.dist_op.interface import resolve_torch, torch_interface
    from hp_agent.dist_op.synth import emit, op_layout, synth_op
    start = time.monotonic()
    entry = entry if entry is not None else get_registry().entries[op]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # an in-place op's new self is its out-of-place result: synthesise that (samples stay intact)
            source = op[:-1] if _inplace(op) else op
            result = synth_op(source, use_opinfo=use_opinfo)
            if use_opinfo:  # the pipeline's own samples alone too: their signatures may lie past the sample cap
                _merge_signatures(result.synthesis, synth_op(source, use_opinfo=False).synthesis)
            diff = diff_synthesis(op, entry.rule_instance(), result.synthesis, _fresh(resolve_torch(source)),
                                  partials)
            diff.entry = emit(result.synthesis, op_layout(torch_interface(source)))[0]
            if conditional:
                conditional_missing(diff, entry.rule_instance(), source, result.synthesis)
    except Exception as exc:  # pylint: disable=broad-except  # reported per op, never hidden
        diff = OpDiff(op, entry.rule, "", error=f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
    diff.source = entry.source.rsplit("/", 1)[-1]
    diff.seconds = time.monotonic() - start
    return diff


def conditional_missing(diff: OpDiff, rule: Any, source: str, synthesis: Any) -> None:
    """Add to ``diff.missing`` the conditional strategies (``... when CONDITION``,
    :mod:`hp_agent.dist_op.conditional`) that the rule does not keep on their evidence call."""
    from hp_agent.dist_op.conditional import derive, op_calls
    from hp_agent.dist_op.interface import resolve_torch, torch_interface
    fn = _fresh(resolve_torch(source))
    try:
        iface = torch_interface(source)
    except Exception:  # pylint: disable=broad-except  # no schema: arguments are read by position only
        iface = None
    calls = op_calls(source, fn, synthesis, iface)
    accepted = {k: {tuple(s.inputs) for s in v} for k, v in synthesis.strategies.items()}
    for row in derive(source, fn, calls, iface, accepted, mutated=synthesis.mutated):
        if _inplace(diff.op) and row.outputs[0] != row.inputs[0]:
            continue  # an in-place result keeps self's placement
        args, kwargs = calls[row.signature][0]
        sample = next(((a, k) for a, k in calls[row.signature] if _evidence_of(a, k) == row.evidence), (args, kwargs))
        does = _rule_view(rule, diff.op, sample[0], sample[1], row.inputs)
        if does == "keeps":
            diff.covered += 1
            continue
        diff.missing.append(Missing(row.signature, row.text(), row.evidence, does))


def _evidence_of(args: list, kwargs: dict) -> str:
    from hp_agent.dist_op.conditional import _evidence  # pylint: disable=protected-access
    from hp_agent.dist_op.probe import _get, collect_tensors  # pylint: disable=protected-access
    return _evidence([_get(args, kwargs, loc) for loc in collect_tensors(args, kwargs)], kwargs)


def _merge_signatures(synthesis: Any, extra: Any) -> None:
    """Add the signatures of ``extra`` that ``synthesis`` lacks (strategies, evidence, sample, shapes)."""
    for key in set(extra.strategies) - set(synthesis.strategies):
        synthesis.strategies[key] = extra.strategies[key]
        for name in ("evidence", "kwargs", "shapes", "calls", "by_count", "alternates"):
            if key in getattr(extra, name):
                getattr(synthesis, name)[key] = getattr(extra, name)[key]


def _fresh(fn: Callable) -> Callable:
    from hp_agent.dist_op.verify import _cloning  # pylint: disable=protected-access  # in-place ops keep samples
    return _cloning(fn)


# ---------------------------------------------------------------------- the proposal
def _rank_free(rows: Dict[str, List[str]], synthesis: Any) -> Tuple[List[str], Dict[str, List[str]]]:
    """Rows without ``S(d)`` that the synthesis accepted on every signature with this many tensors become
    rank-free; the rest stay keyed by input ranks."""
    free: List[str] = []
    keyed: Dict[str, List[str]] = {}
    for ranks, texts in rows.items():
        for text in texts:
            ins = text.split("->")[0].split(",")
            same = [k for k in synthesis.strategies if len(k.split(";")[0].split(",")) == len(ins)]
            everywhere = all(text in {s.text() for s in synthesis.strategies[k]} for k in same)
            if not any(p.startswith("S(") for p in ins) and everywhere:
                if text not in free:
                    free.append(text)
            else:
                keyed.setdefault(ranks, []).append(text)
    return free, keyed


def proposal(diff: OpDiff, entry: Any) -> Optional[Dict[str, Any]]:
    """The plan update for ``diff`` (None when nothing is missing)."""
    if not diff.missing:
        return None
    if entry.rule in TABLE_RULES:
        return {"kind": "table", "options": _regenerated_table(diff, entry)}
    if entry.rule in REPLICATE_RULES:  # rows cannot extend a rule that gathers everything: the table replaces it
        emitted = diff.entry or {}
        scenarios = table_scenarios(diff.op, diff.synthesis, emitted["options"]) \
            if emitted.get("rule") in TABLE_RULES else []
        if not scenarios:  # no UT scenario can show the table (tensors after other arguments, no tensor output)
            return None
        return {"kind": "table", "rule": emitted["rule"], "options": _with_conditional(emitted["options"], diff),
                "accepted": scenarios}
    by_ranks: Dict[str, List[str]] = {}
    for m in diff.missing:
        # a row per layout-argument value would be a table, and so would a row repeated to the call's output
        # count (a hand-written rule's rows name fixed outputs): regenerate instead
        if "=" not in m.signature and not m.strategy.endswith("*"):
            by_ranks.setdefault(m.signature, []).append(m.strategy)
    if not by_ranks:
        return None
    free, keyed = _rank_free(by_ranks, diff.synthesis)
    return {"kind": "strategies", "strategies": _merge_rows(entry.strategies, free, keyed)}


def _with_conditional(options: Dict[str, Any], diff: OpDiff) -> Dict[str, Any]:
    """An emitted table's options plus the conditional rows (``... when ...``) of ``diff.missing`` on the
    signatures it has."""
    table = {k: list(v) for k, v in (options.get("table") or {}).items()}
    for m in diff.missing:
        key = _table_key(m.signature, options.get("layout") or {})
        if " when " in m.strategy and key in table and m.strategy not in table[key]:
            table[key].append(m.strategy)
    return dict(options, table=table)


def _named_call(op: str, args: list, kwargs: dict) -> Optional[Tuple[list, dict]]:
    """(tensor shapes, every other argument by name) of a sample call whose tensors are passed by position,
    one after the other, after the op's leading scalars only (``polygamma(n, x)``: a UT scenario passes the
    leading scalars, then the tensors, then the rest); None otherwise."""
    import torch
    from hp_agent.dist_op.interface import torch_interface
    names = [p.name for p in torch_interface(op).params]
    lead = next((i for i, a in enumerate(args) if isinstance(a, torch.Tensor)), 0)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    stop = lead + len(tensors)
    if not _tensors_in_a_row(args, lead, stop) or _unnamed(names, len(args), lead, stop):
        return None
    named = {names[i]: _listed(a) for i, a in enumerate(args) if not lead <= i < stop}
    named.update({k: _listed(v) for k, v in kwargs.items()})
    # a tensor by keyword (or another object): no YAML scenario form; a keyword form the op reads otherwise
    # (hsplit's list of indices passed as ``sections``): no scenario either
    if not all(_plain(v) for v in named.values()) or not _same_by_name(op, (args, kwargs), tensors, named, lead):
        return None
    return [list(t.shape) for t in tensors], named


def _plain(value: Any) -> bool:
    """A value a YAML case file holds as written (numbers, strings, bools, None, lists of those)."""
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _unnamed(names: List[str], count: int, lead: int, stop: int) -> bool:
    """Some non-tensor positional argument has no parameter name (``torch.lu(*args)``: tensors alone pass)."""
    return any(i >= len(names) for i in range(count) if not lead <= i < stop)


def _tensors_in_a_row(args: list, start: int, stop: int) -> bool:
    import torch
    return all(isinstance(a, torch.Tensor) for a in args[start:stop])


def _listed(value: Any) -> Any:
    """A tuple as a list, a dtype as its name (``torch.float32``: ``rule_call`` reads it back)."""
    import torch
    if isinstance(value, torch.dtype):
        return str(value)
    return list(value) if isinstance(value, tuple) else value


def _same_by_name(op: str, call: Tuple[list, dict], tensors: list, named: dict, lead: int = 0) -> bool:
    """True when the op gives the sample's outputs (count and shapes) with its arguments passed by name: a
    list passed to ``hsplit``'s ``sections`` (an int; the list form is the ``indices`` overload) is not. An op
    with leading scalars (``polygamma(n, x)``, ``lead`` > 0) keeps them first: not checked."""
    from hp_agent.dist_op.interface import resolve_torch
    from hp_agent.dist_op.synth import _flat  # pylint: disable=protected-access
    from hyper_parallel.testing.op_cases import _dtype  # pylint: disable=protected-access
    if lead:
        return True
    args, kwargs = call
    fn = _fresh(resolve_torch(op))  # an in-place op works on copies: the sample stays intact
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = [tuple(getattr(o, "shape", ())) for o in _flat(fn(*args, **kwargs))]
            by_name = {k: _dtype(v) for k, v in named.items()}  # "torch.float32" as the dtype again
            got = [tuple(getattr(o, "shape", ())) for o in _flat(fn(*tensors, **by_name))]
    except Exception:  # pylint: disable=broad-except  # the op refuses the keyword form
        return False
    return want == got


def table_scenarios(op: str, synthesis: Any, options: Dict[str, Any], limit: int = 4) -> List[Dict[str, Any]]:
    """UT scenarios of a synthesised table: per signature (up to ``limit``), each row on the signature's
    evidence sample (input = need = the row's inputs, its first output and global shape; an op returning
    several tensors lists the others under ``more_outputs``). A row the evidence sample cannot show (another
    output count, a sample the op refuses with its arguments by name) is shown on the signature's next
    sample call that can (:attr:`Synthesis.alternates`)."""
    layout = {k: tuple(v) for k, v in (options.get("layout") or {}).items()}
    table = options.get("table") or {}
    out: List[Dict[str, Any]] = []
    for key in sorted(synthesis.calls):
        rows = table.get(_table_key(key, layout)) or []
        for args, kwargs in [synthesis.calls[key]] + list(getattr(synthesis, "alternates", {}).get(key, [])):
            if not rows or len(out) >= limit * 8:
                break
            shown = _call_scenarios(op, key, (args, kwargs), rows, getattr(synthesis, "inserted", ()))
            out.extend(shown.values())
            rows = [r for r in rows if r not in shown]
    return out


def _call_scenarios(op: str, key: str, call: Tuple[list, dict], rows: List[str],
                    inserted: Sequence[str] = ()) -> Dict[str, Dict[str, Any]]:
    """Row -> its UT scenario on one sample call of signature ``key`` (rows it cannot show left out;
    ``inserted``: dim arguments over ``ndim + 1`` positions, as the synthesis keyed them)."""
    import torch
    from hp_agent.dist_op.interface import resolve_torch
    from hp_agent.dist_op.synth import signature
    args, kwargs = call
    named = _named_call(op, args, kwargs)
    if named is None or signature(args, kwargs, inserted=inserted) != key:
        return {}
    with torch.no_grad():
        ref = resolve_torch(op)(*args, **kwargs)
    shapes = _tensor_shapes(ref)
    found = {row: _row_scenario(named, row, shapes) for row in rows} if shapes else {}
    return {row: scenario for row, scenario in found.items() if scenario is not None}


def _tensor_shapes(ref: Any) -> List[List[int]]:
    """The shapes of an op's tensor outputs (one tensor, or a tuple/list of tensors); [] otherwise."""
    import torch
    refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    if not refs or not all(isinstance(r, torch.Tensor) for r in refs):
        return []
    return [list(r.shape) for r in refs]


def _row_scenario(named: Tuple[list, dict], row: str, shapes: List[List[int]]) -> Optional[Dict[str, Any]]:
    """The UT scenario of one table row on a sample with outputs of ``shapes`` (None when the row names
    another number of outputs)."""
    from hyper_parallel.core.ops.rules.table import repeated_outputs
    ins, outs = row.split("->")
    placed = repeated_outputs(outs.split(","), len(shapes))  # a repeated last output filled in
    if placed is None:
        return None
    scenario = {"shapes": named[0], "kwargs": named[1], "input": ins.split(","), "need": ins.split(","),
                "output": [placed[0]], "out_shape": shapes[0]}
    if len(shapes) > 1:
        scenario["more_outputs"] = [{"output": [o], "out_shape": x} for o, x in zip(placed[1:], shapes[1:])]
    return scenario


def _regenerated_table(diff: OpDiff, entry: Any) -> Dict[str, Any]:
    """The entry's table options with the missing rows (and new signatures) added; nothing removed."""
    table = {k: list(v) for k, v in (entry.options.get("table") or {}).items()}
    shapes = dict(entry.options.get("shapes") or {})
    new_shapes = _synth_shapes(diff.synthesis, "meta" in shapes.values())
    layout = _marked_layout(entry.options.get("layout") or {}, diff.synthesis)
    for m in diff.missing:
        key = _table_key(m.signature, layout)
        if key not in shapes and m.signature in new_shapes:
            shapes[key] = new_shapes[m.signature]
            # a new signature also needs the replicated row (the table gathers what it cannot keep)
            table.setdefault(key, []).extend(_replicated_rows(diff.synthesis, m.signature))
        if key in shapes and m.strategy not in table.setdefault(key, []):
            table[key].append(m.strategy)
    return dict(entry.options, table={k: sorted(v) for k, v in table.items() if k in shapes}, shapes=shapes,
                layout=layout)


def _marked_layout(layout: Dict[str, Any], synthesis: Any) -> Dict[str, Any]:
    """The entry's layout with the synthesis' inserted dims marked (``unsqueeze_copy``'s ``dim``: keyed modulo
    ``ndim + 1`` from now on). An old row stays valid: its key ``k`` was shared by ``k`` and ``k - ndim``, and
    held for both."""
    from hp_agent.dist_op.synth import INSERTED
    out = {k: list(v) for k, v in layout.items()}
    for name in getattr(synthesis, "inserted", ()):
        if name in out and INSERTED not in out[name]:
            out[name] = out[name][:2] + [INSERTED]
    return out


def _replicated_rows(synthesis: Any, key: str) -> List[str]:
    return [_row_text(synthesis, key, s) for s in synthesis.strategies[key] if all(p == "R" for p in s.inputs)]


def _synth_shapes(synthesis: Any, meta: bool) -> Dict[str, Any]:
    """Shape items of every synthesised signature (``meta``: all computed by the backend, as the entry's)."""
    from hp_agent.dist_op.synth import _shape_items  # pylint: disable=protected-access
    return _shape_items(synthesis, meta)


def _table_key(signature: str, layout: Dict[str, Any]) -> str:
    """The synthesis signature with every layout argument of the table (defaults filled in)."""
    from hp_agent.dist_op.synth import _with_defaults  # pylint: disable=protected-access
    return _with_defaults(signature, {k: tuple(v) for k, v in layout.items()})


def _merge_rows(old: Any, free: List[str], keyed: Dict[str, List[str]]) -> Any:
    """The entry's existing ``strategies`` plus the new rows: a list when every row is rank-free, else a
    mapping of input ranks (``"*"``: any) to rows."""
    merged: Dict[str, List[str]] = {"*": list(old)} if isinstance(old, list) else \
        {k: list(v) for k, v in (old or {}).items()}
    anywhere = merged.setdefault("*", [])
    anywhere += [r for r in free if r not in anywhere]
    for ranks, texts in keyed.items():
        merged.setdefault(ranks, []).extend(texts)
    keyed_rows = {k: _unique([t for t in v if t not in anywhere]) for k, v in merged.items() if k != "*"}
    keyed_rows = {k: v for k, v in sorted(keyed_rows.items()) if v}
    return {"*": anywhere, **keyed_rows} if keyed_rows else anywhere


def _unique(items: List[str]) -> List[str]:
    return list(dict.fromkeys(items))


def _content_hash(data: Dict[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k not in ("status", "confirmation")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def write_update(folder: Path, diff: OpDiff, entry: Any) -> Optional[Path]:
    """Write ``plans/updates/<op>.yaml`` for ``diff`` (None when nothing is proposed)."""
    from hp_agent.dist_op.plan import dump_yaml, slug_of
    change = proposal(diff, entry)
    if change is None:
        return None
    data = {"op": diff.op, "status": "proposed", "registry": _repo_rel(entry.source), "rule": entry.rule,
            "change": change, "missing": [m.to_dict() for m in diff.missing],
            "coincidences": [m.to_dict() for m in diff.coincidences],
            "rule_only_not_removed": diff.rule_only[:20], "covered": diff.covered}
    folder.mkdir(parents=True, exist_ok=True)
    path = _free_update_path(folder, slug_of(diff.op))
    path.write_text("# Plan update written by `hp-agent dist-op resynth`: review `change`, then run\n"
                    "# `hp-agent dist-op apply-updates` on this file (it records who/when/sha256).\n"
                    + dump_yaml(data), encoding="utf-8")
    return path


def _free_update_path(folder: Path, slug: str) -> Path:
    """``<slug>.yaml``, or ``<slug>.2.yaml``, ``<slug>.3.yaml``... when an earlier update was applied there
    (its confirmation record is kept; a proposed one not applied yet is replaced)."""
    path, n = folder / f"{slug}.yaml", 1
    while path.is_file() and "status: applied" in path.read_text(encoding="utf-8"):
        n += 1
        path = folder / f"{slug}.{n}.yaml"
    return path


def _repo_rel(source: str) -> str:
    parts = Path(source).parts
    return str(Path(*parts[parts.index("hyper_parallel"):])) if "hyper_parallel" in parts else source


# ---------------------------------------------------------------------- applying
def edit_entry(text: str, op: str, field_name: str, value: Any) -> str:
    """``text`` (a registry YAML file) with ``op``'s ``field_name`` set to ``value``; one-line flow entries
    stay on one line, block entries get one ``  field: {flow}`` line."""
    flow = yaml.safe_dump(value, default_flow_style=True, width=100000, sort_keys=False).strip()
    flow = flow[:-len("\n...")] if flow.endswith("\n...") else flow  # a plain scalar's document end marker
    lines = text.splitlines()
    head = re.compile(rf"^{re.escape(op)}:(\s|$)")
    index = next((i for i, line in enumerate(lines) if head.match(line)), None)
    if index is None:
        raise UpdateError(f"{op}: no entry in the registry file")
    rest = lines[index][len(op) + 1:].strip()
    if rest:
        body = yaml.safe_load(rest) or {}
        body[field_name] = value
        lines[index] = f"{op}: " + yaml.safe_dump(body, default_flow_style=True, width=100000,
                                                   sort_keys=False).strip()
        return "\n".join(lines) + "\n"
    end = index + 1
    while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
        end += 1
    block = lines[index + 1:end]
    pos = next((k for k, line in enumerate(block) if line.strip().startswith(f"{field_name}:")), None)
    new = f"  {field_name}: {flow}"
    if pos is None:
        doc = next((k for k, line in enumerate(block) if line.strip().startswith("doc:")), len(block))
        block.insert(doc, new)
    else:
        block[pos] = new
    return "\n".join(lines[:index + 1] + block + lines[end:]) + "\n"


def apply_update(path: Path, root: Path, who: str, now: Optional[datetime.datetime] = None,
                 plans_dir: str = "plans") -> Dict[str, Any]:
    """Confirm and apply one plan update: edit the registry entry, record who/when/sha256 in the file. A
    regenerated table also goes into the op's plan (``<plans_dir>/<op>.md``, confirmed again by ``who``), so
    that ``dev`` writes the same entry."""
    from hp_agent.dist_op.plan import dump_yaml
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UpdateError(f"{path}: cannot read the plan update: {exc}") from exc
    if not isinstance(data, dict) or not {"op", "registry", "change"} <= set(data):
        raise UpdateError(f"{path}: expected a plan update with op, registry and change")
    if data.get("status") == "applied":
        raise UpdateError(f"{path}: already applied ({data.get('confirmation')})")
    change = data["change"]
    registry = root / data["registry"]
    if change.get("kind") == "strategies":
        field_name, value = "strategies", change["strategies"]
    elif change.get("kind") == "table":
        field_name, value = "options", change["options"]
    else:
        raise UpdateError(f"{path}: change.kind must be 'strategies' or 'table', got {change.get('kind')!r}")
    new_rule = change.get("rule")
    if new_rule is not None and (field_name != "options" or new_rule not in TABLE_RULES):
        raise UpdateError(f"{path}: change.rule={new_rule!r}: only a table ({TABLE_RULES}) may replace a rule")
    _validate(data["op"], new_rule or data.get("rule", ""), field_name, value, path)
    text = registry.read_text(encoding="utf-8")
    if new_rule is not None:
        text = edit_entry(text, data["op"], "rule", new_rule)
    registry.write_text(edit_entry(text, data["op"], field_name, value), encoding="utf-8")
    if field_name == "options":
        _regenerate_plan(root / plans_dir, data["op"], value, who, new_rule, change.get("accepted"))
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    data["confirmation"] = {"by": who, "at": stamp, "sha256": _content_hash(data)}
    data["status"] = "applied"
    path.write_text("# Plan update written by `hp-agent dist-op resynth`, applied by `apply-updates`.\n"
                    + dump_yaml(data), encoding="utf-8")
    return {"op": data["op"], "registry": data["registry"], "field": field_name, **data["confirmation"]}


def _regenerate_plan(folder: Path, op: str, options: Dict[str, Any], who: str, rule: Optional[str] = None,
                     accepted: Optional[List[Dict[str, Any]]] = None) -> None:
    """The op's plan with the new options (and rule class and UT scenarios when a table replaces the rule),
    confirmed again by ``who``; ``dev`` then writes the same entry and the cases."""
    from hp_agent.dist_op.plan import confirm_plan, load_plan, slug_of
    target = folder / f"{slug_of(op)}.md"
    if not target.is_file():
        return
    plan = load_plan(target)
    plan.meta["options"] = options
    if rule is not None:  # the table replaces the plan's rule class (ReplicateRule -> StrategyTableRule)
        plan.meta["base_class"] = rule
        if isinstance(plan.meta.get("rule"), dict):
            plan.meta["rule"]["class"] = rule
    if accepted:
        plan.meta["accepted"], plan.meta["rejected"] = accepted, []
        plan.meta["ut_cases"] = [f"accepted[{i}]" for i in range(len(accepted))]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    plan.body = plan.body.rstrip("\n") + (f"\n\n## Re-derivation ({stamp})\nThe strategy table in `options` was "
                                         "regenerated by `hp-agent dist-op resynth` (old rows kept, synthesised "
                                         f"rows added): see `updates/{slug_of(op)}.yaml`; it supersedes the "
                                         "table quoted above.\n")
    confirm_plan(plan, who)
    plan.save()


def _validate(op: str, rule: str, field_name: str, value: Any, path: Path) -> None:
    """Refuse an update whose rows or table the registry would reject (before any file changes)."""
    from hyper_parallel.core.ops.rule import RuleError
    from hyper_parallel.core.ops.strategies import parse_strategies
    from hyper_parallel.core.ops.rules.table import StrategyTableRule
    try:
        if field_name == "strategies":
            parse_strategies(op, value, str(path))
        elif rule in TABLE_RULES:
            StrategyTableRule(op, **value)
    except RuleError as exc:
        raise UpdateError(f"{path}: {exc}") from exc
