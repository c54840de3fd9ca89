# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Strategy synthesis: every input-placement combination whose local results assemble to the global result.

Sources of sample calls, in order: PyTorch's OpInfo database
(``torch.testing._internal.common_methods_invocations.op_db``, float32 samples) for any op it covers, then
the pipeline's own samples (:func:`hp_agent.dist_op.samples.samples_for`), then ``extra`` samples given by
the caller. Each sample is swept over the layout-relevant arguments it carries (``dim``, ``dims``, ``k``,
``keepdim``, ``p``, ... with values valid for the sample: a value whose single-device call raises is
dropped).

For each (swept) sample and each combination of input placements (``R``, ``S(d)`` for every dim,
``P(sum|avg|max|min)`` for float inputs), the op runs per shard on simulated meshes of 2 and 3 ranks
(:func:`hp_agent.dist_op.probe.probe_call`) and the output placements under which the local outputs
assemble to the single-device result are kept. A strategy is accepted only if **every value generator**
agrees (the intersection of their output placements is not empty):

* ``sample`` — the sample's own values;
* ``arange`` — ``0, 1, 2, ...`` in order (catches position-dependent ops);
* ``negative`` — negated magnitudes (catches sign assumptions);
* ``zeros``/``ones``-mix — alternating exact 0 and 1 (catches ops that treat zeros specially);
* ``offset`` — the sample plus a different offset per input, so two inputs are never equal (a strategy
  valid only for equal inputs fails here);
* ``membership`` — shared small values: the first input cycles through them, the others hold per element
  the code of the half of each dim it lies in, so a shard of a later input lacks values the whole one has
  (``isin``, ``bucketize``: an op that looks values up in another input fails here when that input is
  sharded);
* ``repeats`` — every value twice in a row (ops comparing neighbours or counting equal values:
  ``unique_consecutive`` is the identity on distinct values, so a ``Partial`` input looked linear);
* ``runs`` — every value five times in a row: runs that cross shard boundaries at even offsets (``repeats``
  pairs never do when every shard has an even number of elements).

