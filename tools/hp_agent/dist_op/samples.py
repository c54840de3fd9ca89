# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Sample calls for ``verify``: per op family (keyed by the op's base name) or derived from the op's schema.

A sample is ``(args, kwargs)`` with full tensors. Shapes mix even and uneven sizes for 2 and 3 ranks.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["samples_for", "NONDETERMINISTIC_MODULES", "NONDETERMINISTIC_OPS"]

Sample = Tuple[list, dict]
NONDETERMINISTIC_MODULES = ("random_ops",)
NONDETERMINISTIC_OPS = ("empty_like", "empty", "new_empty", "empty_strided", "new_empty_strided")  # garbage


def _r(*shape, gen=None):
    import torch
    return torch.rand(shape, generator=gen) + 0.5


def _family() -> Dict[str, Callable[[], List[Sample]]]:
    import torch
    x = _r(4, 6)
    y = _r(4, 6)
    x3 = _r(2, 4, 6)
    red = [([x], {}), ([x], {"dim": 0}), ([x], {"dim": 1, "keepdim": True}), ([x3], {"dim": (0, 2)})]
    dims = [([x], {"dim": 0}), ([x], {"dim": 1}), ([x3], {"dim": -1})]
    table: Dict[str, Callable[[], List[Sample]]] = {
        "mm": lambda: [([x, _r(6, 5)], {})],
        "bmm": lambda: [([x3, _r(2, 6, 5)], {})],
        "matmul": lambda: [([x, _r(6, 5)], {}), ([x3, _r(6, 5)], {}), ([_r(6), _r(6, 5)], {})],
        "__matmul__": lambda: [([x, _r(6, 5)], {})],
        "linear": lambda: [([x, _r(5, 6), _r(5)], {}), ([x3, _r(5, 6)], {})],
        "addmm": lambda: [([_r(4, 5), x, _r(6, 5)], {}), ([_r(5), x, _r(6, 5)], {})],
        "baddbmm": lambda: [([_r(2, 4, 5), x3, _r(2, 6, 5)], {})],
        "einsum": lambda: [(["ij,jk->ik", x, _r(6, 5)], {})],
        "softmax": lambda: dims, "log_softmax": lambda: dims,
        "cumsum": lambda: dims,
        "group_norm": lambda: [([_r(2, 4, 6), 2], {}), ([_r(2, 4, 6), 2, _r(4), _r(4)], {})],
        "layer_norm": lambda: [([x, [6]], {}), ([x3, [6], _r(6), _r(6)], {})],
        "rms_norm": lambda: [([x, [6]], {})],
        "view": lambda: [([x, 24], {}), ([x, (2, 2, 6)], {}), ([x3, (8, 6)], {})],
        "reshape": lambda: [([x, (24,)], {}), ([x3, (8, 6)], {})],
        "view_as": lambda: [([x, _r(2, 12)], {})], "reshape_as": lambda: [([x, _r(2, 12)], {})],
        "flatten": lambda: [([x3], {}), ([x3, 1], {})],
        "unflatten": lambda: [([x, 1, (2, 3)], {})],
        "squeeze": lambda: [([_r(1, 6)], {}), ([_r(4, 1, 6), 1], {})],
        "unsqueeze": lambda: [([x, 0], {}), ([x, 2], {})],
        "expand": lambda: [([_r(1, 6), 4, 6], {})], "broadcast_to": lambda: [([_r(1, 6), (4, 6)], {})],
        "expand_as": lambda: [([_r(1, 6), y], {})],
        "permute": lambda: [([x3, (2, 0, 1)], {})], "transpose": lambda: [([x3, 0, 2], {})],
        "swapaxes": lambda: [([x, 0, 1], {})], "swapdims": lambda: [([x, 0, 1], {})],
        "t": lambda: [([x], {})], "movedim": lambda: [([x3, 0, 2], {})], "moveaxis": lambda: [([x3, 0, 2], {})],
        "narrow": lambda: [([x, 0, 1, 2], {}), ([x, 1, 2, 3], {})],
        "select": lambda: [([x, 0, 1], {}), ([x3, 2, 4], {})],
        "__getitem__": lambda: [([x, (slice(1, 3),)], {}), ([x, 1], {}), ([x, (slice(None), slice(0, 4, 2))], {})],
        "split": lambda: [([x, 2], {}), ([x, 3, 1], {})], "split_with_sizes": lambda: [([x, [1, 3]], {})],
        "chunk": lambda: [([x, 2], {}), ([x, 3, 1], {})], "unbind": lambda: [([x], {}), ([x, 1], {})],
        "cat": lambda: [([[x, y]], {}), ([[x, _r(4, 3)], 1], {})],
        "concat": lambda: [([[x, y]], {})], "concatenate": lambda: [([[x, y]], {})],
        "stack": lambda: [([[x, y]], {}), ([[x, y], 2], {})],
        "pad": lambda: [([x, (1, 2)], {}), ([x, (0, 0, 1, 1)], {})],
        "repeat": lambda: [([x, 2, 1], {})], "tile": lambda: [([x, (1, 2)], {})],
        "repeat_interleave": lambda: [([x, 2], {"dim": 0}), ([x, 2], {})],
        "tril": lambda: [([x], {}), ([x, 1], {})], "triu": lambda: [([x], {}), ([x, -1], {})],
        "flip": lambda: [([x, (0,)], {}), ([x, (1,)], {})], "fliplr": lambda: [([x], {})],
        "flipud": lambda: [([x], {})], "roll": lambda: [([x, 1, 0], {}), ([x, (1, 2), (0, 1)], {}), ([x, 2], {})],
        "diagonal": lambda: [([x], {}), ([x3, 0, 1, 2], {})], "diag_embed": lambda: [([x], {})],
        "sum": lambda: red, "nansum": lambda: red, "mean": lambda: red, "amax": lambda: red, "amin": lambda: red,
        "prod": lambda: [([x], {}), ([x], {"dim": 0})], "logsumexp": lambda: [([x], {"dim": 0}), ([x], {"dim": 1})],
        "max": lambda: [([x], {}), ([x], {"dim": 0}), ([x], {"dim": 1, "keepdim": True}), ([x, y], {})],
        "min": lambda: [([x], {}), ([x], {"dim": 0}), ([x, y], {})],
        "argmax": lambda: [([x], {}), ([x], {"dim": 0})], "argmin": lambda: [([x], {}), ([x], {"dim": 1})],
        "all": lambda: [([x > 0.8], {}), ([x > 0.8], {"dim": 0})], "any": lambda: [([x > 1.2], {"dim": 1})],
        "count_nonzero": lambda: [([x > 1.0], {}), ([x > 1.0], {"dim": 0})],
        "norm": lambda: [([x], {}), ([x], {"dim": 0})], "vector_norm": lambda: [([x], {}), ([x], {"dim": 1})],
        "var": lambda: [([x], {}), ([x], {"dim": 0})], "std": lambda: [([x], {}), ([x], {"dim": 1})],
        "cross_entropy": lambda: [([x, torch.tensor([0, 5, 2, 1])], {})],
        "nll_loss": lambda: [([x.log(), torch.tensor([0, 5, 2, 1])], {})],
        "where": lambda: [([x > 1.0, x, y], {})],
        "masked_fill": lambda: [([x, x > 1.0, 0.0], {})],
        "clamp": lambda: [([x, 0.7, 1.2], {})], "clip": lambda: [([x, 0.7, 1.2], {})],
        "clamp_min": lambda: [([x, 0.7], {})], "clamp_max": lambda: [([x, 1.2], {})],
        "fill_": lambda: [([x, 2.0], {})], "to": lambda: [([x, torch.float64], {})],
        "type_as": lambda: [([x, y.double()], {})], "copy_": lambda: [([x, y], {})],
        "lerp": lambda: [([x, y, 0.3], {})], "lerp_": lambda: [([x, y, 0.3], {})],
        "addcmul": lambda: [([x, y, _r(6)], {})], "addcdiv": lambda: [([x, y, _r(6)], {})],
        "addcmul_": lambda: [([x, y, _r(6)], {})], "addcdiv_": lambda: [([x, y, _r(6)], {})],
        "pow_": lambda: [([x, 2.0], {})],
        "where_method": lambda: [([x, x > 1.0, y], {})],
        "gather": lambda: [([x, 1, torch.randint(0, 6, (4, 3))], {}), ([x, 0, torch.randint(0, 4, (2, 6))], {})],
        "take_along_dim": lambda: [([x, torch.randint(0, 6, (4, 3)), 1], {})],
        "index_select": lambda: [([x, 0, torch.tensor([3, 0, 2])], {}), ([x, 1, torch.tensor([5, 1])], {})],
        "index_add": lambda: [([x, 0, torch.tensor([3, 0]), _r(2, 6)], {})],
        "scatter": lambda: [([x, 1, torch.randint(0, 6, (4, 3)), _r(4, 3)], {})],
        "scatter_add": lambda: [([x, 1, torch.randint(0, 6, (4, 3)), _r(4, 3)], {})],
        "masked_select": lambda: [([x, x > 1.0], {})],
        "masked_scatter": lambda: [([x, x > 1.0, _r(4, 6)], {})],
        "embedding": lambda: [([torch.randint(0, 5, (4, 3)), _r(5, 6)], {})],
        "one_hot": lambda: [([torch.randint(0, 5, (4, 3)), 5], {})],
        "full_like": lambda: [([x, 2.0], {})], "new_full": lambda: [([x, (2, 3), 1.5], {})],
        "binary_cross_entropy": lambda: [([x / 2.0, torch.rand(4, 6)], {})],
        "batch_norm": lambda: [([_r(4, 3, 2), torch.zeros(3), torch.ones(3)], {}),
                               ([_r(4, 3, 2), torch.zeros(3), torch.ones(3), _r(3), _r(3)], {"training": True})],
        "new_tensor": lambda: [([x, [1.0, 2.0, 3.0]], {})],
        "__setitem__": lambda: [([x, (slice(0, 2),), 0.0], {})],
    }
    for op in ("add", "sub", "mul", "div", "maximum"):
        table[f"_foreach_{op}"] = lambda: [([[x, x3], [y, _r(2, 4, 6)]], {})]
    for op in ("neg", "sqrt", "reciprocal", "zero"):
        table[f"_foreach_{op}"] = lambda: [([[x, x3]], {})]
    table["_foreach_addcmul"] = table["_foreach_addcdiv"] = lambda: [([[x], [y], [_r(4, 6)]], {})]
    table["_foreach_lerp"] = lambda: [([[x], [y], 0.5], {})]
    table["_foreach_copy"] = lambda: [([[x], [y]], {})]
    return table


