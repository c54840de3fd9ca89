# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore frontends of a pipeline op: ``mindspore.mint`` registry entries and ST cases, as data.

When a confirmed plan has MindSpore in scope (``frontends.mindspore.in_scope: true``), ``hp-agent dist-op
dev``:

1. **checks the kernels** — every ``mindspore.mint.*`` counterpart the analysis found runs in ONE MindSpore
   process on the plan's ST cases (numpy inputs shared with torch): it must have a CPU kernel, accept the
   torch call's arguments, return torch's values and (for a differentiable op) torch's gradients. A name
   that fails is reported with MindSpore's own error (``The kernel AsinhExt unregistered``): the reviewer
   then sets ``in_scope: false``;
2. **writes the registry entries** — ``mindspore.mint.<name>`` with the SAME rule class, module and
   options as the torch names (``hyper_parallel/core/ops/yaml/mindspore_generated.yaml``);
3. **writes the ST cases** (``tests/st/mindspore/generated/cases/<op>.yaml``), which ride the existing
   MindSpore launch 2 of the gate (``tests/st/mindspore/checks.py``), and runs them now in one 2-rank
   launch for every op of the dev call (``python -m tests.st.mindspore.generated.checks OP...``).
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import yaml

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import Plan, dump_yaml, slug_of

__all__ = ["MS_REGISTRY", "MS_CASES_DIR", "KernelCheck", "FrontendResult", "mint_names", "check_kernels", "ms_cases",
           "write_frontend", "run_launch", "frontend_for", "in_scope", "mindspore_step", "MAX_CASES"]

MS_REGISTRY = "hyper_parallel/core/ops/yaml/mindspore_generated.yaml"
MS_CASES_DIR = "tests/st/mindspore/generated/cases"
MAX_CASES = 2  # per op: the launch rides the gate's MindSpore launch 2 (CI budget)
_HEADER = ("# MindSpore frontends written by `hp-agent dist-op dev` from confirmed plans with MindSpore in scope:\n"
           "# the same rule class, module and options as the torch names (generated.yaml). Change the plan and\n"
           "# re-run dev, do not edit by hand.\n")

# runs in a fresh interpreter: MindSpore and torch side by side, one process for every op of the call
_KERNEL_CODE = r'''
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import torch
import mindspore as ms
from mindspore import mint


def resolve(name, root):
    obj = root
    for part in name.split(".")[1 if root is torch else 2:]:
        obj = getattr(obj, part)
    return obj


def torch_fn(name):
    return resolve(name, torch)


def one(job):
    if not job["cases"]:
        return {"ok": False, "detail": f"{job['mint']}: the plan has no ST case to run the kernel on"}
    fn_t = torch_fn(job["torch"])
    fn_m = resolve(job["mint"], mint)
    for k, case in enumerate(job["cases"]):
        rng = np.random.default_rng(100 + k)
        arrays = [(rng.random(tuple(s)) + 0.5).astype(np.float32) for s in case["shapes"]]
        kwargs = dict(case.get("kwargs") or {})
        ts = [torch.tensor(a, requires_grad=bool(case.get("grad", True))) for a in arrays]
        want = fn_t(*ts, **kwargs)
        try:
            got = fn_m(*[ms.Tensor(a) for a in arrays], **kwargs)
        except Exception as exc:
            return {"ok": False, "detail": f"{job['mint']}{[list(a.shape) for a in arrays]} {kwargs}: "
                    f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"}
        if tuple(got.shape) != tuple(want.shape) or not np.allclose(got.asnumpy(), want.detach().numpy(),
                                                                    rtol=1e-4, atol=1e-5, equal_nan=True):
            return {"ok": False, "detail": f"{job['mint']} {kwargs}: result differs from {job['torch']}"}
        if case.get("grad", True):
            w = rng.standard_normal(tuple(want.shape)).astype(np.float32)
            (want * torch.tensor(w)).sum().backward()
            try:
                grads = ms.grad(lambda *xs: (fn_m(*xs, **kwargs) * ms.Tensor(w)).sum(),
                                grad_position=tuple(range(len(arrays))))(*[ms.Tensor(a) for a in arrays])
            except Exception as exc:
                return {"ok": False, "detail": f"{job['mint']} backward: {type(exc).__name__}: "
                        f"{str(exc).strip().splitlines()[0][:200]}"}
            grads = grads if isinstance(grads, tuple) else (grads,)
            for g, t in zip(grads, ts):
                if not np.allclose(g.asnumpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True):
                    return {"ok": False, "detail": f"{job['mint']} {kwargs}: gradient differs from {job['torch']}"}
    return {"ok": True, "detail": f"{len(job['cases'])} case(s) match {job['torch']} (forward"
            + (" and backward)" if any(c.get("grad", True) for c in job["cases"]) else ")")}


jobs = json.loads(sys.stdin.read())
out = {}
for job in jobs:
    try:
        out[job["mint"]] = one(job)
    except Exception as exc:
        out[job["mint"]] = {"ok": False, "detail": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"}
print("HP-KERNELS " + json.dumps(out))
'''


