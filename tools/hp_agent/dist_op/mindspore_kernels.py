# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The MindSpore kernel check's child process: torch and MindSpore side by side, one process for many ops.

``python -m hp_agent.dist_op.mindspore_kernels`` reads a JSON list of jobs on stdin (``key``, ``torch``: the
plan's torch name, ``mint``: a ``mindspore.mint`` name, ``cases``: the plan's ST cases) and prints, per job,
``HP-START <key>`` before and ``HP-JOB <result>`` after it (flushed, so a parent that sees the process die
knows which job killed it). Per job:

1. the plan's cases become MindSpore cases (:mod:`hyper_parallel.testing.mindspore_op_cases`): shape cases
   as they are, OpInfo cases (``opinfo`` + ``sample``) materialised into shapes, fixed integer values and an
   argument template; the smallest ``max_cases`` that convert are kept;
2. the mint function runs each case on the same numpy inputs as torch: no such function, no CPU kernel
   (MindSpore's own error), a call error, values that differ, or equal;
3. for a differentiable case the input gradients of ``sum(out * w)`` are compared the same way.

MindSpore 2.10's PyNative executor keeps a failed op's error and raises it again from every later op until
it is synchronised: every failure is followed by ``_pynative_executor.sync()`` so one missing kernel does not
poison the jobs after it.
"""
from __future__ import annotations

import json
import re
import sys
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hyper_parallel.testing.mindspore_op_cases import (build_call, case_arrays, drop_pending_error, float_inputs,
                                                      leaves)

_NO_KERNEL = re.compile(r"unregistered|not support\w* on CPU|on CPU .*not support|CPU kernel|Unsupported op|"
                        r"only supports? Ascend|Not implement exception",
                        re.IGNORECASE)
_MAX_VALUES = 256  # fixed values of a non-float OpInfo tensor kept in a case file
_MAX_ELEMENTS = 2048  # per case (all inputs): the cases ride the gate's MindSpore launch 2 (tiny shapes)


class Unsupported(ValueError):
    """A plan case that cannot be written as a MindSpore case (the reason is the message)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {(text[0] if text else '')[:240]}"


def _resolve(name: str) -> Any:
    import torch
    import mindspore
    root, parts = (torch.Tensor, name.split(".")[1:]) if name.startswith("Tensor.") else \
        (torch, name.split(".")[1:]) if name.startswith("torch.") else (mindspore, name.split(".")[1:])
    obj: Any = root
    for part in parts:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _literal(value: Any, tensors: List[Any]) -> Any:
    import torch
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"t": len(tensors) - 1}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):  # torch.Size too, not named tuples
        return [_literal(v, tensors) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise Unsupported(f"argument {value!r} ({type(value).__name__}) has no MindSpore spelling")


def _check_tensors(tensors: List[Any]) -> None:
    """Refuse what a MindSpore case cannot carry (the reason names it)."""
    if any(t.is_complex() for t in tensors):
        raise Unsupported("a complex tensor input")
    if any(t.numel() == 0 for t in tensors):
        raise Unsupported("an empty tensor (MindSpore refuses zero-size inputs)")
    if sum(t.numel() for t in tensors) > _MAX_ELEMENTS:
        raise Unsupported(f"more than {_MAX_ELEMENTS} input elements (the gate runs tiny shapes)")
    if any(not t.is_floating_point() and t.numel() > _MAX_VALUES for t in tensors):
        raise Unsupported(f"an integer tensor of more than {_MAX_VALUES} elements")


def _opinfo_case(case: Dict[str, Any]) -> Dict[str, Any]:
    from hyper_parallel.testing.op_cases import _opinfo_sample
    _, sample = _opinfo_sample(case["opinfo"], int(case["sample"]))
    tensors: List[Any] = []
    args = [_literal(a, tensors) for a in [sample.input, *sample.args]]
    by_keyword: List[Any] = []
    kwargs = {k: _literal(v, by_keyword) for k, v in sample.kwargs.items()}
    if by_keyword:
        raise Unsupported("a tensor passed by keyword")
    out: Dict[str, Any] = {"shapes": [list(t.shape) for t in tensors], "args": args, "kwargs": kwargs}
    dtypes = [str(t.dtype).replace("torch.", "") for t in tensors]
    _check_tensors(tensors)
    fixed = {i: t.tolist() for i, t in enumerate(tensors) if not t.is_floating_point()}
    if any(d != "float32" for d in dtypes):
        out["dtypes"] = dtypes
    if fixed:
        out["values"] = fixed
    if case.get("grad") is False or not any(t.is_floating_point() for t in tensors):
        out["grad"] = False
    return out


def _convert(case: Dict[str, Any]) -> Dict[str, Any]:
    if "opinfo" in case:
        return _opinfo_case(case)
    item: Dict[str, Any] = {"shapes": [list(s) for s in (case.get("shapes") or [case["shape"]])],
                            "kwargs": dict(case.get("kwargs") or {})}
    for key in ("low", "high"):
        if key in case:
            item[key] = case[key]
    if case.get("grad") is False:
        item["grad"] = False
    return item


def convert_cases(cases: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], List[str]]:
    """(the MindSpore cases, smallest first for OpInfo samples; why the others were dropped)."""
    done: List[Dict[str, Any]] = []
    why = []
    for case in cases:
        try:
            item = _convert(case)
            if item not in done:  # OpInfo lists some samples twice
                done.append(item)
        except Exception as exc:  # pylint: disable=broad-except  # a case that cannot convert is reported
            why.append(f"{case.get('opinfo', case.get('shape'))} sample {case.get('sample', '')}: {exc}")
    if any("args" in c for c in done):
        done.sort(key=lambda c: sum(int(np.prod(s)) for s in c["shapes"]))
    return done, why


