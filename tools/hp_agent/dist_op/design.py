# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Step 4 and 5 of the analysis: choose the implementation path and write the plan.

Paths (the cheapest that fits wins):

* **A** — reuse an existing rule class through a YAML entry with options (``ElementwiseRule`` with its
  ``partial`` mode, ``SoftmaxRule`` for a dim at position 1, ``ScanRule`` for an additive scan);
* **B** — the nearest base parameterised by the plan: ``CoupledDimRule`` (the softmax layout) when the
  coupled dim sits at another position, ``CombineScanRule`` for a scan with another combine
  (multiplicative, log-add-exp, ...);
* **C** — a layout no existing rule computes (e.g. the output shape changes along the dim):
  ``DimLocalRule`` with the plan's shape rule.

B and C write no Python: the registry entry names the class of ``hyper_parallel/core/ops/rules/planned.py``
and passes the plan's parameters as options.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from hp_agent.dist_op.analysis import Case, Derivation
from hp_agent.dist_op.interface import Interface, base_name
from hp_agent.dist_op.plan import TBD, Plan

__all__ = ["design", "build_plan", "expected", "RULES_PACKAGE", "REGISTRY_FILE", "class_name"]

RULES_PACKAGE = "hyper_parallel.core.ops.rules"
REGISTRY_FILE = "hyper_parallel/core/ops/yaml/generated.yaml"
_LINEAR_SCANS = ("add",)


def class_name(op: str, suffix: str = "Rule") -> str:
    """``torch.nn.functional.glu`` -> ``GluRule``."""
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", base_name(op)) if part) + suffix


def design(deriv: Derivation, iface: Interface) -> Dict[str, Any]:
    """Path, base class, template, options and the reason, from the derivation."""
    if deriv.kind == "elementwise" and deriv.n_tensors == 2:
        opts = {"partial": deriv.partial} if deriv.partial not in (None, "none") else {}
        return _path("A", "ElementwiseRule", f"{RULES_PACKAGE}.elementwise", opts, None,
                     f"aligned shards of both operands keep their dim and the shape is kept; the Partial(sum) "
                     f"combinations that assemble give the partial mode {deriv.partial or 'none'!r}")
    if deriv.kind == "elementwise":
        opts = {"partial": "preserve"} if deriv.linear else {}
        why = ("every dim shards to the same output dim and the shape is kept"
               + ("; Partial(sum) inputs give Partial(sum) outputs (linear): partial mode 'preserve'"
                  if deriv.linear else "; Partial inputs do not sum to the result: partial mode 'none'"))
        return _path("A", "ElementwiseRule", f"{RULES_PACKAGE}.elementwise", opts, None, why)
    if deriv.kind != "except_dim":
        return {"path": f"{TBD} which path (A/B/C) and base class? the probe matched no known rule shape",
                "base_class": f"{TBD} base class", "template": None, "options": {}, "reason": TBD}
    return _design_coupled(deriv, iface.position(deriv.dim_param))


def _design_coupled(deriv: Derivation, pos: int) -> Dict[str, Any]:
    """Path for an op coupled along one dim (argument ``pos``)."""
    dim = deriv.dim_param
    if deriv.expand == "pnorm" and deriv.shape_rule == "same":
        return _path("B", "SoftmaxRule", None, {}, "coupled_dim",
                     f"the softmax layout for the other dims (`{dim}` at position {pos}), and a shard of `{dim}` "
                     "kept with the `pnorm` expand (p-norm sum all-reduced, probed in simulation): subclass "
                     "SoftmaxRule")
    if deriv.shape_rule in ("minus_n", "halved"):
        what = "loses `n` entries along it" if deriv.shape_rule == "minus_n" else "halves along it"
        return _path("C", "OpRule", None, {}, "dim_local",
                     f"only `{dim}` couples elements, but the output {what}: no existing rule computes that "
                     "shape, so a new class (dim-local layout)")
    if deriv.scan is not None:
        if deriv.scan in _LINEAR_SCANS and pos == 1 and deriv.linear:
            return _path("A", "ScanRule", f"{RULES_PACKAGE}.reductions", {}, None,
                         "an additive inclusive scan along `dim`: ScanRule as is")
        return _path("B", "ScanRule", None, {}, "scan",
                     f"an inclusive scan along `{dim}` whose shards combine with `{deriv.scan}` (not addition): "
                     "subclass ScanRule, carry = combine of the earlier shards' totals")
    if deriv.shape_rule == "same":
        if pos == 1:
            opts = {"legacy_dim": True} if deriv.legacy_dim else {}
            return _path("A", "SoftmaxRule", f"{RULES_PACKAGE}.normalization", opts, None,
                         f"every dim but `{dim}` (position 1) shards, shape kept: the softmax layout")
        return _path("B", "SoftmaxRule", None, {}, "coupled_dim",
                     f"the softmax layout, but `{dim}` sits at position {pos}: subclass SoftmaxRule to read it "
                     "from there")
    return {"path": f"{TBD} output shape relation {deriv.shape_rule!r}: which path?", "base_class": TBD,
            "template": None, "options": {}, "reason": TBD}


