# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent dist-op analyze``: scope, interface, probing, design, plan — then stop."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hp_agent.dist_op.analysis import derive
from hp_agent.dist_op.design import build_plan
from hp_agent.dist_op.interface import AnalyzeError, base_name, mindspore_scope, resolve_torch, torch_interface
from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import find_tbd, slug_of

__all__ = ["AnalyzeResult", "analyze", "group_names"]


@dataclass
class AnalyzeResult:
    """One written plan."""

    op: str
    path: Path
    plan_path: str
    tbd: List[str]
    seconds: float

    def to_dict(self) -> Dict[str, object]:
        """JSON form."""
        return {"op": self.op, "plan": self.plan_path, "path": str(self.path), "tbd": self.tbd,
                "seconds": round(self.seconds, 2)}


TORCH_PREFIXES = ("torch.", "torch.nn.functional.", "torch.special.", "Tensor.")


def torch_counterpart(ms_name: str) -> str:
    """The torch op a MindSpore name (``mindspore.mint.cumprod``, ``mindspore.mint.nn.functional.glu``)
    stands for: the analysis probes the torch op; the scope step records the MindSpore names."""
    import torch
    op = base_name(ms_name)
    for prefix in TORCH_PREFIXES:
        owner = {"torch.": torch, "torch.nn.functional.": torch.nn.functional, "torch.special.": torch.special,
                 "Tensor.": torch.Tensor}[prefix]
        if callable(getattr(owner, op, None)):
            return prefix + op
    raise AnalyzeError(f"{ms_name}: no torch counterpart named {op!r} in torch, torch.nn.functional, torch.special "
                       "or Tensor; a MindSpore-only op needs a hand-written plan")


def group_names(names: List[str]) -> List[List[str]]:
    """Names of one op across spellings (``torch.cumprod``, ``Tensor.cumprod``) share a plan; order kept."""
    groups: Dict[str, List[str]] = {}
    for n in names:
        groups.setdefault(base_name(n), []).append(n)
    return list(groups.values())


def _registered(names: List[str], layout: Layout) -> List[str]:
    """Names already registered outside the pipeline's own YAML (they need no plan)."""
    from hyper_parallel.core.ops.registry import get_registry
    own = layout.path(layout.registry_yaml).resolve()
    reg = get_registry()
    return [n for n in names if n in reg.entries and Path(reg.entries[n].source).resolve() != own]


def _same_rule(a, b) -> bool:
    return (a.kind, a.linear, a.shape_rule, a.scan) == (b.kind, b.linear, b.shape_rule, b.scan)


def _differentiable(op: str, deriv) -> Optional[bool]:
    """Whether backward runs on the single-device op for its first accepted probe case, with the probe's own
    inputs (their dtype included: an integer or bool op has no derivative); None when no probe case ran
    (then the strategy synthesis decides, or the plan asks)."""
    import torch
    from hp_agent.dist_op.analysis import sample_tensor
    from hp_agent.dist_op.synth import _differentiable as backward_runs  # pylint: disable=protected-access
    case = next(iter(deriv.ok_cases), None)
    if case is None:
        return None
    gen = torch.Generator().manual_seed(0)
    tensors = [sample_tensor(case.shape, gen, case.dtype) for _ in range(max(case.n_tensors, 1))]
    return backward_runs(resolve_torch(op), tensors, dict(case.kwargs))


def _refuse_non_dense(op: str) -> None:
    """Refuse an op whose result is not a dense tensor (``Tensor.to_sparse``): DTensors hold dense local
    tensors, so no layout rule can be right for it. An op the probe sample does not fit is left to the
    analysis."""
    import torch
    try:
        with torch.no_grad():
            out = resolve_torch(op)(torch.rand(4, 6) + 0.5)
    except Exception:  # pylint: disable=broad-except  # the sample does not fit the op: nothing to decide here
        return
    layouts = {o.layout for o in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(o, torch.Tensor)}
    if layouts - {torch.strided}:
        raise AnalyzeError(f"{op}: returns a {sorted(str(x) for x in layouts - {torch.strided})[0]} tensor; DTensors "
                           "hold dense (strided) local tensors, so no distributed rule can be right for it (refused)")