Uneven chunks come from the 3-rank mesh and the samples' own sizes (OpInfo's samples include size-1 and
odd dims). The synthesis groups samples by a *signature* (the inputs' ranks and the swept argument
values) and records, per accepted strategy, the sample it was first found on. :func:`factor_equation`
finds an einsum-like factor rule (``outer``: ``i,j->ij``) whose implied strategies equal the synthesised
ones; :func:`conditions` generalises a one-tensor op's strategies over ``dim`` into conditional rules
(``S(d) -> S(d) when d != dim``).
"""
from __future__ import annotations

import itertools
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from hp_agent.dist_op.probe import collect_tensors, probe_call

__all__ = ["Strategy", "Synthesis", "GENERATORS", "LAYOUT_KWARGS", "synthesize", "opinfo_samples", "sweep",
           "inserted_dims", "INSERTED", "factor_equation", "equation_strategies", "conditions", "signature",
           "permutation", "shape_expressions", "emit", "synth_op", "OpSynthesis", "extra_arguments", "SYNTH_BUDGET",
           "opinfo_name", "periods_of", "close_all", "moved_arguments", "op_layout"]

_DIMS_ARGS = ("dim", "dims", "dim0", "dim1", "start_dim", "end_dim")
LAYOUT_KWARGS = ("dim", "dims", "dim0", "dim1", "k", "keepdim", "p", "start_dim", "end_dim", "diagonal", "offset")
INPUT_PARTIALS = ("sum", "avg", "max", "min")
GENERATORS = ("sample", "arange", "negative", "zeros_ones", "offset", "membership", "repeats", "runs")
MAX_COMBOS = 400
#: layout option marker of a dim argument naming one of ``ndim + 1`` positions (``unsqueeze``'s ``dim``)
INSERTED = "inserted"
MAX_ALTERNATES = 8  # sample calls kept per signature besides the first (for UT scenarios)
TABLE_MODULE = "hyper_parallel.core.ops.rules.table"
REPEAT = "*"  # a row's last output repeated to the call's output count (rules/table.py REPEAT)
_PLACEMENT_TEXT = re.compile(r"^(R|S\(\d+\)|P\((sum|avg|max|min)\))$")


@dataclass(frozen=True)
class Strategy:
    """Input placements (one per tensor input) and the output placement(s) they give."""

    inputs: Tuple[str, ...]
    outputs: Tuple[str, ...]

    def text(self) -> str:
        """``S(0),R->S(0)``."""
        return f"{','.join(self.inputs)}->{','.join(self.outputs)}"


@dataclass
class Synthesis:
    """Accepted strategies per signature, with the evidence (the sample each was found on)."""

    op: str
    strategies: Dict[str, List[Strategy]] = field(default_factory=dict)
    evidence: Dict[str, str] = field(default_factory=dict)
    kwargs: Dict[str, dict] = field(default_factory=dict)
    shapes: Dict[str, List[Tuple[List[Tuple[int, ...]], List[Tuple[int, ...]]]]] = field(default_factory=dict)
    differentiable: Optional[bool] = None
    integer_output: bool = False
    samples: int = 0
    errors: List[str] = field(default_factory=list)
    replicate_only: bool = False
    budget_hit: bool = False
    mutated: List[int] = field(default_factory=list)  # tensor inputs the op writes in place (by position)
    extra_args: List[str] = field(default_factory=list)
    opinfo: Optional[str] = None
    calls: Dict[str, Tuple[list, dict]] = field(default_factory=dict)  # signature -> its first sample call
    periods: Dict[str, int] = field(default_factory=dict)  # integer layout argument -> period (rot90's k: 4)
    inserted: List[str] = field(default_factory=list)  # dim arguments over ndim + 1 positions (unsqueeze)
    constant_only: set = field(default_factory=set)  # signatures seen on constant results only (see _record)
    assembled: Dict[str, set] = field(default_factory=dict)  # signature -> input combos every constant result took
    #: signature -> later sample calls (up to MAX_ALTERNATES): UT scenarios of rows the first call cannot show
    alternates: Dict[str, List[Tuple[list, dict]]] = field(default_factory=dict)
    #: signature -> output count -> the strategies of the samples returning that many tensors (intersected)
    by_count: Dict[str, Dict[int, List[Strategy]]] = field(default_factory=dict)
    #: signature -> dtype names of its evidence call's tensors (``torch.int64`` ...): the ST cases carry them
    dtypes: Dict[str, List[str]] = field(default_factory=dict)

    def plan_cases(self, limit: int = 4) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
        """(accepted UT scenarios, ST cases) for a plan: per signature (up to ``limit``, tensors passed
        positionally only), each strategy on the sample it was found on, and that sample with the number of
        ``check_op`` combinations (R, S(d), P(sum)) the table keeps without communication."""
        accepted, st_cases = [], []
        for key in sorted(self.strategies)[:limit]:
            shapes_in, shapes_out = self.shapes[key][0]
            kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in self.kwargs[key].items()}
            accepted += [_scenario(s, shapes_in, shapes_out, kwargs) for s in self.strategies[key]]
            native = sum(1 for s in self.strategies[key] if all(p == "R" or p.startswith("S(") or p == "P(sum)"
                                                                  for p in s.inputs))
            case = {"shapes": [list(x) for x in shapes_in], "kwargs": kwargs, "native_min": native}
            case.update(dtype_field(self.dtypes.get(key, [])))
            if self.differentiable is False:
                case["grad"] = False
            st_cases.append(case)
        return accepted, st_cases

    def table(self) -> Dict[str, List[str]]:
        """Signature -> strategy texts (sorted)."""
        return {k: sorted(s.text() for s in v) for k, v in sorted(self.strategies.items())}


def dtype_field(dtypes: Sequence[str]) -> Dict[str, Any]:
    """An ST case's ``dtype`` for tensors of ``dtypes``: nothing when all are float32 (the default), one name
    when they agree, else the list."""
    if all(d == "torch.float32" for d in dtypes):
        return {}
    return {"dtype": dtypes[0] if len(set(dtypes)) == 1 else list(dtypes)}


def _scenario(s: Strategy, shapes_in, shapes_out, kwargs: dict) -> Dict[str, Any]:
    """One accepted UT scenario: the strategy on its evidence shapes (``more_outputs``: the outputs after
    the first, of ``frexp`` or ``slogdet``)."""
    row = {"shapes": [list(x) for x in shapes_in], "kwargs": kwargs, "input": list(s.inputs),
           "need": list(s.inputs), "output": list(s.outputs[:1]),
           "out_shape": list(shapes_out[0]) if shapes_out else []}
    if len(s.outputs) > 1 and len(shapes_out) == len(s.outputs):
        row["more_outputs"] = [{"output": [o], "out_shape": list(x)} for o, x in zip(s.outputs[1:], shapes_out[1:])]
    return row


# ---------------------------------------------------------------------- samples
def _opinfo_names(op: str) -> List[str]:
    """OpInfo names that may stand for ``op``, most specific first: the name without its namespace
    (``torch.nn.functional.unfold`` -> ``nn.functional.unfold`` before the method ``unfold``), the aten
    op of an overload (``torch.ops.aten.slice.Tensor`` -> ``slice``), the public op of a ``*_with_indices``
    function (``max_pool2d_with_indices`` -> ``nn.functional.max_pool2d``) and of a torch function that
    ``nn.functional`` exposes (``torch.bilinear`` -> ``nn.functional.bilinear``)."""
    short = op
    for prefix in ("torch.nn.functional.", "torch.special.", "torch.linalg.", "torch.fft.", "torch.", "Tensor."):
        if op.startswith(prefix):
            short = op[len(prefix):] if prefix in ("torch.", "Tensor.") else op.replace("torch.", "", 1)
            break
    names = [op, short]
    base = op.split(".")[3] if op.startswith("torch.ops.aten.") and op.count(".") >= 3 else op.split(".")[-1]
    stem = base[:-len("_with_indices")] if base.endswith("_with_indices") else base
    names += [f"nn.functional.{stem}", stem, base]
    return list(dict.fromkeys(names))


def _opinfos(op: str) -> List[Any]:
    """OpInfo entries of ``op``: those of its most specific name (:func:`_opinfo_names`), the plain one
    first, then its variants (``interpolate.area`` ...); else those whose ``op`` is the function itself (a
    private OpInfo name for a public op: ``_segment_reduce`` runs ``torch.segment_reduce``)."""
    from torch.testing._internal.common_methods_invocations import op_db
    for name in _opinfo_names(op):
        found = [o for o in op_db if o.name == name]
        if found:
            return sorted(found, key=lambda o: bool(o.variant_test_name))
    fn = _resolve(op)
    return sorted([o for o in op_db if fn is not None and o.op is fn], key=lambda o: bool(o.variant_test_name))


def _resolve(op: str) -> Any:
    from hp_agent.dist_op.interface import resolve_torch  # pylint: disable=import-outside-toplevel
    try:
        return resolve_torch(op)
    except Exception:  # pylint: disable=broad-except  # an op torch does not have: no OpInfo either
        return None


def _full_name(info: Any) -> str:
    return info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


def _flat_tensors(args: list) -> list:
    """The tensors of ``args``, inside lists and tuples too."""
    import torch
    flat = [t for a in args for t in (a if type(a) in (list, tuple) else [a])]  # pylint: disable=unidiomatic-typecheck
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _usable(args: list) -> bool:
    """A sample with a tensor argument, every tensor dense and non-empty (an empty tensor assembles under
    every placement: no evidence)."""
    import torch
    tensors = _flat_tensors(args)
    return bool(tensors) and all(t.layout == torch.strided and t.numel() > 0 for t in tensors)


def _opinfo_draw(op: str, limit: int, wrapped: bool = False) -> Tuple[Optional[str], List[Tuple[list, dict]]]:
    """(the OpInfo name drawn from, its first ``limit`` usable float32 CPU samples); the plain op first, else
    the first variant that has a usable sample (``linspace.tensor_overload``). An OpInfo that calls the op
    through a wrapper (``polygamma(n, x)`` as ``op(x, n)``: another argument order) is skipped unless
    ``wrapped`` (the ST cases run OpInfo's own ``op``, so they may use it)."""
    import torch
    for info in _opinfos(op):
        if getattr(info.op, "__name__", "") == "<lambda>" and not wrapped:
            continue
        torch.manual_seed(0)
        out, scalars = [], 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for s in itertools.islice(info.sample_inputs("cpu", opinfo_dtype(info), requires_grad=False), limit * 100):
                args = [s.input, *s.args]
                if not _usable(args):
                    continue  # sparse (DTensors are dense), empty (no evidence: see _evidence) or tensor-free
                if all(t.dim() == 0 for t in _flat_tensors(args)):
                    scalars += 1  # a few 0-d samples at most: they cannot be sharded (nonzero_static's first
                    if scalars > 2:  # ten samples are 0-d, whose outputs are empty)
                        continue
                out.append((args, dict(s.kwargs)))
                if len(out) >= limit:
                    break
        if out:
            return _full_name(info), out
    return None, []


#: sample dtypes drawn from OpInfo, in order: the first the OpInfo supports on CPU (``gcd``: int64)
OPINFO_DTYPES = ("float32", "int64", "int32", "bool")


def opinfo_dtype(info: Any) -> Any:
    """The dtype of ``info``'s samples the synthesis draws: float32 when the OpInfo supports it on CPU, else
    the first integer or bool dtype of :data:`OPINFO_DTYPES` it supports (integer-only and bool ops)."""
    import torch
    try:
        supported = info.supported_dtypes("cpu")
    except Exception:  # pylint: disable=broad-except  # an OpInfo without a dtype list: float32 as before
        return torch.float32
    return next((getattr(torch, d) for d in OPINFO_DTYPES if getattr(torch, d) in supported), torch.float32)


def opinfo_sample_dtype(op: str) -> str:
    """``"torch.int64"``-style name of the dtype :func:`opinfo_name`'s samples are drawn in."""
    name = opinfo_name(op)
    info = next((o for o in _opinfos(op) if _full_name(o) == name), None)
    return str(opinfo_dtype(info)) if info is not None else "torch.float32"


def opinfo_name(op: str) -> Optional[str]:
    """The OpInfo name (``name.variant``) whose usable samples the ST cases run (through OpInfo's own
    ``op``), or None."""
    return _opinfo_draw(op, 1, wrapped=True)[0]


def opinfo_samples(op: str, limit: int = 6) -> List[Tuple[list, dict]]:
    """Float32 CPU samples of ``op`` from PyTorch's OpInfo database as ``(args, kwargs)`` (empty when the
    database does not cover the op): samples without a tensor or with an empty one are skipped; an op whose
    plain entry has none draws from its first variant that has."""
    return _opinfo_draw(op, limit)[1]


def captured_samples(op: str, fn: Callable, limit: int = 6) -> List[Tuple[list, dict]]:
    """Calls of ``fn`` recorded while OpInfo's own callable runs its samples: for an op that OpInfo tests
    through a wrapper (``max_pool2d_with_indices_backward``: the OpInfo runs max pooling forward, then the
    aten backward op on its results), the wrapper's samples are not ``fn``'s, but the calls it makes are."""
    import torch
    from torch.overrides import TorchFunctionMode
    out: List[Tuple[list, dict]] = []

    def copy(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.detach().clone()
        return type(v)(copy(x) for x in v) if type(v) in (list, tuple) else v  # pylint: disable=unidiomatic-typecheck

    class _Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is fn and len(out) < limit:
                out.append(([copy(a) for a in args], {k: copy(v) for k, v in kwargs.items()}))
            return func(*args, **kwargs)

    for info in _opinfos(op):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for s in itertools.islice(info.sample_inputs("cpu", torch.float32, requires_grad=False), limit * 10):
                try:
                    with _Record():
                        info.op(s.input, *s.args, **s.kwargs)
                except Exception:  # pylint: disable=broad-except  # a sample the wrapper refuses: none recorded
                    continue
                if len(out) >= limit:
                    return out
    return out


def _values(name: str, value: Any, ndim: int, inserted: Sequence[str] = ()) -> List[Any]:
    """Candidate values of layout argument ``name`` for an input of rank ``ndim`` (an ``inserted`` dim
    argument names one of ``ndim + 1`` positions)."""
    if name in ("keepdim",):
        return [False, True]
    if name == "k":
        return [0, 1, 2, 3]
    if name == "p":
        return [1, 2]
    if name == "dims" and isinstance(value, (list, tuple)):
        return [list(c) for c in itertools.permutations(range(ndim), len(value))] if ndim else [value]
    if isinstance(value, int) and not isinstance(value, bool):
        return list(range(ndim + (name in inserted))) if ndim else [value]
    return [value]


def distinct_sizes(fn: Callable, sample: Tuple[list, dict]) -> Optional[Tuple[list, dict]]:
    """The sample with tensor dims of size > 1 resized so that no two dims of one tensor share a size, or
    None when the op refuses every such shape. Tried in order: when a tensor has a size-1 dim, every dim of
    every tensor distinct and > 1 (a size-1 dim makes a wrong strategy or shape pass by coincidence); every
    dim of every tensor distinct (2, 3, 4, ...; size-1 dims kept), then distinct per right-aligned position
    and shared across tensors (broadcasting operands). Output dims then name the input dim they come from."""
    import torch
    args, kwargs = sample
    locs = collect_tensors(args, kwargs)
    from hp_agent.dist_op.probe import _get, _put  # pylint: disable=import-outside-toplevel,protected-access
    tensors = [_get(args, kwargs, loc) for loc in locs]
    if not tensors or any(not t.is_floating_point() or t.dim() == 0 for t in tensors):
        return None
    for shapes in _size_variants([tuple(t.shape) for t in tensors]):
        a, k = list(args), dict(kwargs)
        for loc, t, shape in zip(locs, tensors, shapes):
            _put(a, k, loc, torch.rand(shape, dtype=t.dtype) + 0.5)
        try:
            with torch.no_grad():
                fn(*a, **k)
        except Exception:  # pylint: disable=broad-except  # the op needs some sizes equal: try the next
            continue
        return a, k
    return None


def _size_variants(shapes: List[Tuple[int, ...]]) -> List[List[List[int]]]:
    """The shape lists :func:`distinct_sizes` tries, in order."""
    size = iter(range(2, 64))
    apart = [[s if s == 1 else next(size) for s in shape] for shape in shapes]
    size = iter(range(2, 64))
    no_ones = [[next(size) for _ in shape] for shape in shapes]  # size-1 dims too (cartesian_prod of a 1-element)
    aligned = [[s if s == 1 else 2 + len(shape) - 1 - d for d, s in enumerate(shape)] for shape in shapes]
    return ([no_ones] if any(1 in shape for shape in shapes) else []) + [apart, aligned]


def sweep(fn: Callable, sample: Tuple[list, dict], layout_kwargs: Sequence[str] = LAYOUT_KWARGS,
          limit: int = 12, inserted: Sequence[str] = ()) -> List[Tuple[list, dict]]:
    """The sample with each layout argument it carries (by keyword) set to every value valid for it (the
    single-device call must succeed); the original first."""
    import torch
    args, kwargs = sample
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    ndim = first.dim() if first is not None else 0
    names = [k for k in kwargs if k in layout_kwargs]
    if not names:
        return [sample]
    out, seen = [sample], {repr(sorted(kwargs.items()))}
    for values in itertools.product(*[_values(k, kwargs[k], ndim, inserted) for k in names]):
        kw = dict(kwargs, **dict(zip(names, values)))
        key = repr(sorted(kw.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            with torch.no_grad():
                fn(*args, **kw)
        except Exception:  # pylint: disable=broad-except  # not valid for this sample: not swept
            continue
        out.append((args, kw))
        if len(out) >= limit:
            break
    return out


# ---------------------------------------------------------------------- generators
def _generate(name: str, t: Any, index: int) -> Any:
    import torch
    if not t.is_floating_point():
        return t
    if name == "sample":
        return t
    if name in ("repeats", "runs"):  # every value twice (runs: five times) in a row: ops that compare
        flat = t.detach().flatten()  # neighbours (unique_consecutive); runs of 5 cross shard boundaries that
        width = 2 if name == "repeats" else 5  # fall on even offsets (a multiple of 2, 3, 4 or 6 elements)
        return flat[torch.arange(flat.numel()) // width].reshape(t.shape).clone() + (0.25 * index if width > 2 else 0)
    if name == "arange":
        return torch.arange(t.numel(), dtype=t.dtype).reshape(t.shape) / max(t.numel(), 1) + 0.25 + index
    if name == "negative":
        return -(t.abs() + 0.25 + index)
    if name == "zeros_ones":
        return (torch.arange(t.numel()) % 2).to(t.dtype).reshape(t.shape)
    if name == "membership":
        return _membership(t, index)
    return t + 3.0 * (index + 1)  # offset: two inputs are never equal


def _membership(t: Any, index: int) -> Any:
    """Shared small values: input 0 cycles through 0 .. 2**ndim - 1; a later input holds, per element, the
    binary code of which half of each dim it lies in, so a shard along any dim lacks values the whole has."""
    import torch
    if index == 0 or t.dim() == 0:
        return (torch.arange(t.numel()) % (2 ** max(t.dim(), 1))).to(t.dtype).reshape(t.shape)
    code = torch.zeros(t.shape, dtype=torch.long)
    for d, size in enumerate(t.shape):
        half = (torch.arange(size) * 2 // size).reshape([-1 if i == d else 1 for i in range(t.dim())])
        code = code + half * (2 ** d)
    return code.to(t.dtype)


def _variant(name: str, args: list, kwargs: dict) -> Tuple[list, dict]:
    locs = collect_tensors(args, kwargs)
    a, k = list(args), dict(kwargs)
    from hp_agent.dist_op.probe import _get, _put  # pylint: disable=import-outside-toplevel,protected-access
    for i, loc in enumerate(locs):
        _put(a, k, loc, _generate(name, _get(args, kwargs, loc), i))
    return a, k


# ---------------------------------------------------------------------- synthesis
def signature(args: list, kwargs: dict, layout_kwargs: Sequence[str] = LAYOUT_KWARGS,
              inserted: Sequence[str] = ()) -> str:
    """``2,1`` (input ranks) plus ``;name=value`` for each layout argument (dims normalised >= 0; an
    ``inserted`` dim argument modulo ``ndim + 1``: :func:`inserted_dims`)."""
    locs = collect_tensors(args, kwargs)
    from hp_agent.dist_op.probe import _get  # pylint: disable=import-outside-toplevel,protected-access
    ranks = [_get(args, kwargs, loc).dim() for loc in locs]
    ndim = ranks[0] if ranks else 0
    parts = [",".join(str(r) for r in ranks)]
    for k in sorted(kwargs):
        if k in layout_kwargs:
            parts.append(f"{k}={_norm(kwargs[k], ndim + (k in inserted), k)}")
    return ";".join(parts)


def _norm(value: Any, ndim: int, name: str) -> Any:
    if name in ("dim", "dim0", "dim1", "start_dim", "end_dim") and isinstance(value, int) \
            and not isinstance(value, bool) and ndim:
        return value % ndim
    if name in ("dims",) + _DIMS_ARGS and isinstance(value, (list, tuple)):  # fftshift(dim=(0, 1)): as the rule
        return [v % ndim if ndim and isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    return list(value) if isinstance(value, tuple) else value  # as the table rule keys a call


def _candidates(t: Any, partials: Sequence[str]) -> List[str]:
    out = ["R"] + [f"S({d})" for d in range(t.dim())]
    if t.is_floating_point():
        out += [f"P({p})" for p in partials]
    return out


def _agreed(fn: Callable, args: list, kwargs: dict, combos: List[Tuple[str, ...]], ranks: Sequence[int],
            generators: Sequence[str]) -> Dict[Tuple[str, ...], List[set]]:
    """Per combo, the output placements every generator accepts (combos with an empty output dropped)."""
    agreed: Dict[Tuple[str, ...], Optional[List[set]]] = {c: None for c in combos}
    for name in generators:
        a, k = _variant(name, args, kwargs)
        if not _runs(fn, a, k):  # this generator's values are invalid for the op
            continue
        alive = [c for c, v in agreed.items() if v is None or all(v)]
        probe = probe_call(fn, a, k, ranks=ranks, combos=alive, max_combos=MAX_COMBOS)
        constant = name != "sample" and _constant_result(fn, a, k)
        for combo, sets in agreed.items():
            agreed[combo] = _narrowed(sets, probe.table.get(combo), constant)
    return {c: v for c, v in agreed.items() if v and all(v)}


def _narrowed(sets: Optional[List[set]], found: Optional[list], constant: bool) -> Optional[List[set]]:
    """A combo's output placements after one generator (``found``: what it accepted; None: not representable,
    e.g. Partial of an integer tensor, or not probed). A ``constant`` result (every element equal: repeats
    makes trapz's differences 0) proves no placement, since any 'reproduces' it; one it misses disproves."""
    if found is None:
        return [set()]
    if constant:
        return sets if all(found) else [set()]
    if sets is None:
        return [set(f) for f in found]
    return [x & set(y) for x, y in zip(sets, found)]


def _constant_result(fn: Callable, args: list, kwargs: dict) -> bool:
    """The op's result on this generator's values is constant (:func:`_constant_flat`)."""
    import torch
    with torch.no_grad():
        return _constant_flat(_flat(fn(*args, **kwargs)))


def _constant_flat(ref: list) -> bool:
    """Every output constant, or a Python bool (:func:`hp_agent.dist_op.probe.constant`)."""
    from hp_agent.dist_op.probe import constant  # pylint: disable=import-outside-toplevel
    return constant(ref)


def inserted_dims(fn: Callable, pool: Sequence[Tuple[list, dict]]) -> List[str]:
    """Dim arguments that name one of ``ndim + 1`` positions (a dim the op inserts: ``unsqueeze``, ``stack``):
    on the first sample passing the argument (by keyword) as an integer, the op also takes ``ndim`` and
    ``-(ndim + 1)``. Their values are keyed modulo ``ndim + 1`` (``dim=-1`` is ``dim=ndim``, not
    ``ndim - 1``): the layout option marks them :data:`INSERTED`."""
    from hp_agent.dist_op.probe import _get  # pylint: disable=import-outside-toplevel,protected-access
    found = []
    for name in _DIMS_ARGS:
        sample = next(((a, k) for a, k in pool if isinstance(k.get(name), int) and not isinstance(k[name], bool)),
                      None)
        locs = collect_tensors(*sample) if sample is not None else []
        if not locs:
            continue
        args, kwargs = sample
        ndim = _get(args, kwargs, locs[0]).dim()
        if ndim and all(_runs(fn, args, dict(kwargs, **{name: v})) for v in (ndim, -ndim - 1)):
            found.append(name)
    return found


def _runs(fn: Callable, args: list, kwargs: dict) -> bool:
    import torch
    try:
        with torch.no_grad():
            fn(*args, **kwargs)
    except Exception:  # pylint: disable=broad-except  # invalid for the op
        return False
    return True


def _partials_consistent(inputs: Tuple[str, ...], outputs: Tuple[str, ...]) -> bool:
    """A Partial output of Partial inputs keeps their reduce op (P(max) in, P(sum) out is a coincidence of
    the data, never a law); Partial outputs of shards only (a contraction) are P(sum)."""
    kinds = {p for p in inputs if p.startswith("P(")}
    for out in outputs:
        if out.startswith("P(") and ((kinds and out not in kinds) or (not kinds and out != "P(sum)")):
            return False
    return True


def _best(outs: List[set]) -> Tuple[str, ...]:
    order = {"S": 0, "P": 1, "R": 2, "v": 3}
    return tuple(sorted(o, key=lambda t: (order[t[0]], t))[0] for o in outs)


def _differentiable(fn: Callable, args: list, kwargs: dict) -> bool:
    """True when backward runs on the single-device reference (False: the op has no derivative)."""
    import torch
    locs = collect_tensors(args, kwargs)
    from hp_agent.dist_op.probe import _get, _put  # pylint: disable=import-outside-toplevel,protected-access
    a, k = list(args), dict(kwargs)
    leaves = []
    for loc in locs:
        t = _get(args, kwargs, loc)
        if t.is_floating_point():
            leaf = t.detach().clone().requires_grad_(True)
            leaves.append(leaf)
            _put(a, k, loc, leaf)
    if not leaves:
        return False
    try:
        out = [o for o in _flat(fn(*a, **k)) if isinstance(o, torch.Tensor) and o.requires_grad]
        if not out:
            return False
        sum(o.float().sum() for o in out).backward()
    except RuntimeError:
        return False
    return True


def _flat(out: Any) -> list:
    from hp_agent.dist_op.probe import flatten  # pylint: disable=import-outside-toplevel
    return flatten(out)


def synthesize(op: str, fn: Callable, samples: Optional[Sequence[Tuple[list, dict]]] = None, *,
               ranks: Sequence[int] = (2, 3), generators: Sequence[str] = GENERATORS,
               partials: Sequence[str] = INPUT_PARTIALS, use_opinfo: bool = True,
               layout_kwargs: Sequence[str] = LAYOUT_KWARGS, max_samples: int = 12, distinct: bool = True,
               budget: Optional[float] = None, replicate_only: bool = False) -> Synthesis:
    """Every accepted strategy of ``fn`` per signature (see the module docstring); ``distinct``: add each
    sample's distinct-sizes variant (:func:`distinct_sizes`); ``budget``: seconds after which no further
    sample call starts (the calls left are named in ``errors``); ``replicate_only``: probe only the
    all-``R`` combination (for ops whose other arguments the signature cannot carry: see :func:`emit`)."""
    import time
    start = time.monotonic()
    pool: List[Tuple[list, dict]] = list(opinfo_samples(op)) if use_opinfo else []
    pool += list(samples or [])
    # each sample followed by its distinct-sizes variant (so a capped run still has both)
    if distinct and not replicate_only:
        pool = [v for s in pool for v in (s, distinct_sizes(fn, s)) if v is not None]
    result = Synthesis(op)
    result.replicate_only = replicate_only
    result.inserted = inserted_dims(fn, pool)
    calls = pool if replicate_only else [call for sample in pool
                                         for call in sweep(fn, sample, layout_kwargs, inserted=result.inserted)]
    for n, (args, kwargs) in enumerate(calls):
        if result.samples >= max_samples * 4:
            break
        if budget is not None and time.monotonic() - start > budget:
            result.errors.append(f"time budget of {budget:g} s reached: {len(calls) - n} sample call(s) not probed")
            result.budget_hit = True
            break
        _one_call(result, fn, args, kwargs, (ranks, generators, partials, layout_kwargs, replicate_only))
    return result


def _evidence(result: Synthesis, fn: Callable, args: list, kwargs: dict) -> Optional[Tuple[list, list]]:
    """(reference outputs, input tensors) of one sample call, or None when it is no evidence: the call
    raises (noted), has no tensor, an empty input or only empty outputs (an empty tensor assembles under
    every placement, and its "best" output placement would wipe the others from the signature; an empty
    output next to others, like ``lstsq``'s residuals, is kept)."""
    import torch
    from hp_agent.dist_op.probe import _get  # pylint: disable=import-outside-toplevel,protected-access
    tensors = [_get(args, kwargs, loc) for loc in collect_tensors(args, kwargs)]
    before = [t.clone() for t in tensors]
    try:
        with torch.no_grad():
            ref = _flat(fn(*args, **kwargs))
    except Exception as exc:  # pylint: disable=broad-except  # an invalid sample: noted, not used
        result.errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:160])
        return None
    _note_writes(result, tensors, before)
    outs = [o for o in ref if isinstance(o, torch.Tensor)]
    # an empty input, or only empty outputs, is no evidence; an empty auxiliary output next to real ones
    # (``_batch_norm_with_update``'s reserve buffer) is kept
    empty = any(t.numel() == 0 for t in tensors) or (outs and all(o.numel() == 0 for o in outs))
    return None if not tensors or empty else (ref, tensors)


def _note_writes(result: Synthesis, tensors: list, before: list) -> None:
    """Record the tensor inputs the reference call wrote in place (running statistics, ``resize_``) and put
    their values back for the probes that follow."""
    import torch
    for i, (t, b) in enumerate(zip(tensors, before)):
        if (t.shape != b.shape or not torch.equal(t.nan_to_num(), b.nan_to_num())) and i not in result.mutated:
            result.mutated.append(i)
        t.data = b


def _accepted_strategies(agreed: Dict[Tuple[str, ...], List[set]], replicate_only: bool) -> set:
    """The strategies of one call from the output placements every generator accepted per combo."""
    found = set()
    for c, v in agreed.items():
        if all(p == "R" for p in c):  # every rank computes the same value: only R (or the value) is a law
            if not all(o & {"R", "value"} for o in v):
                continue
            v = [o & {"R", "value"} for o in v]
        if _partials_consistent(c, _best(v)):
            found.add(Strategy(c, _best(v)))
    if replicate_only:  # a non-layout argument may change the output count (return_indices): one 'R' stands
        # for replicated outputs, so samples with and without the extra output intersect
        found = {Strategy(s.inputs, ("R",)) for s in found if all(o in ("R", "value") for o in s.outputs)}
    return found


def _one_call(result: Synthesis, fn: Callable, args: list, kwargs: dict, how: tuple) -> None:
    """Synthesise one sample call into ``result`` (strategies intersected per signature)."""
    import torch
    ranks, generators, partials, layout_kwargs, replicate_only = how
    evidence = _evidence(result, fn, args, kwargs)
    if evidence is None:
        return
    ref, tensors = evidence
    result.samples += 1
    key = signature(args, kwargs, layout_kwargs, result.inserted)
    combos = [tuple(c) for c in itertools.product(*[_candidates(t, partials) for t in tensors])]
    if replicate_only:
        combos = [tuple("R" for _ in tensors)]
    agreed = _agreed(fn, args, kwargs, combos, ranks, generators)
    found = _accepted_strategies(agreed, replicate_only)
    constant = _constant_flat(ref)
    if not constant and key in result.constant_only:  # the first real evidence of the signature
        for name in ("calls", "evidence", "kwargs", "alternates"):
            getattr(result, name).pop(key, None)
    _record(result, key, tensors, kwargs, [o for o in ref if isinstance(o, torch.Tensor)], found, constant)
    _keep_call(result, key, args, kwargs)
    if result.differentiable is None and any(t.is_floating_point() for t in tensors):
        result.differentiable = _differentiable(fn, args, kwargs)


def _keep_call(result: Synthesis, key: str, args: list, kwargs: dict) -> None:
    """The signature's first sample call (its evidence), or one more of its alternates (up to
    MAX_ALTERNATES)."""
    if key not in result.calls:
        result.calls[key] = (list(args), dict(kwargs))
    elif len(result.alternates.setdefault(key, [])) < MAX_ALTERNATES:
        result.alternates[key].append((list(args), dict(kwargs)))


def _record(result: Synthesis, key: str, tensors: list, kwargs: dict, outs: list, found: set,
            constant: bool = False) -> None:
    """Intersect ``found`` into the signature's strategies; keep the evidence and the shapes.

    A call whose result is ``constant`` (every element equal: ``trapz`` over one point is 0) is no evidence
    for an output placement (any placement 'reproduces' it, and the preferred ``R`` would wipe the others);
    it only disproves the input combos whose local results assemble under no placement (as verify counts
    it). A signature seen on constant results only keeps their strategies (intersected among them)."""
    result.integer_output = result.integer_output or any(not o.is_floating_point() for o in outs)
    old = result.strategies.get(key)
    fresh = old is None
    if constant:
        found, old = _constant_call(result, key, old, found)
    elif key in result.constant_only:  # the first real evidence replaces what constant results gave
        result.constant_only.discard(key)
        old, fresh = None, True
    if not constant and key in result.assembled:
        found = {s for s in found if s.inputs in result.assembled[key]}
    result.strategies[key] = sorted(found if old is None else _intersect(old, found), key=Strategy.text)
    _count_strategies(result, key, len(outs), found, constant, fresh)
    result.evidence.setdefault(key, _describe(tensors, kwargs))
    result.kwargs.setdefault(key, dict(kwargs))
    result.dtypes.setdefault(key, [str(t.dtype) for t in tensors])
    result.shapes.setdefault(key, []).append(([tuple(t.shape) for t in tensors], [tuple(o.shape) for o in outs]))


def _count_strategies(result: Synthesis, key: str, count: int, found: set, constant: bool, fresh: bool) -> None:
    """:attr:`Synthesis.by_count` after one call returning ``count`` tensors (``fresh``: the signature's first
    real evidence); a constant call after real evidence only drops the input combos it disproved."""
    per = {} if fresh else result.by_count.get(key, {})
    if constant and key not in result.constant_only:
        took = result.assembled.get(key, set())
        per = {n: [s for s in rows if s.inputs in took] for n, rows in per.items()}
    else:
        per[count] = sorted(found if count not in per else set(per[count]) & found, key=Strategy.text)
    result.by_count[key] = per


def _constant_call(result: Synthesis, key: str, old: Optional[Sequence[Strategy]],
                   found: set) -> Tuple[set, Optional[Sequence[Strategy]]]:
    """(strategies, earlier ones to intersect with) after a call with a constant result (see :func:`_record`)."""
    took = result.assembled.setdefault(key, {s.inputs for s in found})
    took &= {s.inputs for s in found}
    if old is not None and key not in result.constant_only:
        return {s for s in old if s.inputs in took}, None
    result.constant_only.add(key)
    return found, old


def _intersect(old: Sequence[Strategy], found: set) -> set:
    """Strategies of both samples of one signature. When their output counts differ (``dsplit(x, [1, 2, 3])``
    gives 4 tensors, ``dsplit(x, 2)`` 2), a strategy is kept only with one placement for every output, as a
    one-output row (such a signature has no table shape: it can only replicate)."""
    if {len(s.outputs) for s in old} == {len(s.outputs) for s in found}:
        return set(old) & found

    def uniform(rows) -> set:
        return {(s.inputs, s.outputs[0]) for s in rows if len(set(s.outputs)) == 1}
    return {Strategy(i, (o,)) for i, o in uniform(old) & uniform(found)}


def _describe(tensors: Sequence[Any], kwargs: dict) -> str:
    shapes = ", ".join("x".join(str(s) for s in t.shape) or "scalar" for t in tensors)
    return f"({shapes})" + (f" {kwargs}" if kwargs else "")


# ---------------------------------------------------------------------- generalisation
def equation_strategies(equation: str, partial_linear: bool = True) -> List[Strategy]:
    """The strategies an einsum-like factor rule implies on a 1-D mesh: a free letter sharded on every
    operand that has it (others replicated) gives the output sharded on it; a contracted letter gives
    ``P(sum)``; one ``P(sum)`` operand times replicated ones stays ``P(sum)`` (multilinear); all ``R``."""
    ins, out = equation.replace(" ", "").split("->")
    operands = ins.split(",")
    found = [Strategy(tuple("R" for _ in operands), ("R",))]
    for letter in sorted(set("".join(operands))):
        inputs = tuple(f"S({o.index(letter)})" if letter in o else "R" for o in operands)
        found.append(Strategy(inputs, (f"S({out.index(letter)})" if letter in out else "P(sum)",)))
    if partial_linear:
        for i in range(len(operands)):
            found.append(Strategy(tuple("P(sum)" if j == i else "R" for j in range(len(operands))), ("P(sum)",)))
    return sorted(set(found), key=Strategy.text)


def _letters_for(shapes_in: List[Tuple[int, ...]], shape_out: Tuple[int, ...]) -> Optional[str]:
    """An equation from sizes: equal sizes across operands share a letter, the output takes the letters of
    its sizes (None when a size is ambiguous or missing)."""
    by_size: Dict[int, str] = {}
    pool = iter("ijklmnopqrstuvwxyzabcdefgh")
    operands = []
    for shape in shapes_in:
        lets = ""
        for s in shape:
            if s not in by_size:
                by_size[s] = next(pool)
            lets += by_size[s]
        if len(set(lets)) != len(lets):
            return None  # a repeated size inside one operand: ambiguous
        operands.append(lets)
    try:
        out = "".join(by_size[s] for s in shape_out)
    except KeyError:
        return None
    if len(set(out)) != len(out):
        return None
    return ",".join(operands) + "->" + out


def _equation_from_shapes(synth: Synthesis) -> Optional[str]:
    """The one equation every sample's sizes give (None: none, several, or a signature with arguments)."""
    equation = None
    for key, shapes in synth.shapes.items():
        if ";" in key:
            return None
        for shapes_in, shapes_out in shapes:
            if len(shapes_out) != 1:
                return None
            eq = _letters_for(shapes_in, shapes_out[0])
            if eq is None:
                continue
            if equation is not None and _canonical(eq) != _canonical(equation):
                return None
            equation = equation or eq
    if equation is not None and not all(_fits(equation, shapes_in, shapes_out[0]) for shapes in synth.shapes.values()
                                        for shapes_in, shapes_out in shapes):
        return None  # a sample the equation cannot explain (another operand count or rank, a size mismatch)
    return equation


def _fits(equation: str, shapes_in: List[Tuple[int, ...]], shape_out: Tuple[int, ...]) -> bool:
    """The sample's sizes are consistent with ``equation`` (operand count, ranks, one size per letter)."""
    ins, out = equation.split("->")
    operands = ins.split(",")
    if len(operands) != len(shapes_in) or any(len(o) != len(s) for o, s in zip(operands, shapes_in)) \
            or len(out) != len(shape_out):
        return False
    sizes: Dict[str, int] = {}
    for letters, shape in list(zip(operands, shapes_in)) + [(out, shape_out)]:
        for letter, size in zip(letters, shape):
            if sizes.setdefault(letter, size) != size:
                return False
    return True


def factor_equation(synth: Synthesis) -> Optional[str]:
    """An einsum-like factor equation that explains every signature's shapes and whose implied strategies
    equal the synthesised ones (the P(sum|R) part) on the signature of its ranks (None when there is none)."""
    equation = _equation_from_shapes(synth)
    if equation is None:
        return None
    implied = {s.text() for s in equation_strategies(equation)}
    ranks = ",".join(str(len(o)) for o in equation.split("->", maxsplit=1)[0].split(","))
    for key, strategies in synth.strategies.items():
        got = {s.text() for s in strategies if all(not p.startswith("P(") or p == "P(sum)" for p in s.inputs)}
        if key == ranks and got != implied:
            return None
    return equation


def _canonical(equation: str) -> str:
    mapping: Dict[str, str] = {}
    pool = iter("abcdefghijklmnopqrstuvwxyz")
    return "".join(mapping.setdefault(c, next(pool)) if c.isalpha() else c for c in equation)


def _relation(d: int, v: int, out: str) -> Optional[str]:
    """How shard dim ``d`` (not the argument's ``v``) maps: ``same``, ``shifted`` (a removed dim before it),
    ``either`` (d < v: both), else the output placement itself."""
    if out == f"S({d})":
        return "either" if d < v else "same"
    if d > v and out == f"S({d - 1})":
        return "shifted"
    return out


def conditions(synth: Synthesis, arg: str = "dim") -> List[str]:
    """Conditional rules of a one-tensor op generalised over ``arg`` across the swept signatures:
    ``S(d) -> S(d) when d != dim``, ``S(d) -> S(d if d < dim else d - 1) when d != dim`` (a reduced dim),
    and what ``S(dim)`` gives; only rules that hold on every signature carrying ``arg``."""
    others, selves = set(), set()
    for key, strategies in synth.strategies.items():
        head, *rest = key.split(";")
        parts = dict(p.split("=", 1) for p in rest)
        if "," in head or not parts.get(arg, "x").isdigit():
            continue
        v = int(parts[arg])
        shard_map = {int(s.inputs[0][2:-1]): s.outputs[0] for s in strategies if s.inputs[0].startswith("S(")}
        for d in range(int(head)):
            out = shard_map.get(d, "R")
            if d == v:
                selves.add(out.replace(f"S({d})", f"S({arg})"))
            else:
                others.add(_relation(d, v, out))
    others.discard("either")
    lines = []
    if others == {"same"}:
        lines.append(f"S(d) -> S(d) when d != {arg}")
    elif others == {"shifted"}:
        lines.append(f"S(d) -> S(d if d < {arg} else d - 1) when d != {arg}")
    if len(selves) == 1:
        lines.append(f"S({arg}) -> {next(iter(selves))}")
    return lines


def permutation(synth: Synthesis) -> Dict[str, Dict[int, int]]:
    """Per signature of a one-tensor op: the input dim -> output dim map of its shard strategies (``rot90``:
    ``S(0) -> S(1)`` for ``k=1``), for the plan's display."""
    out = {}
    for key, strategies in synth.strategies.items():
        if "," in key.split(";")[0]:
            continue
        out[key] = {int(s.inputs[0][2:-1]): int(s.outputs[0][2:-1]) for s in strategies
                    if s.inputs[0].startswith("S(") and s.outputs[0].startswith("S(")}
    return out


def _holds(shapes, k: int, j: int, size_of: Callable[[List[Tuple[int, ...]]], Optional[int]]) -> bool:
    """``size_of(input shapes)`` equals output ``k``'s dim ``j`` in every sample."""
    for ins, outs in shapes:
        if len(outs) <= k or len(outs[k]) <= j or size_of(ins) != outs[k][j]:
            return False
    return True


def _dim_size(i: int, d: int) -> Callable[[List[Tuple[int, ...]]], Optional[int]]:
    return lambda ins: ins[i][d] if len(ins) > i and len(ins[i]) > d else None


def _dim_expression(shapes: List[Tuple[List[Tuple[int, ...]], List[Tuple[int, ...]]]], k: int, j: int) -> Any:
    """``"i.d"`` (input ``i``'s dim ``d``) or a constant size explaining output ``k``'s dim ``j`` in every
    sample; ``"i.d|j.e"`` (the maximum) when one dim of each of several inputs fits (broadcasting);
    ``"i.d*j.e"`` (a product, kron); None when nothing fits or two dims of one input do (ambiguous: the
    samples need distinct sizes)."""
    first_in = shapes[0][0]
    dims = [(i, d) for i, shape in enumerate(first_in) for d in range(len(shape))]
    fits = [f"{i}.{d}" for i, d in dims if _holds(shapes, k, j, _dim_size(i, d))]
    if len(fits) == 1:
        return fits[0]
    if fits:
        inputs = [f.split(".")[0] for f in fits]
        # one dim per input (broadcast operands): the output size is their maximum; two dims of one input: ambiguous
        return "|".join(fits) if len(set(inputs)) == len(inputs) else None
    sizes = {outs[k][j] for _, outs in shapes if len(outs) > k and len(outs[k]) > j}
    if len(sizes) == 1:
        return sizes.pop()
    return _product_expression(shapes, dims, k, j)


def _product_expression(shapes, dims: List[Tuple[int, int]], k: int, j: int) -> Optional[str]:
    """``"i.d*j.e"`` when exactly one product of two inputs' dims explains the output dim (kron)."""
    products = []
    for (i, d), (i2, d2) in itertools.combinations(dims, 2):
        a, b = _dim_size(i, d), _dim_size(i2, d2)
        if i < i2 and _holds(shapes, k, j, lambda ins, a=a, b=b: (a(ins) or 0) * (b(ins) or 0)):
            products.append(f"{i}.{d}*{i2}.{d2}")
    return products[0] if len(products) == 1 else None


def shape_expressions(synth: Synthesis) -> Tuple[Dict[str, List[List[Any]]], List[str]]:
    """Per signature, per output, the output shape as ``"input.dim"`` items or sizes; plus what could not
    be expressed (a question for the reviewer)."""
    out: Dict[str, List[List[Any]]] = {}
    problems = []
    for key, shapes in sorted(synth.shapes.items()):
        ranks = {tuple(len(o) for o in outs) for _, outs in shapes}
        if len(ranks) != 1:
            problems.append(f"{key}: the output rank varies between samples")
            continue
        exprs = []
        for k, rank in enumerate(next(iter(ranks))):
            items = [_dim_expression(shapes, k, j) for j in range(rank)]
            if any(i is None for i in items):
                problems.append(f"{key}: output {k} dims {[j for j, i in enumerate(items) if i is None]} match no "
                                "single input dim or constant in every sample (ambiguous or computed)")
                break
            exprs.append(items)
        else:
            out[key] = exprs
    return out, problems


def _with_defaults(key: str, layout: Dict[str, Tuple[int, Any]]) -> str:
    parts = key.split(";")
    have = dict(p.split("=", 1) for p in parts[1:])
    ndim = int(parts[0].split(",")[0]) if parts[0] else 0
    for name, (_, default, *extra) in layout.items():
        if name not in have:
            have[name] = str(_norm(default, ndim + (INSERTED in extra), name))
    return ";".join([parts[0]] + [f"{k}={have[k]}" for k in sorted(have)])


def _tables(synth: Synthesis, shapes: Dict[str, Any], spec: Dict[str, Any],
            varying: Sequence[str] = ()) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Strategy and shape tables keyed by the full signature (every layout argument, defaults filled in; a
    periodic argument modulo its period: signatures that fold together keep the strategies they share, and
    are dropped when their output shapes differ). In a signature of ``varying`` (its samples return different
    numbers of outputs: ``vsplit(x, 2)`` and ``vsplit(x, 3)``, ``max_pool1d``'s ``return_indices``) every
    row gives one placement to all outputs (:func:`_intersect`), written with the repeat mark
    (``S(1)->S(1)*``): the table rule repeats it to each call's output count (its shapes are ``meta``); the
    strategies of one observed count that no repeated row gives follow as fixed-count rows (:func:`_count_rows`)."""
    table: Dict[str, List[str]] = {}
    shape_table: Dict[str, Any] = {}
    clash = set()
    for key in sorted(k for k in set(synth.strategies) & set(shapes) if synth.strategies[k]):  # evidence only
        full = _fold(_with_defaults(key, spec), synth.periods)
        rows = [s.text() for s in synth.strategies[key]] if key not in varying else \
            [s.text() + REPEAT for s in synth.strategies[key]] + _count_rows(synth, key)
        if full in table:
            table[full] = [r for r in table[full] if r in rows]
            if shape_table[full] != shapes[key] or not table[full]:
                clash.add(full)
            continue
        table[full], shape_table[full] = rows, shapes[key]
    for full in clash:
        del table[full], shape_table[full]
    return table, shape_table


def _count_rows(synth: Synthesis, key: str) -> List[str]:
    """Fixed-count rows of a signature whose output count varies: the strategies every sample returning that
    many tensors accepted, that no repeated row already gives (``vsplit(x, 1)`` returns ``x`` whole, so with
    one output ``S(0)->S(0)`` holds, although no split into two or more does)."""
    repeated = {(s.inputs, s.outputs[0]) for s in synth.strategies.get(key, [])}
    out = []
    for _, rows in sorted(synth.by_count.get(key, {}).items()):
        out += [s.text() for s in rows if len(set(s.outputs)) != 1 or (s.inputs, s.outputs[0]) not in repeated]
    return out


def _fold(key: str, periods: Dict[str, int]) -> str:
    """``key`` with each periodic integer argument taken modulo its period."""
    if not periods:
        return key
    parts = key.split(";")
    for i, part in enumerate(parts[1:], 1):
        name, value = part.split("=", 1)
        if name in periods and re.fullmatch(r"-?\d+", value):
            parts[i] = f"{name}={int(value) % periods[name]}"
    return ";".join(parts)


def periods_of(fn: Callable, pool: Sequence[Tuple[list, dict]], layout: Dict[str, Tuple[int, Any]],
               candidates: Sequence[int] = (2, 3, 4, 6, 8)) -> Dict[str, int]:
    """Integer layout arguments (not dims) whose results repeat with a period: ``rot90``'s ``k`` gives the
    same output for ``k`` and ``k + 4``. Checked on the first sample that passes the argument, for every
    value in ``[-P, P)`` (each call must run and equal the call at ``value + P``); the smallest P wins."""
    found = {}
    for name in layout:
        if name in _DIMS_ARGS or name == "keepdim":
            continue
        sample = next(((a, k) for a, k in pool if isinstance(k.get(name), int) and not isinstance(k[name], bool)),
                      None)
        if sample is None:
            continue
        for period in candidates:
            if all(_periodic(fn, s, name, period) for s in (sample, _grown(sample))):
                found[name] = period
                break
    return found


def _grown(sample: Tuple[list, dict]) -> Tuple[list, dict]:
    """The sample with every dim of every float tensor 3 larger (a period that is a size of the sample, like
    ``roll``'s, does not survive it)."""
    import torch
    from hp_agent.dist_op.probe import _get, _put  # pylint: disable=import-outside-toplevel,protected-access
    args, kwargs = list(sample[0]), dict(sample[1])
    for loc in collect_tensors(args, kwargs):
        t = _get(args, kwargs, loc)
        if t.is_floating_point():
            _put(args, kwargs, loc, torch.rand([s + 3 for s in t.shape], dtype=t.dtype) + 0.5)
    return args, kwargs


def _periodic(fn: Callable, sample: Tuple[list, dict], name: str, period: int) -> bool:
    """``fn`` gives the same result at ``name=v`` and ``v + period`` for every ``v`` in ``[-period, period)``,
    and a different one at 0 and 1 (every call must run)."""
    import torch
    args, kwargs = sample

    def at(v: int) -> Any:
        return fn(*args, **dict(kwargs, **{name: v}))
    try:
        with torch.no_grad():
            return all(close_all(at(v), at(v + period)) for v in range(-period, period)) \
                and not close_all(at(0), at(1))
    except Exception:  # pylint: disable=broad-except  # a value the op refuses: no period
        return False


def close_all(a: Any, b: Any) -> bool:
    """Two op results (tensors, tuples of them) equal: same shapes and values."""
    from hp_agent.dist_op.probe import close  # pylint: disable=import-outside-toplevel
    fa, fb = _flat(a), _flat(b)
    return len(fa) == len(fb) and all(close(x, y) for x, y in zip(fa, fb))


def emit(synth: Synthesis, layout: Dict[str, Tuple[int, Any]]) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """The registry entry (rule, module, options) that executes the synthesis as data, and the open
    questions (an entry is None when the synthesis cannot be expressed: then a person decides).

    ``layout``: position and default of each layout argument the op has (from its interface).

    In order: a :class:`FactorRule` equation; a :class:`StrategyTableRule` table with ``fallback: replicate``
    (a call whose signature the table lacks runs replicated, never refused, never guessed); a
    :class:`ReplicateRule` when the table cannot be written (output shapes that no input dim explains, or
    arguments the signature cannot carry: :attr:`Synthesis.extra_args`) but every signature accepts
    ``R -> R`` on every generator."""
    if not synth.strategies:
        return None, ["no sample call ran: nothing was synthesised"]
    equation = factor_equation(synth) if not synth.extra_args else None
    if equation is not None and not layout:
        return {"rule": "FactorRule", "module": TABLE_MODULE, "options": {"equation": equation}}, []
    if synth.replicate_only:
        entry, problems = None, ["only the all-R strategy was probed (replicate_only)"]
    elif synth.extra_args and not _sharded(synth):
        entry, problems = None, [f"arguments {synth.extra_args} are not layout arguments and no sharded strategy "
                                 "holds for every observed value of them"]
    else:
        entry, problems = _table_entry(synth, layout, meta=bool(synth.extra_args))
    if entry is not None and synth.mutated:  # the table rule has no write-back of in-place updates
        entry, problems = None, [f"tensor inputs {sorted(synth.mutated)} are written in place"]
    if entry is not None:
        return entry, []
    if _replicates(synth):
        return _replicate_entry(synth), []
    return None, problems + ["R -> R is not accepted on every signature (a nondeterministic or failing op)"]


def _replicate_entry(synth: Synthesis) -> Dict[str, Any]:
    """The :class:`ReplicateRule` entry; ``mutates`` lists the tensor inputs the op writes in place (the rule
    then refuses them sharded or partial: gathering would update a copy)."""
    entry: Dict[str, Any] = {"rule": "ReplicateRule", "module": TABLE_MODULE}
    if synth.mutated:
        entry["options"] = {"mutates": sorted(synth.mutated)}
    return entry


def _replicates(synth: Synthesis) -> bool:
    """Some signature accepts the all-``R`` strategy with replicated outputs, and every signature that
    accepts anything accepts it (a signature with no accepted strategy at all — an empty output, values no
    generator could make valid — is no evidence either way)."""
    def has_r(rows: List[Strategy]) -> bool:
        return any(all(p == "R" for p in s.inputs) and all(o in ("R", "value") for o in s.outputs) for s in rows)
    tables = [rows for rows in synth.strategies.values() if rows]
    return bool(tables) and all(has_r(rows) for rows in tables)


def _value_outputs(synth: Synthesis) -> bool:
    """Some accepted strategy has an output that is no placement (a Python value such as ``item()``'s)."""
    return any(not _PLACEMENT_TEXT.match(o) for rows in synth.strategies.values() for st in rows for o in st.outputs)


def _replicated_rows_only(table: Dict[str, List[str]]) -> bool:
    """Every row of every signature has only replicated inputs (the table would gather everything)."""
    return all(all(p == "R" for p in row.split("->")[0].split(",")) for rows in table.values() for row in rows)


def _sharded(synth: Synthesis) -> bool:
    """Some signature accepts a strategy with an input that is not replicated."""
    return any(any(p != "R" for p in st.inputs) for rows in synth.strategies.values() for st in rows)


def _varying_outputs(synth: Synthesis) -> List[str]:
    """Signatures whose samples return different numbers of outputs."""
    return [k for k, shapes in synth.shapes.items() if len({len(outs) for _, outs in shapes}) > 1]


def _shape_items(synth: Synthesis, meta: bool) -> Dict[str, Any]:
    """Per signature the output shape expressions, or ``"meta"`` where none explains them (or, ``meta``,
    everywhere: non-layout arguments change them): the backend computes those from the global input shapes
    without data."""
    shapes: Dict[str, Any] = {} if meta else shape_expressions(synth)[0]
    shapes.update({k: "meta" for k in synth.strategies if k not in shapes})
    return shapes


def _table_entry(synth: Synthesis, layout: Dict[str, Tuple[int, Any]],
                 meta: bool = False) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """The :class:`StrategyTableRule` entry (``fallback: replicate``), or None and why not; ``meta``: the
    output shapes depend on non-layout arguments, so every signature's shapes are computed by the backend
    (``"meta"``) instead of written as expressions (so are those of a signature no expression explains)."""
    if _value_outputs(synth):
        return None, ["an output is not a tensor (a Python value): a table holds tensor placements only"]
    shapes = _shapeable(synth, _shape_items(synth, meta))
    used = sorted({p.split("=", 1)[0] for key in synth.strategies for p in key.split(";")[1:]})
    missing = [u for u in used if u not in layout]
    if missing:
        return None, [f"layout arguments {missing} have no position/default in the interface"]
    spec = {u: layout[u] for u in used}
    table, shape_table = _tables(synth, shapes, spec, set(_varying_outputs(synth)))
    if not table:
        return None, ["no signature could be expressed"]
    if _replicated_rows_only(table):
        return None, ["the table keeps no sharded or partial input: ReplicateRule runs the same"]
    return {"rule": "StrategyTableRule", "module": TABLE_MODULE,
            "options": {"layout": _layout_option(synth, spec), "table": table, "shapes": shape_table,
                        "fallback": "replicate"}}, []


def _layout_option(synth: Synthesis, spec: Dict[str, Any]) -> Dict[str, List[Any]]:
    """The table's ``layout`` option: per argument [position, default], its period, the inserted-dim mark."""
    return {u: list(v) + ([synth.periods[u]] if u in synth.periods else [])
            + ([INSERTED] if u in synth.inserted else []) for u, v in spec.items()}


def _shapeable(synth: Synthesis, shapes: Dict[str, Any]) -> Dict[str, Any]:
    """``shapes`` without the ``meta`` signatures whose evidence call the backend cannot shape."""
    return {k: v for k, v in shapes.items()
            if v != "meta" or k not in synth.calls or _backend_shapes(synth.op, synth.calls[k])}


def _backend_shapes(op: str, call: Tuple[list, dict]) -> bool:
    """True when the torch backend computes the global output shapes of ``call`` without data, as a ``meta``
    signature needs at run time (``Platform.output_shapes``); a signature it cannot shape (``tensor_split``
    with a tensor of split indices, read as data) would only ever run replicated, so it gets no rows."""
    from hp_agent.dist_op.probe import _get, _put  # pylint: disable=import-outside-toplevel,protected-access
    from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
    args, kwargs = list(call[0]), dict(call[1])
    locs = collect_tensors(args, kwargs)
    shapes = [tuple(_get(args, kwargs, loc).shape) for loc in locs]
    for i, loc in enumerate(locs):
        _put(args, kwargs, loc, ("__tensor__", i))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_platform("torch").output_shapes(op, args, kwargs, shapes) is not None


@dataclass
class OpSynthesis:
    """What ``hp-agent dist-op synth`` reports for one op."""

    op: str
    synthesis: Synthesis
    equation: Optional[str]
    conditions: List[str]
    entry: Optional[Dict[str, Any]]
    questions: List[str]
    sources: Dict[str, int]
    seconds: float

    def to_dict(self) -> Dict[str, Any]:
        """JSON form."""
        s = self.synthesis
        return {"op": self.op, "samples": s.samples, "sources": self.sources, "differentiable": s.differentiable,
                "integer_output": s.integer_output, "table": s.table(), "evidence": dict(sorted(s.evidence.items())),
                "equation": self.equation, "conditions": self.conditions, "entry": self.entry,
                "replicate_only": s.replicate_only, "extra_args": s.extra_args, "budget_hit": s.budget_hit,
                "mutated": s.mutated,
                "questions": self.questions, "seconds": round(self.seconds, 2)}


def _keywordize(sample: Tuple[list, dict], iface: Any, layout_kwargs: Sequence[str],
                fn: Optional[Callable] = None) -> Tuple[list, dict]:
    """Layout arguments passed by position moved to keywords (so the sweep and the signature see them), with
    the non-tensor arguments after them (``cdist(x1, x2, p, compute_mode)``: ``p`` is keyed only by keyword;
    kept positional when ``fn`` refuses the call by keyword)."""
    import torch
    args, kwargs = list(sample[0]), dict(sample[1])
    names = [p.name for p in iface.params]
    tail = len(args)
    while tail > 1 and tail - 1 < len(names) and not isinstance(args[tail - 1], torch.Tensor) \
            and not iface.params[tail - 1].keyword_only:
        tail -= 1
    first = next((i for i in range(tail, len(args)) if names[i] in layout_kwargs), len(args))
    moved = dict(kwargs, **{names[i]: args[i] for i in range(first, len(args))})
    if fn is None or first == len(args) or _runs(fn, args[:first], moved):
        args, kwargs = args[:first], moved
    for name in names[len(args):]:  # tensors passed by keyword (prelu's weight) go to their positions
        param = iface.params[names.index(name)]
        if not isinstance(kwargs.get(name), torch.Tensor) or param.keyword_only:  # segment_reduce(*, lengths)
            break
        args.append(kwargs.pop(name))
    return args, kwargs


def named_scalars(sample: Tuple[list, dict], iface: Any, fn: Optional[Callable] = None) -> Tuple[list, dict]:
    """The non-tensor arguments after the last tensor argument moved to keywords by name (``lp_pool1d(x, 2,
    3)`` -> ``lp_pool1d(x, norm_type=2, kernel_size=3)``), so every UT scenario and ST case of the plan keeps
    the op's required scalars (the cases store tensors by shape and the other arguments by name). Kept
    positional when ``fn`` refuses the call by keyword."""
    import torch
    args, kwargs = list(sample[0]), dict(sample[1])
    names = [p.name for p in iface.params]

    def tensor_like(v: Any) -> bool:
        return isinstance(v, torch.Tensor) or (type(v) in (list, tuple) and any(  # pylint: disable=unidiomatic-typecheck
            isinstance(t, torch.Tensor) for t in v))
    last = max((i for i, a in enumerate(args) if tensor_like(a)), default=-1)
    cut = last + 1
    if last < 0 or cut >= len(args) or len(args) > len(names) or any(names[i] in kwargs for i in range(cut, len(args))):
        return args, kwargs
    moved = dict(kwargs, **{names[i]: args[i] for i in range(cut, len(args))})
    if fn is not None and not _runs(fn, args[:cut], moved):
        return args, kwargs
    return args[:cut], moved


def _with_layout_defaults(sample: Tuple[list, dict], layout: Dict[str, Tuple[int, Any]]) -> Tuple[list, dict]:
    """Every layout argument passed by keyword (its default when absent), so one call has one signature."""
    args, kwargs = sample
    kw = dict(kwargs)
    for name, (pos, default) in layout.items():
        if name not in kw and pos >= len(args) and default is not None:
            kw[name] = default
    return args, kw


def extra_arguments(pool: Sequence[Tuple[list, dict]], layout_kwargs: Sequence[str] = LAYOUT_KWARGS) -> List[str]:
    """Non-tensor arguments of the samples that are not layout arguments (positions as ``#i``, keywords by
    name): a table keyed by ranks and layout arguments cannot tell their values apart."""
    import torch
    found = []

    def tensor_like(v: Any) -> bool:
        return isinstance(v, torch.Tensor) or (type(v) in (list, tuple) and bool(v)  # pylint: disable=unidiomatic-typecheck
                                               and all(isinstance(t, torch.Tensor) for t in v))
    for args, kwargs in pool:
        found += [f"#{i}" for i, a in enumerate(args) if not tensor_like(a) and a is not None]
        found += [k for k, v in kwargs.items() if k not in layout_kwargs and not tensor_like(v) and v is not None]
    return sorted(set(found))


def _move(value: Any) -> Any:
    """A non-layout argument moved: ints + 1, floats + 0.7, bools flipped, each item of a tuple/list of those."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.7
    if type(value) in (list, tuple) and value and all(isinstance(v, (int, float)) for v in value):  # pylint: disable=unidiomatic-typecheck
        return type(value)(_move(v) for v in value)
    return value


def moved_arguments(fn: Callable, sample: Tuple[list, dict],
                    layout_kwargs: Sequence[str] = LAYOUT_KWARGS) -> Optional[Tuple[list, dict]]:
    """``sample`` with every non-tensor argument that is not a layout argument moved (:func:`_move`:
    ``kernel_size=2`` -> 3, ``eps=1e-5`` -> 0.7..., ``training=True`` -> False), or None when nothing moves
    or the op refuses the moved call. It has the sample's signature, so a strategy is kept for the signature
    only if it also holds for these values (strategies are intersected across a signature's samples)."""
    import torch
    args, kwargs = sample
    new_args = [a if i == 0 or isinstance(a, torch.Tensor) else _move(a) for i, a in enumerate(args)]
    new_kwargs = {k: v if k in layout_kwargs or isinstance(v, torch.Tensor) else _move(v) for k, v in kwargs.items()}
    if repr((new_args[1:], sorted(new_kwargs.items()))) == repr((list(args[1:]), sorted(kwargs.items()))):
        return None
    return (new_args, new_kwargs) if _runs(fn, new_args, new_kwargs) else None


def op_layout(iface: Any) -> Dict[str, Tuple[int, Any]]:
    """Position and default of each layout argument of an op's interface (what :func:`emit` takes)."""
    return {p.name: (i, p.default if p.has_default else None) for i, p in enumerate(iface.params)
            if p.name in LAYOUT_KWARGS and not p.tensor}


#: seconds of synthesis per op after which no further sample call starts (the median target is 60 s per op)
SYNTH_BUDGET = 20.0


def synth_op(op: str, use_opinfo: bool = True, ranks: Sequence[int] = (2, 3),
             budget: Optional[float] = SYNTH_BUDGET, replicate_only: bool = False) -> OpSynthesis:
    """Synthesise ``op`` (a torch name) from OpInfo's samples and the pipeline's own, and emit its entry.

    An op whose samples carry non-layout arguments (``extra_arguments``: ``kernel_size``, ``size``, ``eps``)
    is probed with those held at each sample's values and at moved values (:func:`moved_arguments`): a
    strategy is kept for a signature only if it holds for every such call and every value generator, and
    the table's output shapes are computed by the backend (``meta``), since the arguments change them.
    An op with ``replicate_only`` (one that crashed on a shard) is probed for the all-``R`` strategy only.
    Every op stops starting sample calls after ``budget`` seconds."""
    import time
    from hp_agent.dist_op.interface import resolve_torch, torch_interface
    from hp_agent.dist_op.samples import samples_for
    start = time.monotonic()
    fn = resolve_torch(op)
    iface = torch_interface(op)
    layout = op_layout(iface)
    from_db = opinfo_samples(op) if use_opinfo else []
    if from_db and not any(_runs(fn, *sample) for sample in from_db):  # OpInfo tests it through a wrapper
        from_db = captured_samples(op, fn)
    try:
        own = samples_for(op)
    except Exception:  # pylint: disable=broad-except  # the schema gave no sample: OpInfo's only
        own = []
    pool = [_with_layout_defaults(named_scalars(_keywordize(s, iface, LAYOUT_KWARGS, fn), iface, fn), layout)
            for s in from_db + own]
    extra = extra_arguments(pool)
    if extra:  # each sample followed by its moved variant: a row must hold for every observed argument value
        pool = [v for s in pool for v in (s, moved_arguments(fn, s)) if v is not None]
    synth = synthesize(op, fn, pool, ranks=ranks, use_opinfo=False, budget=budget, replicate_only=replicate_only)
    synth.extra_args = extra
    synth.periods = periods_of(fn, pool, layout) if not extra else {}
    synth.opinfo = opinfo_name(op)
    entry, questions = emit(synth, layout)
    return OpSynthesis(op, synth, factor_equation(synth), conditions(synth), entry, questions,
                       {"opinfo": len(from_db), "pipeline": len(own)}, time.monotonic() - start)