def _path(path: str, base: str, module: Optional[str], options: Dict[str, Any], template: Optional[str],
          reason: str) -> Dict[str, Any]:
    return {"path": path, "base_class": base, "module": module, "options": options, "template": template,
            "reason": reason}


# ---------------------------------------------------------------------- expected layouts (the plan's contract)
def expected(deriv: Derivation, placement: str, dim: Optional[int]) -> Tuple[str, str, bool]:
    """(required input placement, output placement, uses the expand) for one input placement on one mesh dim."""
    if placement == "R":
        return "R", "R", False
    if placement.startswith("P"):
        return ("P(sum)", "P(sum)", False) if deriv.linear and placement == "P(sum)" else ("R", "R", False)
    d = int(placement[2:-1])
    if deriv.kind == "except_dim" and d == dim:
        if deriv.expand is not None:
            return placement, placement, True
        return "R", "R", False
    return placement, placement, False


def _dim_of(deriv: Derivation, iface: Interface, case: Case) -> Optional[int]:
    if deriv.dim_param is None:
        return None
    p = iface.param(deriv.dim_param)
    value = case.kwargs.get(deriv.dim_param, p.default if p and p.has_default else None)
    if value is None:
        return 0 if case.ndim in (0, 1, 3) else 1
    return value % case.ndim


def expected_binary(mode: Optional[str], pair: Tuple[str, str]) -> Tuple[List[str], str]:
    """(required placements, output placement) of an element-wise two-tensor op (ElementwiseRule semantics)."""
    shards = [p for p in pair if p.startswith("S(")]
    if shards:
        return [shards[0], shards[0]], shards[0]
    partial = [p == "P(sum)" for p in pair]
    if mode == "additive" and any(partial):
        return ["P(sum)", "P(sum)"], "P(sum)"
    if mode == "multiplicative" and sum(partial) == 1:
        return list(pair), "P(sum)"
    if mode == "numerator" and partial == [True, False]:
        return list(pair), "P(sum)"
    return ["R", "R"], "R"


def _binary_pairs(ndim: int) -> List[Tuple[str, str]]:
    return [("R", "R")] + _binary_shards(ndim) + [("P(sum)", "P(sum)"), ("P(sum)", "R"), ("R", "P(sum)")]


def _binary_shards(ndim: int) -> List[Tuple[str, str]]:
    return [(f"S({d})", f"S({d})") for d in range(ndim)]


def _accepted_binary(deriv: Derivation) -> List[Dict[str, Any]]:
    case = next((c for c in deriv.ok_cases if c.ndim == 3), deriv.ok_cases[0])
    out = []
    for pair in _binary_pairs(case.ndim):
        need, res = expected_binary(deriv.partial, pair)
        out.append({"shapes": [list(case.shape)] * 2, "kwargs": {}, "input": list(pair), "need": need,
                    "output": [res], "out_shape": list(case.probe.out_shapes[0]), "native": need == list(pair)})
    return out