def _torch_embedding() -> List[Sample]:
    import torch
    return [([_r(5, 6), torch.randint(0, 5, (4, 3))], {})]


def _aten_batch_norm() -> List[Sample]:
    import torch
    x = _r(4, 3, 2)
    return [([x, _r(3), _r(3), torch.zeros(3), torch.ones(3), False, 0.1, 1e-5, False], {})]


_SPECIAL: Dict[str, Callable[[], List[Sample]]] = {"torch.embedding": _torch_embedding,
                                                   "torch.batch_norm": _aten_batch_norm}

_BITWISE = ("__and__", "__or__", "__xor__", "__invert__")
_UNARY_DUNDER = ("__invert__", "__neg__", "__abs__")


def _dunder(base: str) -> List[Sample]:
    """Samples of Python operator methods (``Tensor.__add__``): unary or binary, bool for bitwise ones."""
    x, y = _r(4, 6), _r(4, 6)
    if base in _BITWISE:
        x, y = x > 1.0, y > 1.0
    if base in _UNARY_DUNDER:
        return [([x], {})]
    if base in ("__setitem__", "__getitem__"):
        return []
    return [([x, y], {}), ([x, _r(6)], {}), ([x, 2.0], {})]


_FAMILY: Optional[Dict[str, Callable[[], List[Sample]]]] = None