def _equal(got: Any, want: Any) -> Optional[str]:
    import torch
    if isinstance(want, torch.Tensor):
        if not hasattr(got, "asnumpy"):
            return f"returns {type(got).__name__}, torch a tensor"
        a, b = got.asnumpy(), want.detach().numpy()
        if a.shape != b.shape:
            return f"shape {list(a.shape)} != torch's {list(b.shape)}"
        kind = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
        if not np.allclose(a.astype(kind), b.astype(kind), rtol=1e-4, atol=1e-5, equal_nan=True):
            return f"values differ (max abs diff {np.nanmax(np.abs(a.astype(kind) - b.astype(kind))):.3g})"
        return None
    value = got.asnumpy().item() if hasattr(got, "asnumpy") and got.size == 1 else got
    return None if value == want or np.isclose(value, want) else f"returns {value!r}, torch {want!r}"


def _compare(got: Any, want: Any) -> Optional[str]:
    g, w = leaves(got), leaves(want)
    if len(g) != len(w):
        return f"{len(g)} outputs, torch {len(w)}"
    for k, (a, b) in enumerate(zip(g, w)):
        bad = _equal(a, b)
        if bad:
            return f"output {k}: {bad}" if len(w) > 1 else bad
    return None


def _weights(want: Any, rng: np.random.Generator) -> List[Optional[np.ndarray]]:
    import torch
    return [rng.standard_normal(tuple(x.shape)).astype(np.float32)
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.requires_grad else None
            for x in leaves(want)]


def _grads(case: Dict[str, Any], fn_t: Any, fn_m: Any, arrays: List[np.ndarray], rng) -> Optional[str]:
    import torch
    import mindspore as ms
    floats = float_inputs(case)
    ts = [torch.tensor(a, requires_grad=i in floats) for i, a in enumerate(arrays)]
    want = build_call(case, fn_t)(*ts)
    weights = _weights(want, rng)
    if not any(w is not None for w in weights):
        return "n/a"
    sum(((x * torch.tensor(w)).sum() for x, w in zip(leaves(want), weights) if w is not None)).backward()
    fixed = [ms.Tensor(a) for a in arrays]
    call = build_call(case, fn_m)

    def loss(*xs):
        full = list(fixed)
        for i, x in zip(floats, xs):
            full[i] = x
        outs = leaves(call(*full))
        return sum((o * ms.Tensor(w)).sum() for o, w in zip(outs, weights) if w is not None)
    grads = ms.grad(loss, grad_position=tuple(range(len(floats))))(*[fixed[i] for i in floats])
    grads = grads if isinstance(grads, tuple) else (grads,)
    for i, g in zip(floats, grads):
        ref = ts[i].grad if ts[i].grad is not None else torch.zeros_like(ts[i])
        if not np.allclose(g.asnumpy(), ref.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True):
            return f"gradient of input {i} differs"
    return None


