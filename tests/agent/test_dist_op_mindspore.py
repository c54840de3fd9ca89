# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore frontends written by ``hp-agent dist-op dev`` (``hp_agent.dist_op.mindspore_frontend``).

* the registry entry of each ``mindspore.mint`` counterpart shares the torch names' rule class, module and
  options, loads through the registry, and a name a hand-written file already holds is not generated twice;
* the case file carries the plan's first ST cases (shapes, kwargs, grad) in the format the in-rank checks read;
* the kernel check runs in ONE MindSpore process: ``mint.nn.functional.glu`` matches torch forward and
  backward, ``mint.acos`` has no CPU kernel in MindSpore 2.10 and is reported with MindSpore's own error, and
  a counterpart checked after that failure still passes (MindSpore re-raises a failed op's error from later ops
  until its executor is synchronised);
* the sweep maps torch names to mint candidates (and the ``mindspore.ops`` name), converts OpInfo samples into
  MindSpore cases, records the passing names in the plans (``ops`` only where no mint name passes), and a child
  process that dies costs only the job it was running.
"""
import json
import sys

import yaml

from hyper_parallel.core.ops.registry import load_yaml_file

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.mindspore_frontend import (MS_CASES_DIR, MS_REGISTRY, candidates, check_kernels, frontend_for,
                                                 mint_names, ms_cases, record_sweep, run_jobs, sweep, sweep_counts,
                                                 sweep_markdown, write_frontend)
from hp_agent.dist_op.plan import Plan

GLU_ENTRY = {"rule": "DimLocalRule", "module": "hyper_parallel.core.ops.rules.planned",
             "options": {"dim_param": "dim", "dim_position": 1, "dim_default": -1, "linear": False,
                         "shape": "halved"}}


def _plan(op, names, st_cases):
    meta = {"op": op, "status": "confirmed", "path": "C",
            "frontends": {"torch": [op], "mindspore": {"installed": True, "names": names, "in_scope": True}},
            "st_cases": st_cases}
    return Plan(meta, "")


def _layout(tmp_path):
    (tmp_path / MS_REGISTRY).parent.mkdir(parents=True)
    (tmp_path / MS_REGISTRY).parent.joinpath("mindspore_elementwise.yaml").write_text(
        "mindspore.mint.sinh: {rule: ElementwiseRule, module: hyper_parallel.core.ops.rules.elementwise}\n")
    return Layout(tmp_path)


def test_entries_share_the_torch_rule_and_load_through_the_registry(tmp_path):
    layout = _layout(tmp_path)
    glu = _plan("torch.nn.functional.glu", ["mindspore.mint.nn.functional.glu", "mindspore.ops.glu"],
                [{"shape": [4, 6], "kwargs": {}, "native_min": 2}, {"shape": [4, 6], "kwargs": {"dim": 0}},
                 {"shape": [5, 6], "kwargs": {}}])
    assert mint_names(glu, layout) == ["mindspore.mint.nn.functional.glu"]  # ops.* names are not mint frontends
    written = write_frontend(glu, layout, mint_names(glu, layout), GLU_ENTRY)
    assert written == [MS_REGISTRY, f"{MS_CASES_DIR}/torch.nn.functional.glu.yaml"]
    (entry,) = load_yaml_file(tmp_path / MS_REGISTRY)
    assert (entry.name, entry.rule, entry.module, entry.options) == (
        "mindspore.mint.nn.functional.glu", GLU_ENTRY["rule"], GLU_ENTRY["module"], GLU_ENTRY["options"])
    assert type(entry.rule_instance()).__name__ == "DimLocalRule" and entry.doc == "plans/torch.nn.functional.glu.md"
    cases = yaml.safe_load((tmp_path / MS_CASES_DIR / "torch.nn.functional.glu.yaml").read_text())
    assert cases == {"op": "torch.nn.functional.glu", "names": ["mindspore.mint.nn.functional.glu"],
                     "cases": [{"shapes": [[4, 6]], "kwargs": {}}, {"shapes": [[4, 6]], "kwargs": {"dim": 0}}]}
    assert write_frontend(glu, layout, mint_names(glu, layout), GLU_ENTRY) == []  # unchanged: nothing rewritten
    # a second op joins the same file; a name a hand-written file holds is never generated twice
    sinh = _plan("torch.sinh", ["mindspore.mint.sinh"], [{"shape": [4, 6], "kwargs": {}}])
    assert mint_names(sinh, layout) == []
    assert "no new mindspore.mint counterpart" in frontend_for(sinh, check_kernels([], layout), layout)
    diff = _plan("torch.diff", ["mindspore.mint.diff"], [{"shape": [4, 6], "kwargs": {}, "grad": False}])
    write_frontend(diff, layout, ["mindspore.mint.diff"], {"rule": "DimLocalRule", "module": GLU_ENTRY["module"],
                                                           "options": {"dim_position": 2, "shape": "minus_n",
                                                                       "n_position": 1}})
    assert sorted(e.name for e in load_yaml_file(tmp_path / MS_REGISTRY)) == [
        "mindspore.mint.diff", "mindspore.mint.nn.functional.glu"]
    assert ms_cases(diff) == [{"shapes": [[4, 6]], "kwargs": {}, "grad": False}]


def test_kernel_check_runs_every_counterpart_in_one_mindspore_process(tmp_path):
    layout = Layout(tmp_path)
    glu = _plan("torch.nn.functional.glu", ["mindspore.mint.nn.functional.glu"],
                [{"shape": [4, 6], "kwargs": {"dim": 0}}])
    acos = _plan("torch.acos", ["mindspore.mint.acos"], [{"shape": [4, 6], "kwargs": {}}])
    erfc = _plan("torch.erfc", ["mindspore.mint.erfc"], [{"shape": [3, 4], "kwargs": {}}])
    check = check_kernels([acos, glu, erfc], layout)
    assert not check.error, check.error
    assert check.ok("mindspore.mint.nn.functional.glu"), check.results
    assert "forward and backward" in check.results["mindspore.mint.nn.functional.glu"]["detail"]
    assert not check.ok("mindspore.mint.acos")
    assert "unregistered" in check.results["mindspore.mint.acos"]["detail"]  # MindSpore's own words
    why = frontend_for(acos, check, layout)
    assert "mindspore.mint.acos" in why and "in_scope=false" in why
    assert frontend_for(glu, check, layout) is None
    assert check.ok("mindspore.mint.erfc"), check.results  # checked after acos failed: not poisoned by it
    assert check.processes == 1


def test_candidates_follow_the_torch_namespace_first():
    assert candidates("torch.special.erfc") == ["mindspore.mint.special.erfc", "mindspore.mint.erfc"]
    assert candidates("torch.linalg.norm") == ["mindspore.mint.linalg.norm", "mindspore.mint.norm"]
    assert candidates("torch.nn.functional.glu") == ["mindspore.mint.nn.functional.glu", "mindspore.mint.glu"]
    assert candidates("Tensor.sinh") == ["mindspore.mint.sinh"]
    assert candidates("torch.selu") == ["mindspore.mint.selu", "mindspore.mint.nn.functional.selu",
                                        "mindspore.mint.special.selu", "mindspore.mint.linalg.selu"]


def test_sweep_converts_opinfo_samples_and_records_the_passing_names(tmp_path):
    layout = Layout(tmp_path)
    plans = [_plan("torch.special.erfc", ["mindspore.mint.erfc"], [{"shape": [3, 4], "kwargs": {}}]),
             _plan("torch.floor_divide", [], [{"opinfo": "floor_divide", "sample": 0, "grad": False},
                                              {"opinfo": "floor_divide", "sample": 1, "grad": False}]),
             _plan("torch.acos", ["mindspore.mint.acos"], [{"shape": [4, 6], "kwargs": {}, "low": 0.1, "high": 0.9}])]
    for k, plan in enumerate(plans):
        plan.path = tmp_path / f"plan{k}.md"
        plan.meta["frontends"]["mindspore"]["in_scope"] = False
    result = sweep(layout, plans)
    rows = {r["mint"]: r for r in result["rows"]}
    assert result["processes"] == 1 and not result["error"], result
    assert set(rows) == {"mindspore.mint.special.erfc", "mindspore.mint.erfc", "mindspore.mint.floor_divide",
                         "mindspore.mint.acos", "mindspore.ops.erfc", "mindspore.ops.floor_divide",
                         "mindspore.ops.acos"}  # candidates MindSpore does not have are not rows
    assert rows["mindspore.mint.special.erfc"]["ok"] and rows["mindspore.mint.special.erfc"]["grad"] == "equal"
    floor = rows["mindspore.mint.floor_divide"]
    assert floor["ok"] and floor["grad"] == "n/a" and len(floor["cases"]) == 2, floor
    assert all(c["args"][0] == {"t": 0} and c["grad"] is False for c in floor["cases"])  # OpInfo sample -> template
    assert rows["mindspore.mint.acos"]["kernel"] == "no" and "AcosExt" in rows["mindspore.mint.acos"]["error"]
    assert rows["mindspore.ops.acos"]["ok"], rows["mindspore.ops.acos"]  # mindspore.ops has the CPU kernel
    counts = sweep_counts(result)
    assert (counts["mint_ops_with_counterpart"], counts["mint_ops_with_cpu_kernel"], counts["mint_ops_passing"],
            counts["ops_passing"]) == (3, 2, 2, 3)
    table = sweep_markdown(result)
    assert "| `torch.acos` | `mint.acos` | no |" in table and "of 3 ops have a counterpart" in table
    passing = record_sweep(result, plans)
    assert [p.op for p in passing] == ["torch.special.erfc", "torch.floor_divide", "torch.acos"]
    saved = yaml.safe_load(plans[0].path.read_text().split("---")[1])["frontends"]["mindspore"]
    assert saved["names"] == ["mindspore.mint.special.erfc", "mindspore.mint.erfc"] and "unusable" not in saved
    acos = yaml.safe_load(plans[2].path.read_text().split("---")[1])["frontends"]["mindspore"]
    assert acos["names"] == ["mindspore.ops.acos"] and "AcosExt" in acos["unusable"]["mindspore.mint.acos"]
    assert mint_names(plans[2]) == ["mindspore.ops.acos"]  # no mint name left: the ops name is the frontend


_FAKE_CHILD = """#!{python}
import json, os, sys
for job in json.loads(sys.stdin.read()):
    print("HP-START " + json.dumps(job["key"]), flush=True)
    if job["mint"].endswith("crash"):
        os._exit(7)
    print("HP-JOB " + json.dumps({{"key": job["key"], "op": job["torch"], "mint": job["mint"], "ok": True,
                                  "kernel": "yes", "forward": "equal", "grad": "equal", "error": "",
                                  "cases": [], "pid": os.getpid()}}), flush=True)
"""


def test_a_dying_child_costs_only_the_job_it_was_running(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(_FAKE_CHILD.format(python=sys.executable))
    child.chmod(0o755)
    layout = Layout(tmp_path, python=str(child))
    jobs = [{"key": k, "torch": "torch.x", "mint": f"mindspore.mint.{k}", "cases": []} for k in ("a", "crash", "b")]
    seen = []
    check = run_jobs(jobs, layout, timeout=60, progress=lambda r: seen.append(r["key"]))
    assert check.processes == 2 and not check.error and seen == ["a", "b"]
    assert check.ok("a") and check.ok("b") and not check.ok("crash")
    assert "died on it (exit 7)" in check.results["crash"]["error"]
    assert check.results["a"]["pid"] != check.results["b"]["pid"]
    json.dumps(check.results)  # the results are plain data (the CLI prints them as JSON)
