# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Op parity driver: run an op on DTensors for every placement combination and compare the
result (forward and backward) with the same op on one process.

Call it inside a multi-rank case (``@multi_rank``) with the default process group initialised::

    report = check_op("torch.add", torch.add, [x, y])            # every combo of R / S(d) / P
    assert report.combos > 0

Inputs are full tensors (identical on every rank: seed first). For a ``Partial`` placement the
local values are a random split that sums to the truth (not the trivial "rank 0 holds it all").
A combination the rule refuses with a ``RuleError`` (a clear message) is counted in ``rejected``;
anything else that raises, or a wrong value, is a failure. Gradients: the loss is ``sum(out * W)``
over every floating output (``W`` random, fixed), and each
input's local gradient must equal what the gradient convention prescribes for its placement
(shard for ``Shard``, whole for ``Replicate`` / ``Partial(sum)``). Every combination is first run in
strict mode to count the ones the rule accepts natively (no implicit redistribution).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence

__all__ = ["ParityReport", "check_op", "placement_candidates"]


@dataclass
class ParityReport:
    """Outcome of :func:`check_op`."""

    op: str
    combos: int = 0
    native: int = 0
    unchecked: int = 0  # combos counted (strict probe) whose values were not compared (``cover``)
    failures: List[str] = field(default_factory=list)
    rejected: List[str] = field(default_factory=list)

    @property
    def passed(self) -> int:
        """Combinations that ran and matched the single-process result."""
        return self.combos - len(self.failures) - len(self.rejected) - self.unchecked

    def raise_if_failed(self) -> "ParityReport":
        """Raise AssertionError listing every failing combination."""
        if self.failures:
            raise AssertionError(f"{self.op}: {len(self.failures)}/{self.combos} placement combos failed:\n"
                                 + "\n".join(self.failures[:20]))
        return self


def placement_candidates(tensor, mesh_ndim: int, partial: bool = True):
    """Every placement tuple for ``tensor`` on a mesh of ``mesh_ndim`` dims: R, S(d) per dim, P(sum)."""
    from hyper_parallel import Partial, Replicate, Shard
    single = [Replicate()] + [Shard(d) for d in range(tensor.dim())]
    if partial:
        single.append(Partial())
    return list(itertools.product(single, repeat=mesh_ndim))


def _partial_part(region, n: int, index: int, gen):
    """Part ``index`` of ``n`` random parts summing to ``region`` (a ``Partial(sum)`` input's local value).

    With two parts the split is exact: ``a + b`` rounds to ``region`` bit for bit (``b = region - a``;
    where that sum would round elsewhere, both parts are ``region / 2``, which is exact), so the
    DTensor's value is the reference input itself and an ill-conditioned op (``pinverse``, ``mvlgamma``
    near its pole) is not charged with the summation's rounding. More parts keep a zero-mean random
    split, whose all-reduce rounds in an order the harness does not control."""
    import torch
    noise = torch.randn((n,) + tuple(region.shape), generator=gen, dtype=region.dtype)
    noise = noise - noise.mean(0, keepdim=True)
    if n != 2:
        return region / n + noise[index]
    first = region / 2 + noise[0]
    second = region - first
    exact = (first + second == region) & torch.isfinite(first) & torch.isfinite(second)
    half = region / 2
    first, second = torch.where(exact, first, half), torch.where(exact, second, half)
    return first if index == 0 else second


def _make_input(t, mesh, placements, seed):
    """A DTensor for full tensor ``t`` (Partial: random split summing to ``t``) and its leaf local."""
    import torch
    import hyper_parallel as hp
    from hyper_parallel import Partial
    from hyper_parallel.core.spec import DTensorSpec
    coord = mesh.get_coordinate()
    spec = DTensorSpec(mesh, placements, tuple(t.shape))
    local, offset = spec.local_shape_and_offset(coord)
    region = t
    for dim, (o, n) in enumerate(zip(offset, local)):
        region = region.narrow(dim, o, n)
    region = region.detach().clone()
    if t.is_floating_point():
        gen = torch.Generator().manual_seed(seed)
        for d, p in enumerate(placements):
            if isinstance(p, Partial):
                region = _partial_part(region, mesh.shape[d], coord[d], gen)
    elif any(isinstance(p, Partial) for p in placements):
        return None, None
    leaf = region.requires_grad_(t.requires_grad)
    dt = hp.DTensor.from_local(leaf, mesh, placements, shape=tuple(t.shape))
    return dt, leaf


def _expected_local_grad(g, mesh, placements):
    from hyper_parallel.core.spec import DTensorSpec
    spec = DTensorSpec(mesh, placements, tuple(g.shape))
    local, offset = spec.local_shape_and_offset(mesh.get_coordinate())
    for dim, (o, n) in enumerate(zip(offset, local)):
        g = g.narrow(dim, o, n)
    return g


def _flatten(out) -> list:
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(_flatten(o))
        return res
    return [out]


def _to_full(o):
    from hyper_parallel.platform.torch.dtensor import DTensor
    return o.full_tensor() if isinstance(o, DTensor) else o


@dataclass
class _Reference:
    """The single-process run every combination is compared with."""

    inputs: list
    outputs: list
    weights: list
    tensor_idx: List[int]
    do_grad: bool
    atol: float
    rtol: float


def _ref_input(a, grad: bool):
    return a.detach().clone().requires_grad_(grad and a.is_floating_point())


def _weight(o, seed: int):
    """Random loss weight for a floating output (None for other outputs)."""
    import torch
    if not (isinstance(o, torch.Tensor) and o.is_floating_point()):
        return None
    return torch.randn(o.shape, generator=torch.Generator().manual_seed(seed), dtype=o.dtype)