def _schema_tensor_count(name: str) -> Tuple[int, List[Tuple[str, str]]]:
    """Required tensor params and required scalar params ``(name, type)`` of the op (schema or signature)."""
    from hp_agent.dist_op.interface import AnalyzeError, torch_interface
    try:
        iface = torch_interface(name)
    except (AnalyzeError, TypeError, ValueError, RuntimeError):
        return 1, []
    tensors = sum(1 for p in iface.params if p.tensor and not p.has_default)
    scalars = [(p.name, p.type) for p in iface.params if not p.tensor and not p.has_default]
    return max(tensors, 1), scalars


def _derived(name: str) -> List[Sample]:
    n_tensors, scalars = _schema_tensor_count(name)
    fills = []
    for pname, typ in scalars:
        low = typ.lower()
        if "int" in low:
            fills.append(0 if "dim" in pname else 1)
        else:
            fills.append(0.5 if "float" in low or "scalar" in low else None)
    if any(f is None for f in fills):
        return []
    lead = _leading_scalars(name)
    fills, fills_after = fills[:lead], fills[lead:]  # polygamma(int n, Tensor self): scalars first
    base = [_r(4, 6)] + [_r(4, 6) for _ in range(n_tensors - 1)]
    shapes = [base]
    if n_tensors == 2:
        shapes += [[_r(5, 6), _r(6)], [_r(4, 1), _r(4, 6)]]
    if n_tensors == 1:
        shapes += [[_r(5, 3, 2)], [_r(6)], [_r()]]  # 3-D, 1-D (vander) and 0-d inputs
    return [(fills + tensors + fills_after, {}) for tensors in shapes]


def _leading_scalars(name: str) -> int:
    """How many required non-tensor parameters come before the first tensor parameter."""
    from hp_agent.dist_op.interface import AnalyzeError, torch_interface
    try:
        params = [p for p in torch_interface(name).params if not p.has_default]
    except (AnalyzeError, TypeError, ValueError, RuntimeError):
        return 0
    return next((i for i, p in enumerate(params) if p.tensor), 0)


def samples_for(name: str) -> List[Sample]:
    """Sample calls of registered op ``name`` (family table first, then the schema)."""
    global _FAMILY  # pylint: disable=global-statement
    if _FAMILY is None:
        _FAMILY = _family()
    base = name.rsplit(".", 1)[-1]
    if base.startswith("__") and base.endswith("__") and base not in ("__getitem__", "__matmul__", "__setitem__"):
        return _dunder(base)
    special = _SPECIAL.get(name)
    if special is not None:
        return special()
    if name == "Tensor.where":
        base = "where_method"
    maker = _FAMILY.get(base) or _FAMILY.get(base.rstrip("_"))
    if maker is not None:
        return maker()
    return _derived(name)


def describe(sample: Sample) -> str:
    """Short text of a sample: tensor shapes and other arguments."""
    import torch

    def one(a: Any) -> str:
        if isinstance(a, torch.Tensor):
            return "x" + "x".join(map(str, a.shape)) if a.dim() else "scalar-tensor"
        if isinstance(a, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in a):
            return "[" + ", ".join(one(t) for t in a) + "]"
        if inspect.isclass(a) or isinstance(a, torch.dtype):
            return str(a)
        return repr(a)

    args, kwargs = sample
    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"
