# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Rules as data: synthesised sharding strategies executed by two generic classes (no Python per op).

``hp-agent dist-op synth`` finds, on simulated meshes, every input-placement combination whose local
results assemble to the global result; what it finds is written into the op's registry entry:

* :class:`FactorRule` — an einsum-like factor equation (``outer``: ``{equation: "i,j->ij"}``): the
  matmul family's letter strategies (a free letter sharded everywhere it appears keeps the output
  sharded on it; a contracted letter gives ``Partial(sum)``; one ``Partial(sum)`` operand stays partial);
* :class:`StrategyTableRule` — a per-signature strategy table where no equation fits::

      torch.rot90:
        rule: StrategyTableRule
        module: hyper_parallel.core.ops.rules.table
        options:
          layout: {k: [1, 1, 4], dims: [2, [0, 1]]}       # argument: [position, default(, period)]
          table: {"2;dims=[0, 1];k=1": ["R->R", "S(0)->S(1)", "P(sum)->P(sum)"], ...}
          shapes: {"2;dims=[0, 1];k=1": [["0.1", "0.0"]]}  # per output: "input.dim", "i.d|j.e" (max), "i.d*j.e", a size

  A signature's shapes may be ``meta`` instead: for ops whose other arguments (``kernel_size``, ``size``,
  ``groups``) change the output shape, the backend computes the global output shapes from the global input
  shapes without data (``Platform.output_shapes``; torch: the op on ``meta`` tensors); when it cannot, the
  call runs replicated (``fallback: replicate``) or is refused. The rows of such an op hold for every argument
  value the synthesis observed (each sample's own values and the values moved), not only one.

  A row may end in ``when CONDITION`` (:mod:`hyper_parallel.core.ops.conditions`: argument values such as
  ``value@2 == 0`` or ``kernel_size@1 == stride@2 == 1``, shard layouts ``even`` / ``nonempty``): it is
  offered only to calls for which the condition holds (option ``args``: ``name: [position, default]`` of
  bare argument names in conditions); otherwise the decision goes on as if the row were absent.

  Ops whose output COUNT follows the call (``vsplit(x, 2)`` returns 2 tensors, ``vsplit(x, [1, 3])`` 3;
  ``max_pool1d`` 1 or 2 by ``return_indices``; ``unbind_copy`` one per slice) use rows whose last output ends
  with ``*``: it repeats to the call's output count (at least once; ``"S(1)->S(1)*"`` gives every output
  ``S(1)``, ``"S(0)->S(0),R*"`` the first ``S(0)`` and the rest ``R``). The count is the number of output
  shapes (``meta``: the backend's, so such signatures have ``meta`` shapes); a row naming a fixed number of
  outputs applies only to calls returning that many. A call no row fits is refused with a ``RuleError``
  naming both counts (or runs replicated with ``fallback: replicate``)::

      torch.vsplit:
        options: {layout: {}, table: {"2": ["R->R*", "S(1)->S(1)*", "P(sum)->P(sum)*"]}, shapes: {"2": meta},
                  fallback: replicate}

  A signature is the inputs' ranks plus the layout arguments' values (dims normalised to >= 0; an integer
  argument with a period, found by the synthesis on the op's own results, taken modulo it). Per mesh
  dim, the inputs' current placements are kept when the table has them; else the strategy that keeps the
  most inputs and gathers (``Replicate``) the rest; a tensor dim already sharded by an earlier mesh dim is
  gathered on later ones. A signature the table does not hold is refused with a ``RuleError`` (never a
  guess) — unless the entry says ``fallback: replicate``: then that call runs as :class:`ReplicateRule` does;
* :class:`ReplicateRule` — what the synthesis emits when every signature's only strategies are ``R -> R``
  (and ``Partial`` inputs reduced first), or its sharded strategies cannot be written as a table that
  covers every call: every input is gathered (``Replicate``), each rank runs the whole op, and every tensor
  output is ``Replicate`` with the shape the local run returns. Always correct for a deterministic op (each
  rank computes the single-device result); it communicates (one all-gather per sharded input), so it is
  the coverage floor, not a fast path. An in-place op (name ending in ``_``) on an input that is not
  replicated is refused: gathering would copy it, and the shards would never see the update; so is any
  tensor input listed in option ``mutates`` (inputs the synthesis saw written in place, e.g. running
  statistics).
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hyper_parallel.core.ops.conditions import Row, condition_places, parse_condition, split_row
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule, RuleError
from hyper_parallel.core.ops.rules.matmul import EinsumRule, _Problem
from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard

__all__ = ["FactorRule", "StrategyTableRule", "ReplicateRule", "parse_strategy", "signature_of", "META", "REPEAT",
           "repeated_outputs"]

_EQUATION = re.compile(r"^([a-z]*)(,[a-z]*)*->[a-z]*$")
_PLACEMENT = re.compile(r"^(R|S\((\d+)\)|P\((sum|avg|max|min)\))$")
_DIM_ARGS = ("dim", "dim0", "dim1", "start_dim", "end_dim")
#: ``shapes`` value of a signature whose output shapes depend on arguments the table does not key on
#: (``avg_pool1d``'s ``kernel_size``): the backend computes them from the global input shapes without data
META = "meta"
#: suffix of a row's last output placement that repeats to the call's output count (``"S(1)->S(1)*"``)
REPEAT = "*"
#: third ``layout`` item of a dim argument naming one of ``ndim + 1`` positions (``unsqueeze``'s ``dim``:
#: ``-1`` is ``ndim``), keyed modulo ``ndim + 1``
INSERTED = "inserted"


class FactorRule(EinsumRule):
    """An einsum-like factor rule from option ``equation`` (``"i,j->ij"`` for ``outer``, ``"ij,j->i"`` for
    ``mv``): one letter string per tensor operand, in dispatch order."""

    @classmethod
    def allowed_options(cls):
        return ("equation",)

    def __init__(self, op: str, **options: Any) -> None:
        super().__init__(op, **options)
        equation = str(options.get("equation", "")).replace(" ", "")
        if not _EQUATION.match(equation):
            raise RuleError(f"{op}: option equation={options.get('equation')!r}: expected letters like 'i,j->ij'")
        ins, self.out = equation.split("->")
        self.operands = ins.split(",")
        if any(len(set(o)) != len(o) for o in self.operands) or not set(self.out) <= set(ins):
            raise RuleError(f"{op}: equation {equation!r}: a repeated letter in one operand, or an output "
                            "letter no operand has")

    def letters(self, call: OpCall) -> _Problem:
        """The operands' letters for this call (their ranks must match the equation)."""
        tensors = call.tensors[:len(self.operands)]
        if len(tensors) != len(self.operands) or any(t.ndim != len(o) for t, o in zip(tensors, self.operands)):
            raise call.fail(f"expected {len(self.operands)} tensor operand(s) of ranks "
                            f"{[len(o) for o in self.operands]} (equation {','.join(self.operands)}->{self.out}), "
                            f"got ranks {[t.ndim for t in call.tensors]}")
        return _Problem(list(self.operands), self.out, [tuple(t.shape) for t in tensors])


def parse_strategy(text: str, where: str = "strategy") -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    """``"S(0),R->S(0)"`` -> (("S(0)", "R"), ("S(0)",)); the last output may end with ``*`` (``"S(1)->S(1)*"``:
    it repeats to the call's output count, kept as ``"S(1)*"``); a RuleError naming ``where`` when malformed."""
    if text.count("->") != 1:
        raise RuleError(f"{where}: {text!r}: expected 'inputs->outputs' like 'S(0),R->S(0)'")
    left, right = (tuple(p.strip() for p in side.split(",")) for side in text.split("->"))
    for p in left + right[:-1] + (right[-1][:-1] if right[-1].endswith(REPEAT) else right[-1],):
        if not _PLACEMENT.match(p):
            raise RuleError(f"{where}: {text!r}: placement {p!r} is not R, S(d) or P(sum|avg|max|min) (only the "
                            f"last output may end with {REPEAT!r}: repeated to the call's output count)")
    return left, right


def repeated_outputs(outs: Sequence[str], count: int) -> Optional[Tuple[str, ...]]:
    """A row's output placements for a call returning ``count`` tensors: a last placement ending with ``*``
    repeats to fill them (at least once); a row naming another fixed number of outputs gives None."""
    outs = tuple(outs)
    if outs and outs[-1].endswith(REPEAT):
        fixed = outs[:-1]
        if count <= len(fixed):
            return None
        return fixed + (outs[-1][:-1],) * (count - len(fixed))
    return outs if len(outs) == count else None


def _placement(text: str) -> Placement:
    m = _PLACEMENT.match(text)
    if m.group(2) is not None:
        return Shard(int(m.group(2)))
    return Partial(m.group(3)) if m.group(3) else Replicate()


def _short(p: Placement) -> str:
    return p.short()


def _norm(name: str, value: Any, ndim: int) -> Any:
    if name in _DIM_ARGS and isinstance(value, int) and not isinstance(value, bool) and ndim:
        return value % ndim
    if (name == "dims" or name in _DIM_ARGS) and isinstance(value, (list, tuple)):  # fftshift(dim=(0, -1))
        return [v % ndim if ndim and isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    if isinstance(value, tuple):
        return list(value)
    return value


def _rows(op: str, key: str, rows: Sequence[str]) -> List[Row]:
    """Parsed strategy rows of one signature (each with its ``when`` condition, see
    :mod:`hyper_parallel.core.ops.conditions`); a row giving a non-replicated output from replicated inputs
    is refused (every rank computes the same value: such a row comes from a degenerate sample)."""
    parsed = []
    for r in rows:
        where = f"{op}: table[{key!r}]"
        if not isinstance(r, str):
            raise RuleError(f"{where}: {r!r}: expected a string 'inputs->outputs [when CONDITION]'")
        strategy, when = split_row(r)
        parsed.append(Row(*parse_strategy(strategy, where),
                          parse_condition(when, f"{where}: {r!r}") if when is not None else None))
    for ins, outs in parsed:
        if all(p == "R" for p in ins) and any(p.rstrip(REPEAT) != "R" for p in outs):
            raise RuleError(f"{op}: table[{key!r}]: {','.join(ins)}->{','.join(outs)}: replicated inputs give "
                            "replicated outputs (every rank computes the same value); a table that says otherwise "
                            "was synthesised from a degenerate sample")
    return parsed


def _reachable(ins: Tuple[str, ...], res: Tuple[str, ...], cur: Tuple[str, ...], used: set) -> bool:
    """True when ``ins`` needs only gathers from ``cur`` and ``res`` shards no output dim already sharded."""
    if any(i not in (c, "R") for i, c in zip(ins, cur)):
        return False
    return not any(p.startswith("S(") and (k, int(p[2:-1])) in used for k, p in enumerate(res))


def signature_of(ranks: Sequence[int], layout: Dict[str, Any]) -> str:
    """The table key: ``"2,1"`` plus ``";name=value"`` per layout argument, sorted by name."""
    parts = [",".join(str(r) for r in ranks)]
    parts += [f"{k}={layout[k]}" for k in sorted(layout)]
    return ";".join(parts)


def _replicated(rule: OpRule, call: OpCall, mutates: Sequence[int] = ()) -> Decision:
    """Every input gathered, the outputs replicated with their local shapes (see :class:`ReplicateRule`).
    ``mutates``: positions (among the tensor inputs) that the op writes in place, besides the first input of
    an in-place op (name ending in ``_``)."""
    in_place = rule.op.endswith("_") and not rule.op.endswith("__")  # Tensor.add_, not Tensor.__rmod__
    written = set(mutates) | ({0} if in_place else set())
    for i in sorted(written):
        t = call.tensors[i] if i < len(call.tensors) else None
        if t is not None and t.is_dtensor and any(not isinstance(p, Replicate) for p in t.placements):
            raise call.fail(f"an in-place op on a sharded or partial tensor (tensor input {i} is written in place) "
                            "runs only on replicated inputs (gathering would update a copy); redistribute it to "
                            "Replicate first")
    return Decision(inputs=[(Replicate(),) * call.mesh_ndim for _ in call.tensors], outputs=None,
                    expand="expand_replicated")


def _wrap_replicated(out: Any, plan: Any) -> Any:
    """Every tensor of ``out`` (nested lists/tuples kept) as a replicated DTensor of its local shape."""
    platform = plan.platform
    if platform.is_tensor(out):
        from hyper_parallel.core.spec import DTensorSpec
        return platform.wrap_local(out, DTensorSpec(plan.mesh, (Replicate(),) * plan.mesh.ndim, tuple(out.shape)))
    if isinstance(out, (list, tuple)) and not hasattr(out, "_fields"):
        return type(out)(_wrap_replicated(o, plan) for o in out)
    if isinstance(out, tuple):  # a named tuple (torch.return_types): same type, fields wrapped
        return type(out)([_wrap_replicated(o, plan) for o in out])
    return out


class ReplicateRule(OpRule):
    """Inputs gathered, the whole op on every rank, outputs replicated (see the module docstring)."""

    cache_args = ()

    @classmethod
    def allowed_options(cls):
        return ("mutates",)

    def __init__(self, op: str, **options: Any) -> None:
        super().__init__(op, **options)
        self.mutates = tuple(options.get("mutates") or ())
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in self.mutates):
            raise RuleError(f"{op}: option mutates={options.get('mutates')!r}: expected tensor input positions")

    def infer(self, call: OpCall) -> Decision:
        """Replicate every input; the output specs come from the local result (``expand_replicated``)."""
        return _replicated(self, call, self.mutates)

    def expand_replicated(self, func, args, kwargs, plan):
        """Run the op on the replicated inputs; wrap each tensor output as ``Replicate``."""
        return _wrap_replicated(func(*args, **kwargs), plan)


def _layout_option(op: str, layout: Any) -> Dict[str, Any]:
    """Option ``layout`` checked: argument -> [position, default], [position, default, period] or
    [position, default, "inserted"] (:data:`INSERTED`)."""
    out = dict(layout or {})
    for name, spec in out.items():
        if not isinstance(spec, (list, tuple)) or len(spec) not in (2, 3) or not isinstance(spec[0], int) \
                or (len(spec) == 3 and spec[2] != INSERTED and (not isinstance(spec[2], int) or spec[2] < 2)):
            raise RuleError(f"{op}: option layout.{name}={spec!r}: expected [position, default], [position, "
                            f"default, period] (an integer period >= 2) or [position, default, {INSERTED!r}]")
    return out


class StrategyTableRule(OpRule):
    """Per-signature strategy table (options ``layout``, ``table``, ``shapes``, ``fallback``; see the module
    docstring)."""

    @classmethod
    def allowed_options(cls):
        return ("layout", "table", "shapes", "fallback", "args")

    def __init__(self, op: str, **options: Any) -> None:
        super().__init__(op, **options)
        self.layout = _layout_option(op, options.get("layout"))
        self.places = condition_places(self.layout, options.get("args"), op)  # bare names in row conditions
        table = options.get("table")
        shapes = options.get("shapes")
        if not isinstance(table, dict) or not table or not isinstance(shapes, dict):
            raise RuleError(f"{op}: options table and shapes must be non-empty mappings keyed by signature")
        self.table: Dict[str, List[Row]] = {}
        for key, rows in table.items():
            if key not in shapes:
                raise RuleError(f"{op}: signature {key!r} has strategies but no output shape in option shapes")
            if not isinstance(shapes[key], list) and shapes[key] != META:
                raise RuleError(f"{op}: shapes[{key!r}]={shapes[key]!r}: expected a list per output or {META!r}")
            self.table[key] = _rows(op, key, rows)
        self.shapes = shapes
        names = {n for rows in self.table.values() for r in rows if r.when is not None for n in r.when.names()}
        # the decision cache keys on the layout arguments and the arguments row conditions read
        self.cache_args = tuple(self.layout) + tuple(sorted(names - set(self.layout)))
        self.fallback = options.get("fallback")
        if self.fallback not in (None, "replicate"):
            raise RuleError(f"{op}: option fallback={self.fallback!r}: expected 'replicate' or no fallback")

    def _key(self, call: OpCall) -> str:
        ranks = [t.ndim for t in call.tensors]
        ndim = ranks[0] if ranks else 0
        values = {}
        for name, (pos, default, *period) in self.layout.items():
            value = _norm(name, call.arg(pos, name, default), ndim + (period == [INSERTED]))
            if period and period != [INSERTED] and isinstance(value, int) and not isinstance(value, bool):
                value %= period[0]  # rot90's k: k and k + 4 give the same result
            values[name] = value
        return signature_of(ranks, values)

    def infer(self, call: OpCall) -> Decision:
        """Input requirements and output specs from the table (see the module docstring)."""
        key = self._key(call)
        rows = self.table.get(key)
        if rows is None and self.fallback == "replicate":
            return _replicated(self, call)
        if rows is None:
            raise call.fail(f"no synthesised strategy for signature {key!r} (known: {sorted(self.table)[:6]}); "
                            "run hp-agent dist-op synth with a sample of this signature")
        shapes = self._shapes(call, key)
        if shapes is None:  # shapes computed without data (META) are unknown for this call
            if self.fallback == "replicate":
                return _replicated(self, call)
            raise call.fail(f"signature {key!r}: the backend cannot compute the output shapes of this call")
        n_out = len(shapes)
        rows = self._for_count(call, key, rows, n_out)
        if rows is None:
            return _replicated(self, call)
        need: List[List[Placement]] = [[Replicate()] * call.mesh_ndim for _ in call.tensors]
        outs: List[List[Placement]] = [[Replicate()] * call.mesh_ndim for _ in range(n_out)]
        for d in range(call.mesh_ndim):
            if not self._decide_dim(call, rows, need, outs, d):  # no row reachable by gathering
                return _replicated(self, call)
        specs = [(tuple(o), s) for o, s in zip(outs, shapes)]
        return Decision(inputs=[tuple(n) for n in need], outputs=specs[0] if n_out == 1 else specs)

    def _for_count(self, call: OpCall, key: str, rows, count: int):
        """The signature's rows for a call returning ``count`` tensors (a repeated last output filled in, rows
        of another fixed count dropped); None when none applies and the entry falls back to replicate."""
        fitting = [Row(r[0], outs, r.when) for r, outs in ((r, repeated_outputs(r[1], count)) for r in rows)
                   if outs is not None]
        if fitting or self.fallback == "replicate":
            return fitting or None
        raise call.fail(f"signature {key!r}: the table's rows give {sorted({len(o) for _, o in rows})} output(s), "
                        f"this call returns {count} (a last output ending with {REPEAT!r} repeats to any count)")

    def _decide_dim(self, call: OpCall, rows, need: List[List[Placement]], outs: List[List[Placement]],
                    d: int) -> bool:
        """Fill mesh dim ``d`` of ``need``/``outs`` from the table; False when no row is reachable by gathering
        and the entry falls back to replicate (e.g. the signature has no all-R row); refused without fallback."""
        cur = tuple(self._current(call, need, i, d) for i in range(len(call.tensors)))
        rows = [r for r in rows if r.when is None or r.when.holds(call, d, r[0], self.places, need)]
        chosen = self._choose(call, rows, cur, outs, d)
        if chosen is None:
            if self.fallback == "replicate":
                return False
            raise call.fail(f"no strategy reachable by gathering from inputs {list(cur)} on mesh dim {d}")
        ins, res = chosen
        for i, p in enumerate(ins):
            need[i][d] = _placement(p)
        for k, p in enumerate(res):
            outs[k][d] = _placement(p)
        return True

    def expand_replicated(self, func, args, kwargs, plan):
        """A signature outside the table (``fallback: replicate``): as :class:`ReplicateRule`."""
        return _wrap_replicated(func(*args, **kwargs), plan)

    @staticmethod
    def _current(call: OpCall, need: List[List[Placement]], i: int, d: int) -> str:
        """Input ``i``'s placement on mesh dim ``d`` (R when an earlier mesh dim already shards that dim)."""
        t = call.tensors[i]
        p = t.placements[d] if t.is_dtensor else Replicate()
        if isinstance(p, Shard) and any(isinstance(q, Shard) and q.dim == p.dim for q in need[i][:d]):
            return "R"
        return _short(p)

    @staticmethod
    def _choose(call: OpCall, rows, cur: Tuple[str, ...], outs: List[List[Placement]], d: int):
        """The row for ``cur``: exact, else the one keeping the most inputs and gathering the rest; None when
        no row is reachable by gathering."""
        used = {(k, p.dim) for k, o in enumerate(outs) for p in o[:d] if isinstance(p, Shard)}
        best, best_key = None, None
        for ins, res in rows:
            if len(ins) != len(cur):
                raise call.fail(f"the table's strategy {','.join(ins)} names {len(ins)} input(s), the call has "
                                f"{len(cur)} tensor(s)")
            if not _reachable(ins, res, cur, used):
                continue
            score = (sum(1 for i, c in zip(ins, cur) if i == c and c != "R"), sum(1 for p in res if p != "R"))
            if best_key is None or score > best_key:
                best, best_key = (ins, res), score
        return best

    def _shapes(self, call: OpCall, key: str) -> Optional[List[Tuple[int, ...]]]:
        """Every output's global shape (their number is the call's output count): from the signature's
        expressions, or (``META``) computed by the backend without data (:meth:`Platform.output_shapes`);
        None when that is not possible."""
        if self.shapes[key] != META:
            return [self._shape(call, key, k) for k in range(len(self.shapes[key]))]
        from hyper_parallel.platform import get_platform  # pylint: disable=import-outside-toplevel
        found = get_platform().output_shapes(call.op, call.args, call.kwargs, [t.shape for t in call.tensors])
        return list(found) if found else None

    def _shape(self, call: OpCall, key: str, k: int) -> Tuple[int, ...]:
        """Output ``k``'s global shape: per dim a size, ``"i.d"`` (input ``i``'s dim ``d``) or ``"i.d|j.e"``
        (the largest of those: broadcast operands)."""
        out = []
        for item in self.shapes[key][k]:
            if isinstance(item, int):
                out.append(item)
                continue
            sizes = []
            for ref in str(item).split("|"):
                size = 1
                for factor in ref.split("*"):
                    m = re.fullmatch(r"(\d+)\.(\d+)", factor)
                    if m is None or int(m.group(1)) >= len(call.tensors) or \
                            int(m.group(2)) >= call.tensors[int(m.group(1))].ndim:
                        raise call.fail(f"output shape item {item!r} of signature {key!r}: expected 'i.d', "
                                        "'i.d|j.e' (largest), 'i.d*j.e' (product) or a size")
                    size *= call.tensors[int(m.group(1))].shape[int(m.group(2))]
                sizes.append(size)
            out.append(max(sizes))
        return tuple(out)