@dataclass
class KernelCheck:
    """What one MindSpore process said about the mint counterparts of some ops."""

    results: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""

    def ok(self, name: str) -> bool:
        """True when ``name`` ran and matched torch."""
        return bool(self.results.get(name, {}).get("ok"))


def mint_names(plan: Plan, layout: Optional[Layout] = None) -> List[str]:
    """The ``mindspore.mint.*`` counterparts the analysis recorded for the plan's op (with ``layout``: without
    the names a hand-written registry file already holds)."""
    ms = (plan.meta.get("frontends") or {}).get("mindspore") or {}
    names = [n for n in ms.get("names") or [] if n.startswith("mindspore.mint.")]
    if layout is not None:
        taken = registered_elsewhere(layout)
        names = [n for n in names if n not in taken]
    return names


def registered_elsewhere(layout: Layout) -> Dict[str, str]:
    """``mindspore.*`` names of the built-in registry files other than the generated MindSpore file -> file."""
    out: Dict[str, str] = {}
    folder = layout.path(MS_REGISTRY).parent
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        if path.name == MS_REGISTRY.rsplit("/", 1)[-1]:
            continue
        for name in yaml.safe_load(path.read_text(encoding="utf-8")) or {}:
            if str(name).startswith("mindspore."):
                out[str(name)] = path.name
    return out


def ms_cases(plan: Plan) -> List[Dict[str, Any]]:
    """The plan's ST cases for MindSpore (at most ``MAX_CASES``; tensors passed positionally)."""
    out = []
    for case in (plan.meta.get("st_cases") or [])[:MAX_CASES]:
        shapes = case.get("shapes") or [case["shape"]]
        item = {"shapes": [list(s) for s in shapes], "kwargs": dict(case.get("kwargs") or {})}
        if case.get("grad") is False:
            item["grad"] = False
        out.append(item)
    return out


