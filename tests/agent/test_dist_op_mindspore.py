# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore frontends written by ``hp-agent dist-op dev`` (``hp_agent.dist_op.mindspore_frontend``).

* the registry entry of each ``mindspore.mint`` counterpart shares the torch names' rule class, module and
  options, loads through the registry, and a name a hand-written file already holds is not generated twice;
* the case file carries the plan's first ST cases (shapes, kwargs, grad) in the format the in-rank checks read;
* the kernel check runs in ONE MindSpore process: ``mint.nn.functional.glu`` matches torch forward and
  backward, ``mint.acos`` has no CPU kernel in MindSpore 2.10 and is reported with MindSpore's own error.
"""
import yaml

from hyper_parallel.core.ops.registry import load_yaml_file

from hp_agent.dist_op.layout import Layout
from hp_agent.dist_op.mindspore_frontend import (MS_CASES_DIR, MS_REGISTRY, check_kernels, frontend_for,
                                                 mint_names, ms_cases, write_frontend)
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
    check = check_kernels([glu, acos], layout)
    assert not check.error, check.error
    assert check.ok("mindspore.mint.nn.functional.glu"), check.results
    assert "forward and backward" in check.results["mindspore.mint.nn.functional.glu"]["detail"]
    assert not check.ok("mindspore.mint.acos")
    assert "unregistered" in check.results["mindspore.mint.acos"]["detail"]  # MindSpore's own words
    why = frontend_for(acos, check, layout)
    assert "mindspore.mint.acos" in why and "in_scope=false" in why
    assert frontend_for(glu, check, layout) is None