def _run_case(case: Dict[str, Any], k: int, fn_t: Any, fn_m: Any, res: Dict[str, Any]) -> bool:
    """One case into ``res`` (kernel/forward/grad/error); False when the job should stop."""
    import torch
    import mindspore as ms
    arrays = case_arrays(case, 100 + k)
    want = build_call(case, fn_t)(*[torch.tensor(a) for a in arrays])
    try:
        got = build_call(case, fn_m)(*[ms.Tensor(a) for a in arrays])
        bad = _compare(got, want)
    except Exception as exc:  # pylint: disable=broad-except  # MindSpore's words are the result
        drop_pending_error()
        res["kernel"] = "no" if _NO_KERNEL.search(str(exc)) else "?"
        res["forward"], res["grad"], res["error"] = "not run", "", _first_line(exc)
        return False
    res["kernel"] = "yes"
    if bad:
        res["forward"], res["grad"], res["error"] = "differs", "", bad
        return False
    res["forward"] = "equal"
    if case.get("grad", True) is False:
        res["grad"] = res.get("grad") or "n/a"
        return True
    try:
        bad = _grads(case, fn_t, fn_m, arrays, np.random.default_rng(k))
    except Exception as exc:  # pylint: disable=broad-except
        drop_pending_error()
        res["grad"], res["error"] = ("no CPU kernel" if _NO_KERNEL.search(str(exc)) else "error"), _first_line(exc)
        return False
    if bad == "n/a":
        res["grad"] = res.get("grad") or "n/a"
        return True
    res["grad"] = "differs" if bad else "equal"
    res["error"] = bad or ""
    return not bad


def _torch_refuses(case: Dict[str, Any], k: int, fn_t: Any) -> Optional[str]:
    import torch
    try:
        build_call(case, fn_t)(*[torch.tensor(a) for a in case_arrays(case, 100 + k)])
    except Exception as exc:  # pylint: disable=broad-except  # such a case is no evidence about MindSpore
        return f"torch refuses {case['shapes']}: {_first_line(exc)}"
    return None


def run_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """One (torch op, mint name) job; see the module docstring."""
    start = time.perf_counter()
    res: Dict[str, Any] = {"key": job["key"], "op": job["torch"], "mint": job["mint"], "kernel": "",
                           "forward": "", "grad": "", "error": "", "cases": []}
    fn_m, fn_t = _resolve(job["mint"]), _resolve(job["torch"])
    if fn_m is None or fn_t is None:
        res["error"] = f"{job['mint'] if fn_m is None else job['torch']} does not exist here"
    else:
        cases, dropped = convert_cases(job["cases"])
        for case in cases:
            if len(res["cases"]) == int(job.get("max_cases", 2)):
                break
            why = _torch_refuses(case, len(res["cases"]), fn_t)
            if why:
                dropped.append(why)
                continue
            res["cases"].append(case)
            if not _run_case(case, len(res["cases"]) - 1, fn_t, fn_m, res):
                break
        if not res["cases"]:
            res["error"] = "no ST case to run" + (f" ({'; '.join(dropped)[:300]})" if dropped else "")
        elif res["grad"] == "":
            res["grad"] = "n/a" if res["forward"] == "equal" else ""
    res["ok"] = res["forward"] == "equal" and res["grad"] in ("equal", "n/a")
    res["seconds"] = round(time.perf_counter() - start, 2)
    return res


def main() -> int:
    """Run the jobs on stdin; one ``HP-START``/``HP-JOB`` line pair per job on stdout."""
    warnings.simplefilter("ignore")
    jobs = json.loads(sys.stdin.read())
    import torch  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    import mindspore  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    for job in jobs:
        print("HP-START " + json.dumps(job["key"]), flush=True)
        try:
            res = run_job(job)
        except Exception as exc:  # pylint: disable=broad-except  # a torch-side failure is still a row
            drop_pending_error()
            res = {"key": job["key"], "op": job["torch"], "mint": job["mint"], "ok": False, "kernel": "",
                   "forward": "", "grad": "", "error": f"check failed: {_first_line(exc)}", "cases": [], "seconds": 0.0}
        print("HP-JOB " + json.dumps(res, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