def _accepted(deriv: Derivation, iface: Interface) -> List[Dict[str, Any]]:
    if deriv.n_tensors == 2:
        return _accepted_binary(deriv)
    reps = [c for c in deriv.ok_cases if c.ndim == 3] or deriv.ok_cases[:1]
    out = []
    for case in reps:
        dim = _dim_of(deriv, iface, case)
        for p in ["R"] + [f"S({d})" for d in range(case.ndim)] + ["P(sum)"]:
            need, res, exp = expected(deriv, p, dim)
            entry = {"shape": list(case.shape), "kwargs": dict(case.kwargs), "input": [p], "need": [need],
                     "output": [res], "out_shape": list(case.probe.out_shapes[0]), "native": need == p}
            if exp:
                entry["expand"] = True
            out.append(entry)
    return out


_ERRORS = {"dim_range": "out of range", "even": "must be even"}


def _rejected(deriv: Derivation, template_checks: Tuple[str, ...]) -> List[Dict[str, Any]]:
    out = []
    for case in deriv.cases:
        if not case.error:
            continue
        value = case.kwargs.get(deriv.dim_param) if deriv.dim_param else None
        if "dim_range" in template_checks and isinstance(value, int) and not -case.ndim <= value < case.ndim:
            out.append({"shape": list(case.shape), "kwargs": dict(case.kwargs), "error": _ERRORS["dim_range"],
                        "torch_error": case.error})
        elif "even" in template_checks and "even" in case.error:
            out.append({"shape": list(case.shape), "kwargs": dict(case.kwargs), "error": _ERRORS["even"],
                        "torch_error": case.error})
    uniq, seen = [], set()
    for r in out:
        key = (len(r["shape"]), r["error"], str(r["kwargs"]))
        if key not in seen:
            seen.add(key)
            uniq.append(r)
    return uniq[:4]


def _with_dtype(case: Dict[str, Any], dtype: str) -> Dict[str, Any]:
    """An ST case with the probe's input dtype (``dtype: torch.int64``; float32, the default, unwritten)."""
    return case if dtype == "float32" else dict(case, dtype=f"torch.{dtype}")


def _partial_candidates(dtype: str) -> List[str]:
    """Partial input placements ``check_op`` tries: P(sum) for float inputs only."""
    return ["P(sum)"] if dtype == "float32" else []


def _st_cases(deriv: Derivation, iface: Interface) -> List[Dict[str, Any]]:
    if deriv.n_tensors == 2:
        pairs = [p for p in _binary_pairs(0) if deriv.dtype == "float32" or "P(sum)" not in p]
        return [_with_dtype({"shapes": [list(c.shape)] * 2, "kwargs": dict(c.kwargs),
                             "native_min": sum(1 for pair in pairs + _binary_shards(c.ndim)
                                               if expected_binary(deriv.partial, pair)[0] == list(pair))},
                            deriv.dtype) for c in deriv.ok_cases]
    cases = []
    for case in deriv.ok_cases:
        dim = _dim_of(deriv, iface, case)
        single = ["R"] + [f"S({d})" for d in range(case.ndim)] + _partial_candidates(deriv.dtype)
        native = sum(1 for p in single if expected(deriv, p, dim)[0] == p)
        cases.append(_with_dtype({"shape": list(case.shape), "kwargs": dict(case.kwargs), "native_min": native},
                                 deriv.dtype))
    return cases[:8]


