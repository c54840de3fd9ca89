# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Op cases as data: what ``hp-agent dist-op dev`` writes per op, and the checks one shared test per tier runs.

A confirmed plan's cases are written as one YAML file per op and tier (``<tests dir>/cases/<op>.yaml``);
the tier's single test module parametrizes over the files of its folder:

* UT (:func:`check_rule_cases`): the registered rule's decision for every accepted scenario (required
  input placements, output placements, output shape, expand or not), with the layout argument passed by
  keyword and by position; every rejected call must raise a ``RuleError`` naming the problem;
* ST (:func:`check_parity_cases`, on 2 gloo ranks): ``check_op`` runs the op on DTensors for every
  placement combination forward (and backward unless the case says ``grad: false``) against one process;
  no combination may fail or be refused, and at least ``native_min`` must run without communication.

UT file keys: ``op``, ``plan``, ``names``, ``positions``/``defaults`` (the non-tensor arguments' positional
indices and defaults), ``accepted`` and ``rejected`` (an accepted scenario whose ``output`` is
``["dynamic"]`` expects every input gathered and the output specs taken from the local result: the
``expand_replicated`` decision of ``ReplicateRule``; ``more_outputs``, a list of ``{output, out_shape}``,
describes the outputs after the first of an op with several). ST file keys: ``op``, ``plan``, ``names``, ``cases``
(``shape`` or ``shapes``, ``kwargs``, ``native_min``, optional ``grad``, ``low``/``high`` value range,
``dtype`` (``torch.int64``, ``torch.bool``, ...: one for every tensor or a list with one per tensor; default
``torch.float32``),
``list: true`` for an op taking its tensors as one list; or
``opinfo`` + ``sample``: PyTorch's OpInfo sample number ``sample`` of that OpInfo name, on CPU, of
the case's ``dtype`` (default float32), generated with seed 0 — for ops whose valid inputs random tensors
do not give; optional ``max_combos`` and ``partial`` bound the placement combinations).

Importing this module is cheap (standard library and PyYAML); torch is imported by the ST check only.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence

__all__ = ["OpCases", "CaseFileError", "load_op_cases", "check_rule_cases", "check_parity_cases", "rule_call",
           "parse_placement", "opinfo_case", "usable_samples"]

_UT_KEYS = frozenset({"op", "plan", "names", "positions", "defaults", "accepted", "rejected"})
_ST_KEYS = frozenset({"op", "plan", "names", "cases"})
#: keys a case file may carry besides its tier's: the confirmation sha256 prefix of the plan it came from
_OPTIONAL_KEYS = frozenset({"plan_sha256"})


