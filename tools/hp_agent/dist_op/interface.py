# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Steps 1 and 2 of the analysis: which frontends have an op (scope) and its interface, read from the
framework itself (``inspect.signature`` for Python functions, ``torch._C`` operator schemas for builtins).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional

__all__ = ["Param", "Interface", "torch_interface", "mindspore_scope", "resolve_torch", "base_name",
           "AnalyzeError"]

_EMPTY = inspect.Parameter.empty


class AnalyzeError(ValueError):
    """An op name that cannot be analysed; the message names it and says why."""


@dataclass
class Param:
    """One parameter of an op."""

    name: str
    type: str
    default: Any = None
    has_default: bool = False
    keyword_only: bool = False
    tensor: bool = False

    def to_dict(self) -> Dict[str, Any]:
        """YAML-friendly form."""
        d = asdict(self)
        if not self.has_default:
            d.pop("default")
        return d


@dataclass
class Interface:
    """Signature of a frontend op."""

    name: str
    signature: str
    source: str
    params: List[Param] = field(default_factory=list)
    dtypes: List[str] = field(default_factory=list)

    def param(self, name: str) -> Optional[Param]:
        """Parameter ``name`` or None."""
        return next((p for p in self.params if p.name == name), None)

    def position(self, name: str) -> int:
        """Positional index of parameter ``name``."""
        for i, p in enumerate(self.params):
            if p.name == name:
                return i
        raise AnalyzeError(f"{self.name}: no parameter {name!r}")


def base_name(name: str) -> str:
    """``torch.nn.functional.glu`` -> ``glu``; an aten overload by its op (``torch.ops.aten.slice.Tensor`` ->
    ``slice``: every overload ends in ``.default`` or another overload name, which names no op)."""
    parts = name.split(".")
    if name.startswith("torch.ops.aten.") and len(parts) >= 4:
        return parts[3]
    return parts[-1]


def resolve_torch(name: str) -> Callable:
    """The torch callable for ``torch.x`` / ``Tensor.x`` / ``torch.nn.functional.x``; a clear error otherwise."""
    if not (name.startswith("torch.") or name.startswith("Tensor.")):
        raise AnalyzeError(f"{name}: not a torch name (expected torch.*, Tensor.* or torch.nn.functional.*)")
    from hyper_parallel.platform.torch.dispatch import resolve_torch_name
    from hyper_parallel.core.ops.rule import RuleError
    try:
        fn = resolve_torch_name(name)
    except RuleError as exc:
        raise AnalyzeError(str(exc)) from exc
    if fn is None or not callable(fn):
        raise AnalyzeError(f"{name}: does not resolve to a callable in torch")
    return fn


_TENSOR_HINTS = ("Tensor",)


def _from_signature(name: str, fn: Callable) -> Optional[Interface]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = p.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann)) if ann is not _EMPTY else ""
        optional = "Optional" in str(text) or "None" in str(text)
        is_tensor = ("Tensor" in str(text) and not optional) or (not params and p.name in ("input", "self", "x"))
        params.append(Param(p.name, str(text) or "Any", None if p.default is _EMPTY else p.default,
                            p.default is not _EMPTY, p.kind == p.KEYWORD_ONLY, bool(is_tensor)))
    return Interface(name, f"{base_name(name)}{sig}", "inspect.signature", params)


def _schema_default(text: Optional[str]) -> Any:
    if text is None:
        return None
    import ast
    try:
        return ast.literal_eval(text.replace("True", "True").replace("None", "None"))
    except (ValueError, SyntaxError):
        return text


def _schema_candidates(name: str) -> List[str]:
    """aten names to try: ``torch.special.x`` -> ``special_x``, ``torch.linalg.x`` -> ``linalg_x``, else ``x``."""
    op = base_name(name)
    parts = name.split(".")
    out = [f"{parts[-2]}_{op}"] if len(parts) > 2 and parts[-2] in ("special", "linalg", "fft") else []
    return out + [op]


def _schemas(name: str) -> list:
    """The aten schemas of the first candidate name that has any."""
    import torch
    for op in _schema_candidates(name):
        try:
            found = torch._C._jit_get_schemas_for_operator(f"aten::{op}")  # pylint: disable=protected-access
        except RuntimeError:
            continue
        if found:
            return found
    return []


def _tensor_schemas(schemas: list) -> list:
    """Non-``out`` schemas with a tensor argument, those whose first argument is a tensor first (else
    ``polygamma(int n, Tensor self)``'s)."""
    found = [s for s in schemas if s.arguments and not s.overload_name.endswith("out")
             and any("Tensor" in str(a.type) for a in s.arguments)]
    return [s for s in found if "Tensor" in str(s.arguments[0].type)] or found