def _synthesised(synthesis: Any) -> Dict[str, Any]:
    """Path A with the synthesised entry (a generic rule class executing data), or a [TBD] path."""
    entry = synthesis.entry
    if entry is None:
        return {"path": f"{TBD} the synthesis could not be expressed as data: which path?", "base_class": TBD,
                "template": None, "options": {}, "reason": TBD}
    if entry["rule"] == "ReplicateRule":
        why = (f"its samples carry arguments {synthesis.synthesis.extra_args} a signature cannot key"
               if synthesis.synthesis.extra_args else "the op crashed when probed on shards (only the replicated "
               "strategy was probed)" if synthesis.synthesis.replicate_only else "no table of sharded strategies "
               "explains every signature (output shapes no input dim gives)")
        written = (entry.get("options") or {}).get("mutates")
        if written:
            why += f"; it writes tensor inputs {written} in place, which run only replicated (option `mutates`)"
        return _path("A", "ReplicateRule", entry["module"], dict(entry.get("options") or {}), None,
                     f"the probe matched no closed form and {why}; strategy synthesis "
                     f"({synthesis.synthesis.samples} sample calls, OpInfo {synthesis.sources['opinfo']}) accepts "
                     "R -> R on every signature and generator: inputs gathered, the op runs whole on every rank, "
                     "outputs replicated (`ReplicateRule`: correct, not sharded compute)")
    what = (f"factor rule `{entry['options']['equation']}`" if entry["rule"] == "FactorRule" else
            f"strategy table of {len(entry['options']['table'])} signature(s), other signatures replicated")
    return _path("A", entry["rule"], entry["module"], entry["options"], None,
                 f"the probe matched no closed form; strategy synthesis ({synthesis.synthesis.samples} sample calls, "
                 f"OpInfo {synthesis.sources['opinfo']}, every value generator agreeing on 2 and 3 ranks) gives a "
                 f"{what}, executed as data by `{entry['rule']}`")


def _synthesis_body(synthesis: Any) -> str:
    """The plan's section showing the synthesised table and its evidence (what the reviewer confirms)."""
    d = synthesis.to_dict()
    lines = ["", "## Synthesised strategies (`hp-agent dist-op synth`)",
             f"{d['samples']} sample calls (OpInfo {d['sources']['opinfo']}, pipeline {d['sources']['pipeline']}), "
             f"differentiable: {d['differentiable']}. Per signature (input ranks; layout arguments), the accepted "
             "strategies and the sample each signature was first found on:", ""]
    for key, rows in d["table"].items():
        lines.append(f"- `{key}`: {', '.join(f'`{r}`' for r in rows)} (evidence {d['evidence'][key]})")
    for line in d["conditions"] + ([f"factor rule `{d['equation']}`"] if d["equation"] else []):
        lines.append(f"- generalised: {line}")
    return "\n".join(lines) + "\n"


def _use_synthesis_cases(meta: Dict[str, Any], synthesis: Any, differentiable: Optional[bool]) -> None:
    """UT/ST cases of a synthesised plan: each table row on its evidence sample; forward-only ST when
    backward does not run on the op (decided by the probe, else by the synthesis)."""
    if synthesis.entry is not None and synthesis.entry["rule"] == "ReplicateRule":
        meta["accepted"], meta["st_cases"] = _replicate_cases(synthesis.synthesis)
        meta["rejected"] = []
        meta["ut_cases"] = [f"accepted[{i}]" for i in range(len(meta["accepted"]))]
    elif synthesis.entry is not None:
        meta["accepted"], meta["st_cases"] = _table_cases(meta, synthesis.synthesis)
        if synthesis.entry["rule"] == "FactorRule":  # the equation's strategies keep Partial(sum) only: a
            # P(max|min|avg) input the synthesis accepted (transpose) is gathered by the rule, not kept
            meta["accepted"] = [a for a in meta["accepted"]
                                if all(not p.startswith("P(") or p == "P(sum)" for p in a["input"])]
        meta["rejected"] = []
        meta["ut_cases"] = [f"accepted[{i}]" for i in range(len(meta["accepted"]))]
    if differentiable is False or synthesis.synthesis.differentiable is False:
        meta["derivation"]["differentiable"] = False
        meta["st_cases"] = [dict(c, grad=False) for c in meta["st_cases"]]
    elif differentiable is None:
        meta["derivation"]["differentiable"] = synthesis.synthesis.differentiable


def _decided_differentiable(meta: Dict[str, Any]) -> None:
    """``differentiable`` is the probe's (or the synthesis') finding; a [TBD] question when neither ran
    backward (never a default)."""
    if meta["derivation"]["differentiable"] is None:
        meta["derivation"]["differentiable"] = f"{TBD} no probe call ran: does the op have a derivative (true/false)?"