class CaseFileError(ValueError):
    """A case file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class OpCases:
    """The cases of one op for one tier (``data``: the file's mapping) and where they came from."""

    op: str
    path: Path
    data: Dict[str, Any]

    @property
    def names(self) -> List[str]:
        """Frontend names registered for the op (each is checked)."""
        return list(self.data["names"])

    @property
    def where(self) -> str:
        """The file and the plan it was written from (for failure messages)."""
        return f"{self.path.name} (from {self.data.get('plan', '?')})"


def load_op_cases(folder: Any, tier: str) -> List[OpCases]:
    """Every ``*.yaml`` case file of ``folder`` for ``tier`` (``"ut"`` or ``"st"``), sorted by op name.

    Raises :class:`CaseFileError` naming the file when one is unreadable or misses a key of its tier."""
    import yaml
    if tier not in ("ut", "st"):
        raise CaseFileError(f"tier must be 'ut' or 'st', got {tier!r}")
    keys = _UT_KEYS if tier == "ut" else _ST_KEYS
    out = []
    for path in sorted(Path(folder).glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise CaseFileError(f"{path}: invalid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise CaseFileError(f"{path}: expected a mapping with keys {sorted(keys)}")
        missing = sorted(keys - set(data))
        unknown = sorted(set(data) - keys - _OPTIONAL_KEYS)
        if missing or unknown:
            raise CaseFileError(f"{path}: {tier} case file: missing keys {missing}, unknown keys {unknown}")
        out.append(OpCases(str(data["op"]), path, data))
    return sorted(out, key=lambda c: c.op)


def parse_placement(text: str) -> Any:
    """``R`` / ``S(d)`` / ``P(op)`` -> the placement object."""
    from hyper_parallel.core.placement import Partial, Replicate, Shard
    if text == "R":
        return Replicate()
    match = re.fullmatch(r"S\((\d+)\)", text)
    if match:
        return Shard(int(match.group(1)))
    match = re.fullmatch(r"P\((\w+)\)", text)
    if match:
        return Partial(match.group(1))
    raise CaseFileError(f"placement {text!r}: expected R, S(d) or P(op)")


def rule_call(name: str, case: Dict[str, Any], placements: Sequence[str], positional: bool,
              positions: Dict[str, int], defaults: Dict[str, Any]) -> Any:
    """The ``OpCall`` of one scenario: one tensor per shape on a 1-D mesh of 2, each with its placement;
    the op's leading scalars (``polygamma(n, x)``: positions before the first tensor) come first; with
    ``positional`` the case's keyword arguments (and the defaults before them) are passed by position."""
    from hyper_parallel.core.ops.rule import OpCall, TensorArg
    shapes = case.get("shapes") or [case["shape"]]
    kwargs = {k: _dtype(v) for k, v in case["kwargs"].items()}
    by_pos = {index: key for key, index in positions.items()}
    args = _leading(by_pos, kwargs) + [("__tensor__", i) for i in range(len(shapes))]
    if positional and any(k in positions for k in kwargs):  # keyword-only arguments stay keywords
        last = max(positions[k] for k in kwargs if k in positions)
        for i in range(len(args), last + 1):
            key = by_pos[i]
            args.append(kwargs.pop(key) if key in kwargs else defaults[key])
    tensors = [TensorArg(i, tuple(shape), (parse_placement(p),))
               for i, (shape, p) in enumerate(zip(shapes, placements))]
    return OpCall(name, tensors, tuple(args), kwargs, (2,))


def _dtype(value: Any) -> Any:
    """A scenario's ``"torch.float32"`` as the dtype (``_softmax_backward_data``'s ``input_dtype``)."""
    if isinstance(value, str) and re.fullmatch(r"torch\.\w+", value):
        import torch
        found = getattr(torch, value.split(".", 1)[1], None)
        if isinstance(found, torch.dtype):
            return found
    return value


def _leading(by_pos: Dict[int, str], kwargs: Dict[str, Any]) -> List[Any]:
    """The values of the scalars at positions 0, 1, ... before the first tensor, taken out of ``kwargs``
    (none when the scenario does not name them all)."""
    lead = [by_pos[i] for i in range(len(by_pos)) if all(j in by_pos for j in range(i + 1))]
    return [kwargs.pop(k) for k in lead] if all(k in kwargs for k in lead) else []


def _check_accepted(rule: Any, name: str, case: Dict[str, Any], cases: OpCases, positional: bool) -> None:
    data = cases.data
    how = "positional" if positional else "keyword"
    shapes = case.get("shapes") or case["shape"]
    where = f"{name} {shapes} {case['kwargs']} input {case['input']} ({how}; {cases.where})"
    decision = rule.infer(rule_call(name, case, case["input"], positional, data["positions"], data["defaults"]))
    got = [d[0].short() for d in decision.inputs]
    assert got == case["need"], f"{where}: requires {got}, the plan says {case['need']}"
    if case["output"] == ["dynamic"]:
        assert decision.outputs is None and decision.expand == "expand_replicated", \
            f"{where}: outputs {decision.outputs!r} expand {decision.expand!r}, the plan says replicated at run time"
        return
    outputs = decision.outputs if isinstance(decision.outputs, list) else [decision.outputs]
    expected = [case] + list(case.get("more_outputs") or [])
    assert len(expected) in (1, len(outputs)), \
        f"{where}: {len(outputs)} outputs, the plan describes {len(expected)}"
    for k, ((placements, shape), want) in enumerate(zip(outputs, expected)):
        assert [p.short() for p in placements] == want["output"], \
            f"{where}: output {k} {[p.short() for p in placements]}, the plan says {want['output']}"
        assert list(shape) == want["out_shape"], \
            f"{where}: output {k} shape {list(shape)}, the plan says {want['out_shape']}"
    assert bool(decision.expand) == bool(case.get("expand")), \
        f"{where}: expand {decision.expand!r}, the plan says {'one' if case.get('expand') else 'none'}"


def check_rule_cases(cases: OpCases) -> int:
    """UT of one op: every accepted scenario (by keyword and by position) and every rejected call against the
    registered rule of each of its names. Returns the number of checks; raises AssertionError on the first
    mismatch, naming the name, shapes, arguments, input placements and the case file."""
    from hyper_parallel.core.ops.registry import get_registry
    from hyper_parallel.core.ops.rule import RuleError
    data, done = cases.data, 0
    entries = get_registry().entries
    for name in cases.names:
        assert name in entries, f"{name}: not registered ({cases.where})"
        rule = entries[name].rule_instance()
        for case in data["accepted"]:
            for positional in (False, True):
                _check_accepted(rule, name, case, cases, positional)
                done += 1
        for case in data["rejected"]:
            call = rule_call(name, case, ["R"] * len(case.get("shapes") or [case["shape"]]), False,
                             data["positions"], data["defaults"])
            try:
                rule.infer(call)
            except RuleError as exc:
                assert case["error"] in str(exc), \
                    f"{name} {case['kwargs']}: refused with {exc!s}, the plan expects {case['error']!r}"
            else:
                raise AssertionError(f"{name} {case['shape']} {case['kwargs']}: accepted, the plan expects a refusal "
                                     f"({case['error']!r}; {cases.where})")
            done += 1
    return done


def _function(name: str) -> Any:
    """The torch callable of ``name``; a Tensor property (``Tensor.H``) by its getter, as the dispatcher
    sees it."""
    import types
    import torch
    obj = torch.Tensor if name.startswith("Tensor.") else torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    if isinstance(obj, (types.GetSetDescriptorType, property)):
        return obj.__get__
    return obj


def _inputs(case: Dict[str, Any]) -> List[Any]:
    """Full tensors of a case, of the case's ``dtype`` (one name for every tensor, or a list with one per
    tensor; default ``torch.float32``): floats uniform in [low, high) (default [0.5, 1.5): away from zero and
    branch points), integers in [low, high) (default [1, 20): non-zero, ``gcd``), bools half true."""
    shapes = case.get("shapes") or [case["shape"]]
    dtypes = case.get("dtype", "torch.float32")
    dtypes = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes] * len(shapes)
    if len(dtypes) != len(shapes):
        raise CaseFileError(f"case {case!r}: dtype lists {len(dtypes)} dtypes for {len(shapes)} tensors")
    return [_tensor(shape, _case_dtype(d), case) for shape, d in zip(shapes, dtypes)]


def _case_dtype(name: Any) -> Any:
    """``"torch.int64"`` as ``torch.int64``; CaseFileError for anything that is not a torch dtype."""
    import torch
    found = _dtype(name)
    if not isinstance(found, torch.dtype):
        raise CaseFileError(f"dtype {name!r}: expected a torch dtype name such as 'torch.int64'")
    return found


def _tensor(shape: Sequence[int], dtype: Any, case: Dict[str, Any]) -> Any:
    import torch
    if dtype is torch.bool:
        return torch.rand(tuple(shape)) < 0.5
    if dtype.is_floating_point or dtype.is_complex:
        low, high = float(case.get("low", 0.5)), float(case.get("high", 1.5))
        return (torch.rand(tuple(shape)) * (high - low) + low).to(dtype)
    return torch.randint(int(case.get("low", 1)), int(case.get("high", 20)), tuple(shape), dtype=dtype)


@functools.lru_cache(maxsize=8)
def _opinfo_dense(name: str, dtype: str = "torch.float32") -> Any:
    """(OpInfo ``name``, its first dense CPU samples of ``dtype``, seed 0): generated once per process, since
    an op's ST cases draw several samples of one list."""
    import itertools
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    info = next((o for o in op_db if (o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")) == name),
                None)
    if info is None:
        raise CaseFileError(f"opinfo {name!r}: not an OpInfo name of this torch")
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        dense = [s for s in itertools.islice(info.sample_inputs("cpu", _case_dtype(dtype), requires_grad=False), 24)
                 if all(not isinstance(t, torch.Tensor) or t.layout == torch.strided for t in [s.input, *s.args])]
    finally:
        torch.random.set_rng_state(state)
    return info, dense


def _opinfo_sample(name: str, index: int, dtype: str = "torch.float32") -> Any:
    """OpInfo ``name``'s dense CPU sample number ``index`` of ``dtype`` (seed 0)."""
    info, dense = _opinfo_dense(name, dtype)
    if index >= len(dense):
        raise CaseFileError(f"opinfo {name!r}: sample {index} does not exist ({len(dense)} dense samples)")
    return info, dense[index]


def usable_samples(name: str, count: int, dtype: str = "torch.float32") -> List[int]:
    """Indices (as ``sample`` of an ST case) of OpInfo ``name``'s first ``count`` dense samples of ``dtype``
    that have a tensor argument and no empty tensor (an empty tensor checks nothing)."""
    import torch
    out = []
    for k in range(24):
        try:
            _, sample = _opinfo_sample(name, k, dtype)
        except CaseFileError:
            break
        flat = [t for a in [sample.input, *sample.args] for t in (a if _is_seq(a) else [a])]
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        if tensors and all(t.numel() > 0 for t in tensors):
            out.append(k)
        if len(out) >= count:
            break
    return out


def _is_seq(x: Any) -> bool:
    return type(x) in (list, tuple)  # pylint: disable=unidiomatic-typecheck  # not named tuples


def _tensor_slots(args: List[Any]) -> List[Any]:
    """(position, index in a list or None) of each tensor argument."""
    import torch
    slots = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            slots.append((i, None))
        elif _is_seq(a):
            slots += [(i, j) for j, t in enumerate(a) if isinstance(t, torch.Tensor)]
    return slots


def opinfo_case(name: str, index: int, dtype: str = "torch.float32") -> Any:
    """``(tensors, call)``: the tensors of OpInfo ``name``'s sample ``index`` (``dtype``, CPU, seed 0) and
    ``call(*tensors)`` running the op with them in their places (lists of tensors included)."""
    info, sample = _opinfo_sample(name, index, dtype)
    args, kwargs = [sample.input, *sample.args], dict(sample.kwargs)
    slots = _tensor_slots(args)
    tensors = [args[i] if j is None else args[i][j] for i, j in slots]

    def call(*ts):
        a = [list(x) if _is_seq(x) else x for x in args]
        for (i, j), t in zip(slots, ts):
            if j is None:
                a[i] = t
            else:
                a[i][j] = t
        return info.op(*[type(x)(y) if _is_seq(x) else y for x, y in zip(args, a)], **kwargs)
    return [t.detach().clone() for t in tensors], call


def check_parity_cases(cases: OpCases) -> int:
    """ST of one op (call it on every rank of a 2-rank gloo pool): ``check_op`` per name and case. Returns
    the number of placement combinations checked; raises AssertionError naming the case on the first failure."""
    import torch
    from hyper_parallel.testing.op_parity import check_op
    combos = 0
    for name in cases.names:
        fn = _function(name)
        for k, case in enumerate(cases.data["cases"]):
            torch.manual_seed(k)
            if "opinfo" in case:
                tensors, call = opinfo_case(case["opinfo"], int(case["sample"]), case.get("dtype", "torch.float32"))
            else:
                tensors = _inputs(case)
                call = (lambda *ts, kw=case["kwargs"], f=fn: f(list(ts), **kw)) if case.get("list") else \
                    (lambda *ts, kw=case["kwargs"], f=fn: f(*ts, **kw))
            report = check_op(name, call, tensors, grad=bool(case.get("grad", True)),
                              partial=bool(case.get("partial", True)), max_combos=case.get("max_combos"), cover=True)
            report.raise_if_failed()
            where = f"{name} shapes {[list(t.shape) for t in tensors]} {case.get('kwargs', case.get('opinfo'))} " \
                f"({cases.where})"
            assert not report.rejected, f"{where}: refused {report.rejected[:3]}"
            assert report.native >= case["native_min"], \
                f"{where}: {report.native} native combos, the plan expects at least {case['native_min']}"
            combos += report.combos
    return combos
