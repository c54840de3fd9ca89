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
from typing import Any, Callable, Dict, List, Optional, Sequence

import yaml

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.plan import Plan, dump_yaml, slug_of

__all__ = ["MS_REGISTRY", "MS_CASES_DIR", "KernelCheck", "FrontendResult", "mint_names", "check_kernels", "ms_cases",
           "write_frontend", "run_launch", "frontend_for", "in_scope", "mindspore_step", "MAX_CASES", "run_jobs",
           "candidates", "sweep_jobs", "pipeline_plans", "sweep", "sweep_counts", "sweep_markdown", "record_sweep"]

MS_REGISTRY = "hyper_parallel/core/ops/yaml/mindspore_generated.yaml"
MS_CASES_DIR = "tests/st/mindspore/generated/cases"
MAX_CASES = 2  # per op: the launch rides the gate's MindSpore launch 2 (CI budget)
_HEADER = ("# MindSpore frontends written by `hp-agent dist-op dev` from confirmed plans with MindSpore in scope:\n"
           "# the same rule class, module and options as the torch names (generated.yaml). Change the plan and\n"
           "# re-run dev, do not edit by hand.\n")

@dataclass
class KernelCheck:
    """What the MindSpore process(es) said about the mint counterparts of some ops: ``results[mint name]``
    (or ``results["<torch op>|<mint name>"]`` in a sweep) with ``ok``, ``kernel``, ``forward``, ``grad``,
    ``error``, ``detail`` and the converted ``cases``."""

    results: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""
    processes: int = 0

    def ok(self, name: str) -> bool:
        """True when ``name`` ran and matched torch."""
        return bool(self.results.get(name, {}).get("ok"))


def mint_names(plan: Plan, layout: Optional[Layout] = None) -> List[str]:
    """The MindSpore frontends to generate for the plan's op: its ``mindspore.mint.*`` counterparts, or, when
    it has none, its ``mindspore.ops.*`` ones (with ``layout``: without the names a hand-written registry file
    already holds)."""
    ms = (plan.meta.get("frontends") or {}).get("mindspore") or {}
    found = list(ms.get("names") or [])
    names = [n for n in found if n.startswith("mindspore.mint.")] or \
        [n for n in found if n.startswith("mindspore.ops.")]
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


def _detail(res: Dict[str, Any]) -> str:
    if res.get("ok"):
        n = len(res.get("cases") or [])
        return f"{n} case(s) match {res['op']} (forward" + (" and backward)" if res.get("grad") == "equal" else ")")
    return f"{res['mint']}: {res.get('error') or 'failed'}"


def _one_process(todo: List[Dict[str, Any]], layout: Layout, timeout: float, check: KernelCheck,
                 progress: Optional[Callable[[Dict[str, Any]], None]]) -> tuple:
    """Run ``todo`` in one child, streaming its results into ``check``; returns (last started key, exit text,
    stderr tail)."""
    import tempfile
    import threading
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with  # streamed, killed by the watchdog
            [layout.interpreter, "-m", "hp_agent.dist_op.mindspore_kernels"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=err, text=True, cwd=layout.root, env=layout.test_env())
        expired = threading.Event()
        limit = timeout + 2.0 * len(todo)
        watchdog = threading.Timer(limit, lambda: (expired.set(), proc.kill()))
        watchdog.start()
        started = None
        try:
            proc.stdin.write(json.dumps(todo))
            proc.stdin.close()
            for line in proc.stdout:
                if line.startswith("HP-START "):
                    started = json.loads(line[len("HP-START "):])
                elif line.startswith("HP-JOB "):
                    res = json.loads(line[len("HP-JOB "):])
                    res["detail"] = _detail(res)
                    check.results[res["key"]] = res
                    if progress:
                        progress(res)
            proc.wait()
        finally:
            watchdog.cancel()
        err.seek(0)
        code = f"timed out after {limit:.0f} s" if expired.is_set() else f"exit {proc.returncode}"
        return started, code, err.read().strip()[-600:]