def check_kernels(plans: Sequence[Plan], layout: Layout, timeout: float = 300.0) -> KernelCheck:
    """Run every plan's mint counterparts on its cases in one MindSpore process (see the module docstring)."""
    jobs = [{"torch": p.op, "mint": name, "cases": ms_cases(p)} for p in plans for name in mint_names(p, layout)]
    check = KernelCheck()
    if not jobs:
        return check
    start = time.monotonic()
    try:
        proc = subprocess.run([layout.interpreter, "-c", _KERNEL_CODE], input=json.dumps(jobs), text=True,
                              capture_output=True, cwd=layout.root, env=layout.test_env(), timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        check.error = f"the MindSpore kernel check did not finish in {timeout:.0f} s"
        check.seconds = time.monotonic() - start
        return check
    check.seconds = time.monotonic() - start
    line = next((x for x in proc.stdout.splitlines() if x.startswith("HP-KERNELS ")), None)
    if line is None:
        check.error = f"the MindSpore kernel check failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}"
        return check
    check.results = json.loads(line[len("HP-KERNELS "):])
    return check


def _entries(layout: Layout) -> Dict[str, Any]:
    target = layout.path(MS_REGISTRY)
    return (yaml.safe_load(target.read_text(encoding="utf-8")) or {}) if target.is_file() else {}


def write_frontend(plan: Plan, layout: Layout, names: Sequence[str], entry: Dict[str, Any]) -> List[str]:
    """Write the registry entries of ``names`` (``entry``: the torch names' rule/module/options) and the
    plan's MindSpore case file; returns the files written (relative paths)."""
    entries = _entries(layout)
    for name in names:
        entries[name] = {**entry, "doc": f"{layout.plans_dir}/{slug_of(plan.op)}.md"}
    body = "".join(f"{name}:\n" + "".join(f"  {k}: {_flow(v) if k in ('doc', 'options') else v}\n"
                                          for k, v in spec.items())
                   for name, spec in sorted(entries.items()))
    written = []
    for rel, text in ((MS_REGISTRY, _HEADER + body), (f"{MS_CASES_DIR}/{slug_of(plan.op)}.yaml", _case_text(
            plan, layout, names))):
        target = layout.path(rel)
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(rel)
    return written


def _flow(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()


def _case_text(plan: Plan, layout: Layout, names: Sequence[str]) -> str:
    head = (f"# MindSpore cases of {plan.op}, written by `hp-agent dist-op dev` from the confirmed plan "
            f"{layout.plans_dir}/{slug_of(plan.op)}.md\n# (read by tests/st/mindspore/generated/checks.py, "
            "in MindSpore launch 2): change the plan and re-run dev.\n")
    lines = [dump_yaml({"op": plan.op, "names": list(names)}).rstrip(), "cases:"]
    lines += [f"- {_flow(c)}" for c in ms_cases(plan)]
    return head + "\n".join(lines) + "\n"


def run_launch(ops: Sequence[str], layout: Layout, timeout: float = 400.0) -> Dict[str, Any]:
    """The generated MindSpore checks of ``ops`` (torch names) in one 2-rank launch: ``{check: (ok, detail)}``
    plus ``"__error__"`` when the launch itself failed."""
    start = time.monotonic()
    try:
        proc = subprocess.run([layout.interpreter, "-m", "tests.st.mindspore.generated.checks", *ops], text=True,
                              capture_output=True, cwd=layout.root, env=layout.test_env(), timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"__error__": f"the MindSpore launch did not finish in {timeout:.0f} s", "__seconds__": timeout}
    out: Dict[str, Any] = {"__seconds__": time.monotonic() - start}
    for line in proc.stdout.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if "error" in item:
            out["__error__"] = item["error"]
        elif "check" in item:
            out[item["check"]] = (item["ok"], item["detail"])
    if proc.returncode and "__error__" not in out and all(v[0] for k, v in out.items() if not k.startswith("__")):
        out["__error__"] = f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"
    return out


def frontend_for(plan: Plan, check: KernelCheck, layout: Layout) -> Optional[str]:
    """None when every new mint counterpart of ``plan`` passed ``check``, else why not (for the report)."""
    names = mint_names(plan, layout)
    if not names:
        return "MindSpore is in scope, but the analysis found no new mindspore.mint counterpart (set in_scope: false)"
    if check.error:
        return check.error
    bad = [f"{n}: {check.results.get(n, {}).get('detail', 'not checked')}" for n in names if not check.ok(n)]
    return ("; ".join(bad) + " — set frontends.mindspore.in_scope=false (no usable MindSpore kernel)") if bad else None


@dataclass
class FrontendResult:
    """The MindSpore step of one op in a dev run."""

    op: str
    ok: bool
    detail: str
    seconds: float
    files: List[str] = field(default_factory=list)


def in_scope(plan: Plan) -> bool:
    """True when the confirmed plan has the MindSpore frontend in scope."""
    return ((plan.meta.get("frontends") or {}).get("mindspore") or {}).get("in_scope") is True


def mindspore_step(plans: Sequence[Plan], layout: Layout) -> Dict[str, FrontendResult]:
    """Kernel check (one MindSpore process), entries (the torch names' rule, module and options) + case files,
    then ONE 2-rank launch for every plan in ``plans`` with MindSpore in scope. Returns op -> result (plans
    out of scope are absent)."""
    import importlib.util
    from hp_agent.dist_op.scaffold import planned_entry
    todo = [p for p in plans if in_scope(p)]
    if not todo:
        return {}
    if importlib.util.find_spec("mindspore") is None:
        return {p.op: FrontendResult(p.op, False, "MindSpore is in scope but not installed here", 0.0) for p in todo}
    check = check_kernels(todo, layout)
    share = check.seconds / len(todo)
    out: Dict[str, FrontendResult] = {}
    ready = []
    for plan in todo:
        why = frontend_for(plan, check, layout)
        if why:
            out[plan.op] = FrontendResult(plan.op, False, why, share)
            continue
        names = mint_names(plan, layout)
        files = write_frontend(plan, layout, names, planned_entry(plan))
        out[plan.op] = FrontendResult(plan.op, True, check.results[names[0]]["detail"], share, files)
        ready.append(plan)
    if not ready:
        return out
    launched = run_launch([p.op for p in ready], layout)
    share = launched.get("__seconds__", 0.0) / len(ready)
    for plan in ready:
        res = out[plan.op]
        res.seconds += share
        if "__error__" in launched:
            res.ok, res.detail = False, f"MindSpore launch failed: {launched['__error__']}"
            continue
        names = mint_names(plan, layout)
        bad = [f"{n}: {launched.get('generated ' + n, (False, 'did not run'))[1][-800:]}" for n in names
               if not launched.get("generated " + n, (False,))[0]]
        if bad:
            res.ok, res.detail = False, "; ".join(bad)
        else:
            res.detail += f"; DTensor parity on 2 MindSpore ranks ok ({', '.join(names)})"
    return out