def _reference(fn, inputs, grad: bool, seed: int, atol: float, rtol: float) -> _Reference:
    import torch
    tensor_idx = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
    ref_inputs = [_ref_input(a, grad) if i in tensor_idx else a for i, a in enumerate(inputs)]
    outs = _flatten(fn(*ref_inputs))
    weights = [_weight(o, seed + 7 + k) for k, o in enumerate(outs)]
    do_grad = grad and any(w is not None for w in weights) and any(ref_inputs[i].requires_grad for i in tensor_idx)
    if do_grad:
        sum((o * w).sum() for o, w in zip(outs, weights) if w is not None).backward()
    return _Reference(ref_inputs, outs, weights, tensor_idx, do_grad, atol, rtol)


def check_op(name: str, fn: Callable, inputs: Sequence[Any], *, mesh=None, mesh_shape=(2,), partial: bool = True,
             grad: bool = True, atol: float = 1e-5, rtol: float = 1.3e-6, seed: int = 0,
             placements: Optional[Sequence[Sequence[tuple]]] = None, max_combos: Optional[int] = None,
             cover: bool = False) -> ParityReport:
    """Compare ``fn`` on DTensors against ``fn`` on full tensors for every placement combination.

    ``inputs``: full tensors and other arguments (non-tensors are passed through unchanged).
    ``placements``: per tensor input, the placement tuples to try (default: all candidates).
    ``cover``: every combination still runs the strict probe (``native`` counts them all), but values and
    gradients are compared only for every native combination (the rule's own layouts) and for the
    communicating combinations that bring an input placement no compared combination had yet (a
    deterministic covering selection: each input's each placement is compared at least once; the other
    communicating combinations redistribute into layouts already compared). Counted in ``unchecked``.
    """
    import hyper_parallel as hp
    if mesh is None:
        mesh = hp.init_device_mesh("cpu", mesh_shape)
    ref = _reference(fn, inputs, grad, seed, atol, rtol)
    report = ParityReport(name)
    options = placements or [placement_candidates(inputs[i], mesh.ndim, partial) for i in ref.tensor_idx]
    compared: set = set()
    for combo in itertools.islice(itertools.product(*options), max_combos):
        label = f"{name} with " + ", ".join(f"in{i}={[p.short() for p in pl]}" for i, pl in zip(ref.tensor_idx, combo))
        made = [_make_input(ref.inputs[i].detach().requires_grad_(ref.inputs[i].requires_grad), mesh, pl, seed + k)
                for k, (i, pl) in enumerate(zip(ref.tensor_idx, combo))]
        if any(dt is None for dt, _ in made):
            continue
        report.combos += 1
        args = list(inputs)
        for (dt, _), i in zip(made, ref.tensor_idx):
            args[i] = dt
        native = report.native
        if not _strict_probe(report, label, fn, args):
            continue
        keys = set(enumerate(combo))
        if cover and report.native == native and keys <= compared:
            report.unchecked += 1  # communicates into layouts already compared
            continue
        compared |= keys
        _compare_one(report, label, fn, args, made, ref, mesh, combo)
    return report


def _strict_probe(report: ParityReport, label: str, fn, args) -> bool:
    """Run once in strict mode to count native combos; False when the combo is already settled."""
    from hyper_parallel.core.ops.rule import RuleError
    from hyper_parallel.platform.torch.dispatch import StrictRedistributionError, strict_dispatch
    try:
        with strict_dispatch():
            fn(*args)
        report.native += 1
    except StrictRedistributionError:
        return True  # not native: it communicates; the value check runs without strict mode
    except RuleError as exc:  # a clear refusal by the rule: reported, not a wrong result
        report.rejected.append(f"{label}: {exc}")
        return False
    except Exception as exc:  # pylint: disable=broad-except
        report.failures.append(f"{label}: {type(exc).__name__}: {exc}")
        return False
    return True


def _check_outputs(fulls, ref: _Reference) -> None:
    import torch
    if len(fulls) != len(ref.outputs):
        raise AssertionError(f"{len(fulls)} outputs, expected {len(ref.outputs)}")
    for k, (got, want) in enumerate(zip(fulls, ref.outputs)):
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want.detach(), atol=ref.atol, rtol=ref.rtol, equal_nan=True,
                                       msg=lambda m, k=k: f"output {k}: {m}")
        elif got != want:
            raise AssertionError(f"output {k}: {got!r} != {want!r}")


def _check_grads(fulls, made, ref: _Reference, mesh, combo) -> None:
    import torch
    loss = sum((f * w).sum() for f, w in zip(fulls, ref.weights) if w is not None and f.requires_grad)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        loss.backward()
    for (_, leaf), i, pl in zip(made, ref.tensor_idx, combo):
        ref_g = ref.inputs[i].grad
        if ref_g is None or not leaf.requires_grad:
            continue
        got_g = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        torch.testing.assert_close(got_g, _expected_local_grad(ref_g, mesh, pl), atol=ref.atol * 10,
                                   rtol=ref.rtol * 10, msg=lambda m, i=i: f"grad of input {i}: {m}")


def _compare_one(report, label, fn, args, made, ref: _Reference, mesh, combo):  # pylint: disable=too-many-arguments
    from hyper_parallel.core.ops.rule import RuleError
    try:
        fulls = [_to_full(o) for o in _flatten(fn(*args))]
        _check_outputs(fulls, ref)
        if ref.do_grad:
            _check_grads(fulls, made, ref, mesh, combo)
    except AssertionError as exc:
        report.failures.append(f"{label}: {exc}")
    except RuleError as exc:
        report.rejected.append(f"{label}: {exc}")
    except Exception as exc:  # pylint: disable=broad-except
        report.failures.append(f"{label}: {type(exc).__name__}: {exc}")