def run_jobs(jobs: List[Dict[str, Any]], layout: Layout, timeout: float = 300.0,
             progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> KernelCheck:
    """Run kernel-check ``jobs`` (``key``, ``torch``, ``mint``, ``cases``) in as few MindSpore processes as
    possible: a process that dies or hangs costs only the job it was running (recorded with the exit), the
    rest go to a fresh process. ``results`` is keyed by the jobs' ``key``; ``progress(result)`` per job."""
    check = KernelCheck()
    todo = list(jobs)
    start = time.monotonic()
    while todo:
        check.processes += 1
        started, code, tail = _one_process(todo, layout, timeout, check, progress)
        left = [j for j in todo if j["key"] not in check.results]
        if left and (started is None or left[0]["key"] != started):  # died outside a job: report and stop
            check.error = f"the MindSpore kernel check failed ({code}): {tail}"
            break
        if left:
            job = left.pop(0)
            res = {"key": job["key"], "op": job["torch"], "mint": job["mint"], "ok": False, "kernel": "",
                   "forward": "crash", "grad": "", "cases": [], "seconds": 0.0,
                   "error": f"the MindSpore process died on it ({code})"}
            res["detail"] = _detail(res)
            check.results[job["key"]] = res
        todo = left
    check.seconds = time.monotonic() - start
    return check


def check_kernels(plans: Sequence[Plan], layout: Layout, timeout: float = 300.0) -> KernelCheck:
    """Run every plan's mint counterparts on its cases in one MindSpore process (see the module docstring);
    ``results`` keyed by mint name."""
    jobs = [{"key": name, "torch": p.op, "mint": name, "cases": list(p.meta.get("st_cases") or []),
             "max_cases": MAX_CASES} for p in plans for name in mint_names(p, layout)]
    if not jobs:
        return KernelCheck()
    return run_jobs(jobs, layout, timeout)


def _entries(layout: Layout) -> Dict[str, Any]:
    target = layout.path(MS_REGISTRY)
    return (yaml.safe_load(target.read_text(encoding="utf-8")) or {}) if target.is_file() else {}


def write_frontend(plan: Plan, layout: Layout, names: Sequence[str], entry: Dict[str, Any],
                   cases: Optional[List[Dict[str, Any]]] = None) -> List[str]:
    """Write the registry entries of ``names`` (``entry``: the torch names' rule/module/options) and the
    plan's MindSpore case file (``cases``: the kernel check's converted cases, default :func:`ms_cases`);
    returns the files written (relative paths)."""
    entries = _entries(layout)
    for name in names:
        entries[name] = {**entry, "doc": f"{layout.plans_dir}/{slug_of(plan.op)}.md"}
    body = "".join(f"{name}:\n" + "".join(f"  {k}: {_flow(v) if k in ('doc', 'options') else v}\n"
                                          for k, v in spec.items())
                   for name, spec in sorted(entries.items()))
    written = []
    for rel, text in ((MS_REGISTRY, _HEADER + body), (f"{MS_CASES_DIR}/{slug_of(plan.op)}.yaml", _case_text(
            plan, layout, names, ms_cases(plan) if cases is None else cases))):
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


def _case_text(plan: Plan, layout: Layout, names: Sequence[str], cases: List[Dict[str, Any]]) -> str:
    head = (f"# MindSpore cases of {plan.op}, written by `hp-agent dist-op dev` from the confirmed plan "
            f"{layout.plans_dir}/{slug_of(plan.op)}.md\n# (read by tests/st/mindspore/generated/checks.py, "
            "in MindSpore launch 2): change the plan and re-run dev.\n")
    lines = [dump_yaml({"op": plan.op, "names": list(names)}).rstrip(), "cases:"]
    lines += [f"- {_flow(c)}" for c in cases]
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
        files = write_frontend(plan, layout, names, planned_entry(plan), check.results[names[0]].get("cases"))
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


# ---------------------------------------------------------------------- the sweep over every pipeline op
_SPACES = ("", "nn.functional", "special", "linalg")


def candidates(op: str) -> List[str]:
    """``mindspore.mint`` names that may be ``op``'s counterpart, its own namespace first: ``torch.special.x``
    -> ``mint.special.x``, ``mint.x``; ``torch.linalg.x`` -> ``mint.linalg.x``, ``mint.x``;
    ``torch.nn.functional.x`` -> ``mint.nn.functional.x``, ``mint.x``; ``torch.x`` -> ``mint.x`` then
    ``mint.nn.functional.x``/``mint.special.x``/``mint.linalg.x``; ``Tensor.x`` -> ``mint.x``. Whether one
    really is the counterpart is for the kernel check (same arguments, same values and gradients)."""
    parts = op.split(".")
    base = parts[-1]
    if parts[0] == "Tensor":
        spaces: Sequence[str] = ("",)
    else:
        own = ".".join(parts[1:-1])
        spaces = (own, "") if own else _SPACES
    out: List[str] = []
    for space in spaces:
        name = "mindspore.mint." + (f"{space}." if space else "") + base
        if name not in out:
            out.append(name)
    return out


def _own(op: str) -> str:
    """The candidate in ``op``'s own namespace (``torch.cross`` -> ``mindspore.mint.cross``)."""
    return candidates(op)[0]


def ops_candidate(op: str) -> str:
    """``op``'s ``mindspore.ops`` candidate (``torch.special.zeta`` -> ``mindspore.ops.zeta``): the frontend
    when no ``mindspore.mint`` counterpart passes (many ``mint`` functions have no CPU kernel in 2.10)."""
    return "mindspore.ops." + op.rsplit(".", 1)[-1]


def sweep_jobs(plans: Sequence[Plan]) -> List[Dict[str, Any]]:
    """One job per (plan, candidate); a name that is another op's own-namespace counterpart goes to that op
    only (``mint.cross`` is ``torch.cross``'s, not ``torch.linalg.cross``'s)."""
    owners = {_own(p.op): p.op for p in plans}
    jobs = []
    for plan in plans:
        names = candidates(plan.op) + [n for n in mint_names(plan) if n not in candidates(plan.op)]
        names += [] if ops_candidate(plan.op) in names else [ops_candidate(plan.op)]
        for name in names:
            if owners.get(name, plan.op) != plan.op:
                continue
            jobs.append({"key": f"{plan.op}|{name}", "torch": plan.op, "mint": name, "max_cases": MAX_CASES,
                         "cases": list(plan.meta.get("st_cases") or [])})
    return jobs


def pipeline_plans(layout: Layout) -> List[Plan]:
    """The confirmed plans behind the pipeline's registry entries (``generated.yaml``'s ``doc`` fields)."""
    from hp_agent.dist_op.plan import load_plan
    target = layout.path(layout.registry_yaml)
    entries = yaml.safe_load(target.read_text(encoding="utf-8")) or {}
    docs = sorted({spec.get("doc") for spec in entries.values() if isinstance(spec, dict) and spec.get("doc")})
    return [load_plan(layout.path(doc)) for doc in docs if layout.path(doc).is_file()]


def sweep(layout: Layout, plans: Optional[Sequence[Plan]] = None,
          progress: Optional[Callable[[Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """Kernel-check every mint candidate of every pipeline op (default: :func:`pipeline_plans`) in as few
    MindSpore processes as possible. Returns ``ops``, ``rows`` (existing counterparts only, sorted),
    ``seconds``, ``processes`` and ``error``."""
    plans = list(pipeline_plans(layout) if plans is None else plans)
    check = run_jobs(sweep_jobs(plans), layout, timeout=600.0, progress=progress)
    rows = sorted((r for r in check.results.values() if "does not exist here" not in r.get("error", "")),
                  key=lambda r: (r["op"], r["mint"]))
    hand = registered_elsewhere(layout)
    for r in rows:
        if r["mint"] in hand:
            r["registered"] = hand[r["mint"]]
    return {"ops": len(plans), "rows": rows, "seconds": round(check.seconds, 1), "processes": check.processes,
            "error": check.error}


def sweep_counts(result: Dict[str, Any]) -> Dict[str, int]:
    """Per namespace (``mint``, ``ops``): ops with a counterpart, with a CPU kernel, with torch's values, passing
    (values and gradients); then ops passing in either and those with a name no hand-written file registers."""
    rows = result["rows"]

    def ops(pred, space=""):
        return len({r["op"] for r in rows if r["mint"].startswith(f"mindspore.{space}") and pred(r)})
    out = {"ops_checked": result["ops"]}
    for space in ("mint", "ops"):
        out.update({f"{space}_ops_with_counterpart": ops(lambda r: True, space),
                    f"{space}_names": sum(1 for r in rows if r["mint"].startswith(f"mindspore.{space}.")),
                    f"{space}_ops_with_cpu_kernel": ops(lambda r: r["kernel"] == "yes", space),
                    f"{space}_ops_values_equal": ops(lambda r: r["forward"] == "equal", space),
                    f"{space}_ops_passing": ops(lambda r: r["ok"], space)})
    out["ops_passing"] = ops(lambda r: r["ok"])
    out["ops_new_frontends"] = ops(lambda r: r["ok"] and not r.get("registered"))
    return out


def sweep_markdown(result: Dict[str, Any], header: str = "") -> str:
    """The sweep as a Markdown table (op, MindSpore name, CPU kernel, values, gradients, MindSpore's error)."""
    c = sweep_counts(result)
    lines = [header or "# MindSpore counterparts of the pipeline's ops (measured)", "",
             "Written by `hp-agent dist-op ms-sweep --markdown` (see `docs/agent/dist-op-pipeline.md`, section "
             "MindSpore frontends); MindSpore 2.10 on CPU against torch.", ""]
    for space in ("mint", "ops"):
        lines.append(f"- `mindspore.{space}`: {c[f'{space}_ops_with_counterpart']} of {c['ops_checked']} ops have a "
                     f"counterpart ({c[f'{space}_names']} names), {c[f'{space}_ops_with_cpu_kernel']} a CPU kernel, "
                     f"{c[f'{space}_ops_values_equal']} torch's values, {c[f'{space}_ops_passing']} torch's values "
                     "and gradients;")
    lines += [f"- {c['ops_passing']} ops pass in either, {c['ops_new_frontends']} with a name no hand-written "
              f"registry file holds; {result['processes']} MindSpore process(es), {result['seconds']} s.", "",
              "| op | MindSpore name | CPU kernel | values | gradients | MindSpore's error / why not |",
              "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        error = (r.get("error") or "").replace("|", "\\|").replace("\n", " ")[:160]
        if r.get("registered"):
            error = f"registered by hand ({r['registered']}) " + error
        lines.append(f"| `{r['op']}` | `{r['mint'][len('mindspore.'):]}` | {r['kernel'] or '?'} | "
                     f"{r['forward'] or '-'} | {r['grad'] or '-'} | {error} |")
    return "\n".join(lines) + "\n"


def _chosen(plan: Plan, mine: List[Dict[str, Any]], claimed: set) -> List[str]:
    """The frontends to generate for ``plan`` from its sweep rows: the passing mint names (candidate order),
    else its passing ``mindspore.ops`` name; never a hand-registered name or one another op claimed."""
    order = candidates(plan.op)
    good = [r["mint"] for r in mine if r["ok"] and not r.get("registered") and r["mint"] not in claimed]
    mint = sorted((n for n in good if n.startswith("mindspore.mint.")),
                  key=lambda n, order=order: order.index(n) if n in order else len(order))
    return mint or [n for n in good if n.startswith("mindspore.ops.")][:1]


def _write_names(plan: Plan, chosen: List[str], unusable: Dict[str, str]) -> None:
    """Record ``chosen`` (and the failed candidates) in the plan's MindSpore frontend; save when changed."""
    ms = plan.meta.setdefault("frontends", {}).setdefault("mindspore", {})
    old = list(ms.get("names") or [])
    names = chosen + ([n for n in old if n.startswith("mindspore.ops.") and n not in chosen]
                      if chosen[0].startswith("mindspore.mint.") else [])
    if names != old or (ms.get("unusable") or {}) != unusable:
        ms["names"] = names
        if unusable:
            ms["unusable"] = unusable
        plan.save()


def record_sweep(result: Dict[str, Any], plans: Sequence[Plan]) -> List[Plan]:
    """Write the sweep's findings into the plans of the ops with a passing counterpart (see :func:`_chosen`):
    ``frontends.mindspore.names`` = the names to generate (plus the analysis' ``mindspore.ops`` name when a
    mint name was chosen) and ``frontends.mindspore.unusable`` = MindSpore's words for the candidates that
    failed. Analysis data only: the plans become stale until a person confirms them (``confirm --batch FILE
    --set frontends.mindspore.in_scope=true``). An ``ops`` name shared by two ops (``torch.cross`` and
    ``torch.linalg.cross``) goes to the first (``torch.*`` before the namespaces). Returns every plan with a
    passing counterpart (saved when changed)."""
    rows: Dict[str, List[Dict[str, Any]]] = {}
    for r in result["rows"]:
        rows.setdefault(r["op"], []).append(r)
    passing, claimed = [], set()
    for plan in sorted(plans, key=lambda p: (p.op.count("."), p.op)):
        mine = rows.get(plan.op, [])
        chosen = _chosen(plan, mine, claimed)
        if not chosen:
            continue
        claimed.update(chosen)
        _write_names(plan, chosen, {r["mint"]: r["detail"] for r in mine if not r["ok"]})
        passing.append(plan)
    return sorted(passing, key=lambda p: [q.op for q in plans].index(p.op))