def _table_cases(meta: Dict[str, Any], synth: Any) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(UT scenarios, ST cases) of a table plan; the ST of an op taking one list of tensors (``dstack``,
    ``multi_dot``) passes the case's tensors as that list."""
    accepted, st_cases = synth.plan_cases()
    if _list_input(meta):
        st_cases = [dict(c, list=True) for c in st_cases]
    return accepted, st_cases


def _list_input(meta: Dict[str, Any]) -> bool:
    """The op's first parameter is a list of tensors (``Tensor[]`` / ``List[Tensor]``)."""
    params = next(iter((meta.get("interface") or {}).values()), {}).get("params") or []
    text = str(params[0].get("type", "")).replace(" ", "") if params else ""
    return text.startswith(("List[Tensor", "Tensor[]", "Sequence[Tensor", "Tuple[Tensor"))


def _replicate_cases(synth: Any, limit: int = 3) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(UT scenarios, ST cases) of a ReplicateRule plan: per signature, all-R and all-S(0) inputs are both
    gathered and the output specs come from the local result; ST on OpInfo's own samples (valid inputs),
    placements R and S(d) (at most 8 combinations per sample), forward and, where backward ran, backward."""
    accepted = []
    for key in sorted(synth.strategies)[:limit]:
        shapes_in = [list(x) for x in synth.shapes[key][0][0]]
        for fill in ("R", "S(0)"):
            inputs = ["R" if fill == "R" or not shape else fill for shape in shapes_in]
            accepted.append({"shapes": shapes_in, "kwargs": {}, "input": inputs, "need": ["R"] * len(shapes_in),
                             "output": ["dynamic"], "out_shape": []})
    grad = synth.differentiable is True
    from hyper_parallel.testing.op_cases import usable_samples  # pylint: disable=import-outside-toplevel
    from hp_agent.dist_op.synth import dtype_field, opinfo_sample_dtype  # pylint: disable=import-outside-toplevel
    dtype = opinfo_sample_dtype(synth.op) if synth.opinfo else "torch.float32"
    indices = usable_samples(synth.opinfo, 3, dtype) if synth.opinfo else []
    if indices:
        st = [{"opinfo": synth.opinfo, "sample": k, "native_min": 1, "max_combos": 8, "partial": False,
               "grad": grad, **dtype_field([dtype])} for k in indices]
    else:
        st = [dict(c, native_min=1, max_combos=8, partial=False, grad=grad) for c in synth.plan_cases()[1]]
    return accepted, st


def build_plan(group: List[str], ifaces: Dict[str, Interface], deriv: Derivation, ms_scope: Dict[str, Any],
               extra_questions: List[str], layout: Any = None, synthesis: Any = None,
               differentiable: Optional[bool] = None) -> Plan:
    """The draft plan for ``group`` (one op, several frontend names) from the analysis results (``synthesis``:
    the strategy synthesis of an op whose probe found no closed form)."""
    op = group[0]
    iface = ifaces[op]
    chosen = design(deriv, iface) if synthesis is None else _synthesised(synthesis)
    module, rule_class, rule_file = _rule_fields(chosen, op, layout)
    meta: Dict[str, Any] = {
        "op": op,
        "frontends": {"torch": list(group), "mindspore": _ms_entry(ms_scope)},
        "interface": {n: {"signature": i.signature, "source": i.source, "dtypes": i.dtypes,
                          "params": [p.to_dict() for p in i.params]} for n, i in ifaces.items()},
        "derivation": {"kind": deriv.kind if synthesis is None or synthesis.entry is None else "synthesised",
                       "tensors": deriv.n_tensors, "partial_mode": deriv.partial,
                       "dim_param": deriv.dim_param, "linear": deriv.linear,
                       "shape_rule": deriv.shape_rule, "scan_combine": deriv.scan, "expand": deriv.expand,
                       "legacy_dim": deriv.legacy_dim, "differentiable": differentiable,
                       "probed_cases": len(deriv.cases)},
        "path": chosen["path"],
        "reason": chosen["reason"],
        "base_class": chosen["base_class"],
        "rule": {"class": rule_class, "module": module, "file": rule_file, "template": chosen.get("template")},
        "options": chosen.get("options", {}),
        "dim_position": iface.position(deriv.dim_param) if deriv.dim_param else None,
        "dim_default": _default(iface, deriv.dim_param),
        "cache_values": deriv.cache_values,
        "expand": f"expand_{deriv.expand}" if deriv.expand else None,
        "expand_params": _expand_params(iface, deriv),
        "registry": {"file": layout.registry_yaml if layout is not None else REGISTRY_FILE, "names": list(group)},
        **_test_lists(deriv, iface, chosen),
        "status": "draft",
    }
    questions = list(deriv.questions) + list(extra_questions)
    if synthesis is not None:
        questions = list(synthesis.questions) + list(extra_questions)
        _use_synthesis_cases(meta, synthesis, differentiable)
    elif differentiable is False:
        meta["st_cases"] = [dict(c, grad=False) for c in meta["st_cases"]]
    _decided_differentiable(meta)
    from hp_agent.dist_op.render import render_body
    body = render_body(meta, deriv, ifaces, questions)
    if synthesis is not None:
        body += _synthesis_body(synthesis)
    return Plan(meta, body)


def _rule_fields(chosen: Dict[str, Any], op: str, layout: Any) -> Tuple[Optional[str], str, Optional[str]]:
    """(module, class, file) of the rule: the reused one (path A) or the shared class of
    ``rules/planned.py`` that executes the plan's template with the plan's parameters (B/C: no file per op)."""
    del op, layout
    template = chosen.get("template")
    if not template:
        return chosen.get("module"), chosen["base_class"], None
    from hp_agent.dist_op.scaffold import PLANNED, PLANNED_MODULE
    return PLANNED_MODULE, PLANNED[template], None


def _test_lists(deriv: Derivation, iface: Interface, chosen: Dict[str, Any]) -> Dict[str, Any]:
    """accepted / rejected scenarios and the UT and ST case lists."""
    known = deriv.kind != "unknown" and not str(chosen["path"]).startswith(TBD)
    checks: Tuple[str, ...] = ()
    if known and deriv.kind == "except_dim":
        checks = ("dim_range", "even") if chosen.get("template") == "dim_local" else ("dim_range",)
    accepted = _accepted(deriv, iface) if known and deriv.ok_cases else []
    rejected = _rejected(deriv, checks)
    ut_cases = [f"accepted[{i}]" for i in range(len(accepted))] + [f"rejected[{i}]" for i in range(len(rejected))]
    return {"accepted": accepted, "rejected": rejected, "ut_cases": ut_cases,
            "st_cases": _st_cases(deriv, iface) if known else []}


def _expand_params(iface: Interface, deriv: Derivation) -> Dict[str, Any]:
    """Positions and defaults of the scalars an expand or shape rule reads (p, eps, n)."""
    out = {}
    for name in ("p", "eps", "n"):
        p = iface.param(name)
        if p is not None and not p.tensor and (deriv.expand == "pnorm" or name == "n"):
            out[name] = {"position": iface.position(name), "default": p.default if p.has_default else None}
    return out


def _default(iface: Interface, name: Optional[str]) -> Any:
    p = iface.param(name) if name else None
    return p.default if p is not None and p.has_default else None


def _ms_entry(scope: Dict[str, Any]) -> Dict[str, Any]:
    if not scope.get("installed"):
        why = scope.get("note") or "MindSpore is not installed here"
        return {"installed": False, "names": [], "in_scope": f"{TBD} {why}: is the MindSpore frontend in scope?"}
    if not scope.get("names"):
        return {"installed": True, "version": scope.get("version"), "names": [],
                "in_scope": f"{TBD} torch-only op (no mint/ops counterpart in MindSpore "
                            f"{scope.get('version')}): confirm torch only (false)?"}
    return {"installed": True, "version": scope.get("version"), "names": scope["names"],
            "in_scope": f"{TBD} MindSpore has {', '.join(scope['names'])}: deliver the MindSpore frontend too?"}
