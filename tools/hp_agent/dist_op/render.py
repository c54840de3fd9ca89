# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""jinja2 rendering of every file the pipeline writes (plan bodies, rule modules, YAML, tests, reports)."""
from __future__ import annotations

import pprint
from pathlib import Path
from typing import Any, Dict, List

import jinja2
import yaml

__all__ = ["render", "render_body", "TEMPLATES"]

TEMPLATES = Path(__file__).parent / "templates"
_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                          keep_trailing_newline=True, trim_blocks=False, lstrip_blocks=False)
_ENV.filters["py"] = lambda value: pprint.pformat(value, width=110, sort_dicts=False)
# YAML flow text that reads back as the same values (JSON's ``1e-12`` would read back as a string in YAML 1.1)
_ENV.filters["yaml_flow"] = lambda value: yaml.safe_dump(value, default_flow_style=True, width=10**6,
                                                         sort_keys=False).strip()


def render(template: str, **context: Any) -> str:
    """Render ``templates/<template>`` with ``context`` (undefined names are errors)."""
    return _ENV.get_template(template).render(**context)


def _cell(case: Any, combo: tuple) -> str:
    if case.probe is None:
        return "error"
    found = case.out_on(combo)
    if found:
        return " ".join(found)
    if case.scan and combo[0].startswith("S("):
        return f"scan:{case.scan}"
    if case.pnorm and combo[0].startswith("S("):
        return "pnorm-expand"
    return "-"


def _fits(case: Any, combo: tuple) -> bool:
    return all(not p.startswith("S(") or int(p[2:-1]) < case.ndim for p in combo)


def _cells(case: Any, cols: List[tuple]) -> List[str]:
    return [_cell(case, combo) if _fits(case, combo) else "n/a" for combo in cols]


def _columns(deriv: Any, ndim: int) -> List[tuple]:
    """Input-placement combinations shown in the probe table (pairs for two-tensor ops)."""
    singles = ["R"] + [f"S({d})" for d in range(ndim)] + ["P(sum)"]
    if getattr(deriv, "n_tensors", 1) == 2:
        return [("R", "R")] + [(f"S({d})", f"S({d})") for d in range(ndim)] + \
            [("S(0)", "R"), ("R", "S(0)"), ("P(sum)", "P(sum)"), ("P(sum)", "R"), ("R", "P(sum)")]
    return [(p,) for p in singles]


def _summary(meta: Dict[str, Any]) -> str:
    deriv = meta["derivation"]
    lines = []
    if deriv["kind"] == "synthesised":
        return ("- No closed form from the probe; the strategies below were synthesised (section \"Synthesised "
                "strategies\") and the registry entry executes them as data: Partial inputs are kept exactly where "
                "the table has a row for them.")
    if deriv["kind"] == "elementwise" and deriv.get("tensors") == 2:
        lines.append("- Both operands sharded on the same dim keep it; the output is sharded on that dim.")
        lines.append(f"- Partial mode (from the (P,P), (P,R), (R,P) probes): `{deriv.get('partial_mode')}`.")
        return "\n".join(lines)
    if deriv["kind"] == "elementwise":
        lines.append("- Every tensor dim may stay sharded; the output is sharded on the same dim.")
    elif deriv["kind"] == "except_dim":
        lines.append(f"- Every dim except the one named by `{deriv['dim_param']}` may stay sharded (same output dim).")
        if deriv["scan_combine"]:
            lines.append(f"- Sharding `{deriv['dim_param']}` works with an expand: local scan combined "
                         f"(`{deriv['scan_combine']}`) with the carry of the earlier shards.")
        elif deriv.get("expand") == "pnorm":
            lines.append(f"- Sharding `{deriv['dim_param']}` works with the `pnorm` expand: the p-norm's sum "
                         "all-reduced across shards reproduced the op in simulation.")
        else:
            lines.append(f"- A shard of `{deriv['dim_param']}` must be gathered first (Replicate).")
        if deriv["shape_rule"] == "minus_n":
            lines.append(f"- The output loses `n` entries along `{deriv['dim_param']}`.")
        if deriv["shape_rule"] == "halved":
            lines.append(f"- The output halves along `{deriv['dim_param']}` (its size must be even).")
    else:
        lines.append("- No closed form found: see the table and the open questions.")
    lines.append("- `Partial(sum)` inputs " + ("stay `Partial(sum)` (the op is linear)." if deriv["linear"]
                                               else "are reduced first (the op is not linear)."))
    return "\n".join(lines)


def render_body(meta: Dict[str, Any], deriv: Any, ifaces: Dict[str, Any], questions: List[str]) -> str:
    """The readable part of a plan (after the front matter)."""
    from hp_agent.dist_op.plan import slug_of
    cases = [c for c in deriv.cases if c.probe is not None]
    ndim = max((c.ndim for c in cases), default=0)
    combos = _columns(deriv, ndim)
    cols = [", ".join(c) for c in combos]
    rows = [{"shape": list(c.shape), "kwargs": c.kwargs or "defaults", "cells": _cells(c, combos)}
            for c in cases[:16]]
    errors = [{"shape": list(c.shape), "kwargs": c.kwargs, "error": c.error} for c in deriv.cases if c.error][:6]
    shapes = sorted({tuple(c.shape) for c in deriv.cases})
    varying = sorted({k for c in deriv.cases for k in c.kwargs})
    return render("plan_body.md.j2", meta=meta, deriv=deriv, ifaces=ifaces, questions=questions, cols=cols,
                  table_rows=rows, errors=errors, shapes=[list(s) for s in shapes], varying=varying,
                  summary=_summary(meta), plan_path=f"plans/{slug_of(meta['op'])}.md")