def _from_schema(name: str) -> Optional[Interface]:
    schemas = _schemas(name)
    if not schemas:
        return None
    schemas = _tensor_schemas(schemas)
    if not schemas:
        return None
    primary = next((s for s in schemas if s.overload_name == ""), schemas[0])
    params = []
    for a in primary.arguments:
        has_default = a.default_value is not None or "Optional" in str(a.type)
        params.append(Param(a.name, str(a.type), _schema_default(str(a.default_value))
                            if a.default_value is not None else None, has_default, a.kwarg_only,
                            str(a.type) == "Tensor"))
    return Interface(name, str(primary), "torch._C schema " + primary.name
                     + (f".{primary.overload_name}" if primary.overload_name else ""), params)


def _dispatch_flag(name: str, fn: Callable, iface: Interface) -> Interface:
    """``iface`` with the flag of a boolean-dispatched function appended (``max_pool1d``,
    ``adaptive_max_pool2d``: ``fn(*args, **kwargs)`` choosing a branch by ``return_indices``, which the aten
    schema lacks) when it comes right after the schema's parameters; else ``iface`` unchanged."""
    try:
        from torch._jit_internal import boolean_dispatched  # pylint: disable=import-outside-toplevel
        info = boolean_dispatched.get(fn)
    except (ImportError, TypeError):  # TypeError: not weak-referenceable, so not a dispatched function
        return iface
    if not info or info["index"] != len(iface.params) or iface.param(info["arg_name"]) is not None:
        return iface
    flag = Param(info["arg_name"], "bool", info["default"], True, False, False)
    return Interface(name, f"{iface.signature} + {flag.name}: bool = {flag.default}",
                     f"{iface.source} + boolean_dispatch flag", iface.params + [flag], iface.dtypes)


def torch_interface(name: str) -> Interface:
    """The interface of a torch op from the framework (signature first, then the aten schema)."""
    fn = resolve_torch(name)
    iface = _from_signature(name, fn)
    if iface is None or not any(p.tensor for p in iface.params):
        schema = _from_schema(name)
        if schema is not None:
            iface = schema
    if iface is None and name.startswith("Tensor.") and not base_name(name).startswith("_"):
        # a builtin method with neither (Tensor.bool, Tensor.long: dtype conversions): self only, the
        # OpInfo samples carry whatever else it takes
        iface = Interface(name, f"{base_name(name)}(self, ...)", "Tensor method without a schema (self only)",
                          [Param("self", "Tensor", None, False, False, True)])
    if iface is None:
        raise AnalyzeError(f"{name}: neither inspect.signature nor an aten schema describes it")
    iface = _dispatch_flag(name, fn, iface)
    if name.startswith("Tensor.") and iface.params and iface.params[0].name != "self":
        iface.params[0].name = "self"
    if iface.params and iface.params[0].type not in ("int", "float", "bool", "str"):
        iface.params[0].tensor = True
    iface.dtypes = _dtypes(fn, iface)
    return iface


def _dtypes(fn: Callable, iface: Interface) -> List[str]:
    """dtypes the op accepts on a small sample (one tensor argument, defaults elsewhere)."""
    import torch
    required = [p for p in iface.params if not p.has_default and not p.tensor]
    kwargs = {p.name: [0] if "[]" in p.type or "List" in p.type else 0 if "int" in p.type.lower() else 1
              for p in required}
    ok = []
    for dt in ("float32", "float64", "bfloat16", "float16", "int64", "bool"):
        x = (torch.rand(2, 4) * 3).to(getattr(torch, dt))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(x, **kwargs)
        except Exception:  # pylint: disable=broad-except  # any refusal means: dtype not accepted (recorded)
            continue
        ok.append(dt)
    return ok


MS_PREFIXES = ("mindspore.mint.", "mindspore.mint.nn.functional.", "mindspore.ops.")


def _ms_candidates(torch_name: str) -> List[str]:
    """``mindspore.mint`` names in the torch name's own namespace first (``torch.special.x`` ->
    ``mint.special.x``; see ``mindspore_frontend.candidates``), then ``mindspore.ops.x``."""
    from hp_agent.dist_op.mindspore_frontend import candidates
    return candidates(torch_name) + ["mindspore.ops." + base_name(torch_name)]


def mindspore_scope(torch_name: str) -> Dict[str, Any]:
    """MindSpore counterparts of a torch op: installed or not, and which mint/ops names exist."""
    if importlib.util.find_spec("mindspore") is None:
        return {"installed": False, "names": [], "note": "MindSpore is not installed here: scope unknown"}
    mindspore = importlib.import_module("mindspore")
    names = []
    for name in _ms_candidates(torch_name):
        obj: Any = mindspore
        for part in name.split(".")[1:]:
            obj = getattr(obj, part, None)
        if callable(obj) and not isinstance(obj, type):
            names.append(name)
    version = getattr(mindspore, "__version__", "?")
    return {"installed": True, "version": version, "names": names}