def _needs_synthesis(op: str, deriv) -> bool:
    """No closed form: the probe found none, its output shape is one no shared class computes, or OpInfo's
    samples contradict it (:func:`_opinfo_contradicts`) — then a strategy table is synthesised."""
    return deriv.kind not in ("elementwise", "except_dim") or deriv.shape_rule not in ("same", "halved", "minus_n") \
        or _opinfo_contradicts(op, deriv)


def _opinfo_contradicts(op: str, deriv) -> bool:
    """True when PyTorch's OpInfo samples of ``op`` show that the probe's closed form cannot hold: an
    element-wise op's output has the broadcast shape of its tensor inputs, but a sample's inputs do not
    broadcast or its output has another shape (``slice_scatter``, ``resize_as_``: the probe's equal-shape
    operands made them look element-wise). Such an op goes to the strategy synthesis instead."""
    import torch
    from hp_agent.dist_op.probe import flatten
    from hp_agent.dist_op.synth import opinfo_samples
    if deriv.kind != "elementwise":
        return False
    fn = resolve_torch(op)
    for args, kwargs in opinfo_samples(op, limit=4):
        tensors = [t for t in list(args) + list(kwargs.values()) if isinstance(t, torch.Tensor)]
        try:
            with torch.no_grad():
                out = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
        except Exception:  # pylint: disable=broad-except  # a sample invalid for the op: no evidence
            continue
        try:
            want = tuple(torch.broadcast_shapes(*[t.shape for t in tensors]))
        except RuntimeError:
            return True
        if any(isinstance(o, torch.Tensor) and tuple(o.shape) != want for o in flatten(out)):
            return True
    return False


#: value ranges tried for the ST inputs of shape-only cases, in order (the default first)
VALUE_RANGES = ((0.5, 1.5), (0.1, 0.9), (1.5, 2.5), (-0.9, -0.1))


def _float_cases(plan) -> List[Dict[str, Any]]:
    """The plan's ST cases of random float inputs (not OpInfo's own values, not integer or bool inputs)."""
    return [c for c in plan.meta.get("st_cases") or [] if "opinfo" not in c and "dtype" not in c]


def _value_range(plan, fn) -> None:
    """Give the plan's shape-only ST cases the first value range in which the op's output is finite
    (``acos`` needs [-1, 1], ``acosh`` >= 1): random inputs outside the domain would compare NaNs."""
    import torch
    for case in _float_cases(plan):
        shapes = case.get("shapes") or [case["shape"]]
        for low, high in VALUE_RANGES:
            torch.manual_seed(0)
            tensors = [torch.rand(s) * (high - low) + low for s in shapes]
            try:
                with torch.no_grad():
                    out = fn(*tensors, **case.get("kwargs", {}))
            except Exception:  # pylint: disable=broad-except  # not valid here: try the next range
                continue
            outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
            if all(not o.is_floating_point() or bool(torch.isfinite(o).all()) for o in outs):
                if (low, high) != VALUE_RANGES[0]:
                    case["low"], case["high"] = low, high
                break


#: seconds one op's synthesis may take in its child process
SYNTH_TIMEOUT = 600.0


def synth_isolated(op: str, timeout: float = SYNTH_TIMEOUT) -> Any:
    """:func:`hp_agent.dist_op.synth.synth_op` in a forked child: probing runs the op on shards whose values
    the op may not expect (``lu_unpack`` with a shard of its pivots indexes out of range and corrupts the
    heap). When the child crashes or hangs, the synthesis runs again probing only the all-``R`` strategy
    (the op on whole inputs, as on one device); when that fails too, an AnalyzeError ends this op's analysis
    (not the batch)."""
    try:
        return _synth_child(op, timeout, replicate_only=False)
    except _Crashed:
        return _synth_child(op, timeout, replicate_only=True)


class _Crashed(AnalyzeError):
    """The synthesis child died or hung."""


def _synth_child(op: str, timeout: float, replicate_only: bool) -> Any:
    import multiprocessing
    import pickle
    from hp_agent.dist_op.synth import synth_op
    if "fork" not in multiprocessing.get_all_start_methods():
        return synth_op(op)
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child() -> None:
        import torch
        torch.set_num_threads(1)  # a forked child must not enter the parent's OpenMP pool (it hangs)
        try:
            payload = pickle.dumps(("ok", synth_op(op, replicate_only=True) if replicate_only else synth_op(op)))
        except Exception as exc:  # pylint: disable=broad-except  # reported to the parent by name
            payload = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
        send.send_bytes(payload)
        send.close()

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send.close()
    data: Optional[bytes] = None
    if recv.poll(timeout):
        try:
            data = recv.recv_bytes()
        except EOFError:  # the child died before sending
            data = None
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if data is None:
        why = f"exit code {proc.exitcode}" if proc.exitcode is not None else f"no result in {timeout:g} s"
        raise _Crashed(f"{op}: the strategy synthesis crashed or hung ({why}"
                       f"{'' if replicate_only else '; the op failed on a shard'})")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise AnalyzeError(f"{op}: the strategy synthesis failed: {value}")
    return value


def _synthesis_for(op: str, main: Any) -> Any:
    """The strategy synthesis of ``op`` (in a child process: :func:`synth_isolated`) when it needs one
    (:func:`_needs_synthesis`), its closed form has an open question (a partial mode it cannot name) or the
    op has several outputs (the closed forms declare one); None when the closed form stands."""
    several = any(c.probe is not None and len(c.probe.out_shapes) > 1 for c in main.cases)
    if _needs_synthesis(op, main) or main.questions or several:  # frexp: a table names every output
        return synth_isolated(op)
    return None


def analyze(names: List[str], layout: Layout, force: bool = False) -> List[AnalyzeResult]:
    """Analyse every op group and write ``plans/<op>.md`` (status draft); refuses registered ops and,
    unless ``force``, overwriting a confirmed plan."""
    if not names:
        raise AnalyzeError("name at least one op (e.g. torch.roll, Tensor.flip, torch.nn.functional.glu)")
    names = [torch_counterpart(n) if n.startswith("mindspore.") else n for n in names]
    done = _registered(names, layout)
    if done:
        raise AnalyzeError(f"already registered (nothing to plan): {', '.join(done)}")
    results = []
    for group in group_names(names):
        start = time.monotonic()
        _refuse_non_dense(group[0])
        ifaces = {n: torch_interface(n) for n in group}
        derivs = {n: derive(resolve_torch(n), ifaces[n]) for n in group}
        main = derivs[group[0]]
        questions = [f"`{n}` probes differently from `{group[0]}` ({d.kind}): one plan or two?"
                     for n, d in derivs.items() if not _same_rule(d, main)]
        scope = mindspore_scope(group[0]) if layout.mindspore == "auto" else {
            "installed": False, "names": [], "note": "lookup switched off ([dist_op] mindspore = off)"}
        synthesis = _synthesis_for(group[0], main)
        plan = build_plan(group, ifaces, main, scope, questions, layout, synthesis=synthesis,
                          differentiable=_differentiable(group[0], main))
        _value_range(plan, resolve_torch(group[0]))
        target = layout.path(layout.plans_dir) / f"{slug_of(group[0])}.md"
        if target.exists() and not force and "status: confirmed" in target.read_text(encoding="utf-8"):
            raise AnalyzeError(f"{target}: a confirmed plan exists; pass --force to re-analyse (it becomes a draft)")
        plan.save(target)
        rel = os.path.relpath(target, layout.root)
        results.append(AnalyzeResult(group[0], target, rel, find_tbd(plan), time.monotonic() - start))
    return results
