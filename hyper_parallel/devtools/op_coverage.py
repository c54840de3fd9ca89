# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""OpInfo coverage: PyTorch's own op sample inputs run through DTensor on 2 ranks.

``python -m hyper_parallel.devtools.op_coverage --out docs/op_coverage.md`` (``make coverage``) takes every
op of ``torch.testing._internal.common_methods_invocations.op_db`` that supports float32 on CPU, its first
``--max-samples`` float32 sample inputs, and runs each sample twice on a 1-D mesh of ``--world-size``
ranks: with every tensor argument ``Replicate`` and with every tensor argument ``Shard(0)`` (0-d tensors
stay replicated). Each run's output (``full_tensor()`` of DTensors) is compared with the op on plain
tensors and classified:

* ``passed``      — same values (``assert_close``, ``rtol = atol = 1e-4``: distributed sums reorder
  additions); for random ops (:data:`RANDOM`) same shape and dtype, and the ``Shard(0)`` run must give
  exactly the ``Replicate`` run's values (same distributed stream state); for uninitialised ops
  (:data:`UNINITIALISED`) same shape and dtype;
* ``unsupported`` — a clear refusal: :class:`~hyper_parallel.core.ops.rule.RuleError` from a rule, or
  the dispatcher's "no distributed rule for ..." error;
* ``failed``      — anything else: a wrong value, shape or dtype, any other exception, or ranks that
  raised on another rank (after each op call the ranks exchange their errors before gathering).
  If a collective itself fails (ranks diverged inside an op), the op's case ends and the op counts
  one failed run.

``--impl both`` (what ``make coverage`` runs) also runs the same corpus, the same samples and the same two
configs through PyTorch's own DTensor (``torch.distributed.tensor``, the peer) in the same run, classified
the same way (its refusal is ``NotImplementedError: ... does not have a sharding strategy registered``),
and writes both columns plus the ops where one passes every run and the other does not.

Samples whose reference run raises (invalid for the plain op), that have no tensor argument, or that
have a sparse tensor argument (DTensors are dense), and ``Shard(0)`` runs of samples without a tensor
of rank >= 1, are not counted. Ops run in batches, one multi-rank case of the shared worker pool
(``hyper_parallel.testing.run_on_ranks``) per batch; a batch whose case fails (a hang or a crash) is rerun
op by op, so it costs one op, not the report. Each sample's tensors are broadcast from rank 0 once, so
every rank runs the same data.
"""
from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["OUTCOMES", "IMPLS", "PeerError", "WrongResult",
           "RANDOM", "UNINITIALISED", "NONDETERMINISTIC", "OpResult", "CoverageReport",
           "classify_error",
           "op_names", "run_op_samples", "run_coverage", "render_markdown", "main"]

OUTCOMES = ("passed", "failed", "unsupported")
IMPLS = ("hp", "torch")
CONFIGS = ("R", "S(0)")
#: OpInfo names with random values: compared by shape/dtype, and the S(0) run must equal the R run exactly.
RANDOM = frozenset({
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "normal.in_place",
    "normal.number_mean", "uniform", "rand_like", "randn_like", "randint_like", "randint", "randn",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu"})
#: OpInfo names with uninitialised values: compared by shape and dtype only.
UNINITIALISED = frozenset({"empty_like", "new_empty", "new_empty_strided", "empty", "empty_strided",
                           "empty_permuted"})
NONDETERMINISTIC = RANDOM | UNINITIALISED
RTOL = ATOL = 1e-4
_NO_RULE = "no distributed rule"
_TORCH_NO_RULE = "does not have a sharding strategy registered"
_DETAIL_CHARS = 160


def classify_error(exc: BaseException, impl: str = "hp") -> str:
    """``unsupported`` for a clear refusal, else ``failed``. Ours (``impl="hp"``): a RuleError or the
    dispatcher's "no distributed rule"; torch DTensor's (``impl="torch"``): its NotImplementedError "does not
    have a sharding strategy registered"."""
    if impl == "torch":
        return "unsupported" if isinstance(exc, NotImplementedError) and _TORCH_NO_RULE in str(exc) else "failed"
    from hyper_parallel.core.ops.rule import RuleError
    if isinstance(exc, RuleError) or (isinstance(exc, RuntimeError) and _NO_RULE in str(exc)):
        return "unsupported"
    return "failed"


def _is_fatal(exc: BaseException) -> bool:
    """A collective failed (a peer diverged or died): the process group cannot be trusted any more."""
    import torch.distributed as dist
    from hyper_parallel.platform.base import CollectiveError
    return isinstance(exc, (CollectiveError, dist.DistError))


@dataclass
class OpResult:
    """Outcomes of one op: ``counts[config][outcome]`` plus the first message of each failure kind."""

    name: str
    samples: int = 0
    counts: Dict[str, Dict[str, int]] = field(default_factory=lambda: {c: dict.fromkeys(OUTCOMES, 0)
                                                                        for c in CONFIGS})
    details: List[str] = field(default_factory=list)
    skipped: int = 0
    wrong: int = 0
    entries: Dict[str, str] = field(default_factory=dict)  # registry entry name -> its file (ours only)

    def add(self, config: str, outcome: str, detail: str = "", wrong: bool = False) -> None:
        """Count one run; keep a short message for the first few non-passing runs. ``wrong``: a failed run
        whose gathered output differs from the single-device result (:class:`WrongResult`) — not an error
        raised on this rank or a peer rank (:class:`PeerError`), which is a failed run only."""
        self.counts[config][outcome] += 1
        if outcome == "failed" and wrong:
            self.wrong += 1
        if detail and outcome != "passed" and len(self.details) < 3:
            self.details.append(f"{config}: {detail[:_DETAIL_CHARS]}")

    def total(self, outcome: str) -> int:
        """Runs with ``outcome`` over both configs."""
        return sum(c[outcome] for c in self.counts.values())

    @property
    def runs(self) -> int:
        """Counted runs (both configs)."""
        return sum(self.total(o) for o in OUTCOMES)

    @property
    def status(self) -> str:
        """``pass`` (every run passed), ``partial``, ``unsupported`` (no run passed, none failed), ``fail``."""
        passed, failed = self.total("passed"), self.total("failed")
        if self.runs == 0:
            return "n/a"
        if passed == self.runs:
            return "pass"
        if passed:
            return "partial"
        return "fail" if failed else "unsupported"


@dataclass
class CoverageReport:
    """All op results of one run plus how it was run (``peer``: torch DTensor's results of the same run,
    empty when only ours ran)."""

    results: List[OpResult]
    max_samples: int
    world_size: int
    seconds: float
    torch_version: str = ""
    load_average: float = 0.0
    peer: List[OpResult] = field(default_factory=list)

    def totals(self, results: Optional[List[OpResult]] = None) -> Dict[str, int]:
        """Headline numbers (of ``results``; default ours)."""
        results = self.results if results is None else results
        status = [r.status for r in results]
        out = {o: sum(r.total(o) for r in results) for o in OUTCOMES}
        out.update(ops=len(results), runs=sum(r.runs for r in results), wrong=sum(r.wrong for r in results),
                   samples=sum(r.samples for r in results), **{f"ops_{s}": status.count(s)
                                                               for s in ("pass", "partial", "fail",
                                                                         "unsupported", "n/a")})
        return out

    def differences(self) -> Tuple[List[str], List[str]]:
        """(ops where torch DTensor passes every run and we do not, ops where we do and torch does not)."""
        ours = {r.name: r.status for r in self.results}
        theirs = {r.name: r.status for r in self.peer}
        names = sorted(set(ours) & set(theirs))
        return ([n for n in names if theirs[n] == "pass" and ours[n] != "pass"],
                [n for n in names if ours[n] == "pass" and theirs[n] != "pass"])


# ---------------------------------------------------------------------- per rank
def _op_db() -> Dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db
    return {o.name + (f".{o.variant_test_name}" if o.variant_test_name else ""): o for o in op_db}


def op_names() -> List[str]:
    """Every OpInfo name (``name.variant``) that supports float32 on CPU, in op_db order."""
    import torch
    return [n for n, o in _op_db().items() if torch.float32 in o.supported_dtypes("cpu")]


def _tree_map(fn: Callable, obj: Any) -> Any:
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_tree_map(fn, o) for o in obj)
    if isinstance(obj, dict):
        return {k: _tree_map(fn, v) for k, v in obj.items()}
    return fn(obj)


def _flatten(obj: Any) -> List[Any]:
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in _flatten(o)]
    return [obj]


def _clone_tensors(obj: Any) -> Any:
    import torch
    return _tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, obj)


def _tensor_ranks(obj: Any) -> List[int]:
    import torch
    return [t.dim() for t in _flatten(obj) if isinstance(t, torch.Tensor)]


def _has_sparse(obj: Any) -> bool:
    import torch
    return any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in _flatten(obj))


class PeerError(RuntimeError):
    """Another rank's op call raised (this rank's did not): a failed run, never a wrong value."""


class WrongResult(AssertionError):
    """The gathered output differs from the single-device result (value, shape, dtype or count)."""


def _agree(error: Optional[BaseException]) -> None:
    """Every rank learns whether any rank's op call raised, before any rank gathers outputs.

    A local error on one rank only (an empty or too small shard) would otherwise leave the other ranks
    waiting in the next collective. Re-raises this rank's error, or reports the first failing peer.
    """
    import torch
    import torch.distributed as dist
    flag = torch.tensor([0 if error is None else 1])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if not flag.item():
        return
    everyone: List[Optional[str]] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    rank, message = next((r, m) for r, m in enumerate(everyone) if m is not None)
    raise PeerError(f"rank {rank} raised {message}")


def _synced(obj: Any) -> Any:
    """Tensors replaced by contiguous copies holding rank 0's bytes (one broadcast each), so that every
    rank runs the same sample even if a sample generator drew from an unseeded source."""
    import torch
    import torch.distributed as dist

    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach().clone().contiguous()
        dist.broadcast(t.reshape(-1).view(torch.uint8), src=0)
        return t
    return _tree_map(one, obj)


def _distribute(obj: Any, mesh, config: str, impl: str = "hp") -> Any:
    import torch
    if impl == "torch":
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    else:
        from hyper_parallel import Replicate, Shard
        from hyper_parallel import distribute_tensor  # pylint: disable=no-name-in-module  # lazily exported

    def one(t):
        if not isinstance(t, torch.Tensor):
            return t
        placement = Shard(0) if config == "S(0)" and t.dim() > 0 else Replicate()
        return distribute_tensor(t.detach().clone(), mesh, [placement], src_data_rank=None)  # synced already
    return _tree_map(one, obj)


def _gather(obj: Any, impl: str = "hp") -> List[Any]:
    """Outputs flattened, DTensors replaced by their full tensors."""
    if impl == "torch":
        from torch.distributed.tensor import DTensor
    else:
        from hyper_parallel.platform.torch.dtensor import DTensor
    return [o.full_tensor() if isinstance(o, DTensor) else o for o in _flatten(obj)]


def _compare(got: List[Any], want: List[Any], values: bool) -> None:
    """Raise :class:`WrongResult` unless ``got`` matches ``want`` (values, or shape and dtype only)."""
    import torch
    if len(got) != len(want):
        raise WrongResult(f"{len(got)} outputs, expected {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                raise WrongResult(f"output {k}: {type(g).__name__}, expected a tensor")
            if g.shape != w.shape or g.dtype != w.dtype:
                raise WrongResult(f"output {k}: shape/dtype {tuple(g.shape)}/{g.dtype}, expected "
                                     f"{tuple(w.shape)}/{w.dtype}")
            if values:
                try:
                    torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL, equal_nan=True, check_device=False)
                except AssertionError as exc:
                    raise WrongResult(str(exc)) from None
        elif values and g != w:
            raise WrongResult(f"output {k}: {g!r} != {w!r}")


def _run_config(op, sample, mesh, config: str, random_op: bool, impl: str = "hp") -> List[Any]:
    """One DTensor run of ``sample`` (every tensor placed per ``config``); outputs gathered."""
    import torch
    from hyper_parallel.core.random import set_rng_state
    inp, args, kwargs = (_distribute(x, mesh, config, impl) for x in sample)
    if random_op:
        if impl == "torch":
            torch.manual_seed(1234)  # torch DTensor's generator state: the same seed on every rank
        else:
            set_rng_state((1234, 0))
    out, error = None, None
    try:
        out = op(inp, *args, **kwargs)
    except Exception as exc:  # pylint: disable=broad-except  # shared with the peers first, then re-raised
        if _is_fatal(exc):
            raise
        error = exc
    _agree(error)
    return _gather(out, impl)


def _run_sample(result: OpResult, op, sample_input, mesh, kind: str, impl: str = "hp") -> None:
    """Run one sample under each config; ``kind``: ``values``, ``random`` or ``uninitialised``."""
    import torch
    sample = (sample_input.input, sample_input.args, sample_input.kwargs)
    ranks = _tensor_ranks(sample)
    if _has_sparse(sample):  # DTensors are dense: not counted
        result.skipped += 1
        return
    sample = _synced(sample)
    torch.manual_seed(0)
    try:
        want = _flatten(op(_clone_tensors(sample[0]), *_clone_tensors(sample[1]), **_clone_tensors(sample[2])))
    except Exception:  # pylint: disable=broad-except  # an invalid sample for the plain op: not counted
        result.skipped += 1
        return
    if not ranks:  # no tensor argument: nothing runs on DTensors
        result.skipped += 1
        return
    result.samples += 1
    first: Optional[List[Any]] = None
    for config in CONFIGS:
        if config == "S(0)" and max(ranks) == 0:
            continue
        try:
            got = _run_config(op, sample, mesh, config, kind == "random", impl)
            _compare(got, want, values=kind == "values")
            if kind == "random" and first is not None:
                _compare(got, first, values=True)  # same stream state: the same global values
            first = got if first is None else first
            result.add(config, "passed")
        except Exception as exc:  # pylint: disable=broad-except  # classified: unsupported or failed
            if _is_fatal(exc):
                raise  # the ranks' collectives no longer line up: end this op's case (the pool restarts)
            result.add(config, classify_error(exc, impl), f"{type(exc).__name__}: {exc}".replace("\n", " "),
                       wrong=isinstance(exc, WrongResult))


def _mesh(mesh_shape: Tuple[int, ...], impl: str):
    if impl == "torch":
        from torch.distributed.device_mesh import init_device_mesh
        return init_device_mesh("cpu", mesh_shape)
    import hyper_parallel as hp
    return hp.init_device_mesh("cpu", mesh_shape)


def run_op_samples(names: Sequence[str], max_samples: int = 3, mesh_shape: Tuple[int, ...] = (2,),
                   impl: str = "hp") -> List[OpResult]:
    """Run on every rank (default process group initialised): the coverage of ``names`` through our
    DTensor (``impl="hp"``) or torch's (``impl="torch"``).

    Sample inputs are generated with the same torch seed on every rank, so every rank runs the same
    samples in the same order and their collectives line up (and both impls run the same samples).
    """
    if impl not in IMPLS:
        raise ValueError(f"op_coverage: impl={impl!r}; expected one of {list(IMPLS)}")
    db = _op_db()
    mesh = _mesh(mesh_shape, impl)
    restore = _record_entries() if impl == "hp" else (lambda: None)
    try:
        return [_op_samples(db, name, max_samples, mesh, impl) for name in names]
    finally:
        restore()


def _op_samples(db: Dict[str, Any], name: str, max_samples: int, mesh, impl: str) -> OpResult:
    """One op's samples (see :func:`run_op_samples`), with the registry entries it dispatched through."""
    import warnings
    import torch
    if name not in db:
        raise KeyError(f"op_coverage: {name!r} is not an OpInfo name (see op_names())")
    op = db[name]
    result = OpResult(name)
    seed = zlib.crc32(name.encode())
    torch.manual_seed(seed)
    random.seed(seed)
    _USED.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=False),
                                        max_samples))
        for sample in samples:
            _run_sample(result, op, sample, mesh, _kind(name), impl)
    result.entries = dict(sorted(_USED.items()))
    return result


#: registry entries dispatched through during the current op (name -> registry file name)
_USED: Dict[str, str] = {}


def _record_entries() -> Callable[[], None]:
    """Wrap every installed registry handler so that a call records its entry in :data:`_USED`; returns the
    function restoring the original handlers."""
    from pathlib import Path
    from hyper_parallel.platform.torch import dispatch as _dispatch  # pylint: disable=import-outside-toplevel
    from hyper_parallel.platform.torch import dtensor as _dt  # pylint: disable=import-outside-toplevel
    _dispatch.install_registry()
    saved = dict(_dt.DISPATCH_TABLE)

    def recording(handler, name: str, source: str):
        def run(func, args, kwargs):
            _USED[name] = source
            return handler(func, args, kwargs)
        return run

    wrapped = {}
    for func, handler in saved.items():
        entry = getattr(handler, "entry", None)
        if entry is not None:
            wrapped[func] = _dt.DISPATCH_TABLE[func] = recording(handler, entry.name, Path(entry.source).name)

    def restore() -> None:
        for func, wrapper in wrapped.items():
            if _dt.DISPATCH_TABLE.get(func) is wrapper:
                _dt.DISPATCH_TABLE[func] = saved[func]
    return restore


def _kind(name: str) -> str:
    if name in RANDOM:
        return "random"
    return "uninitialised" if name in UNINITIALISED else "values"


# ---------------------------------------------------------------------- driver
def _diverged(name: str, max_samples: int, exc: BaseException) -> OpResult:
    result = OpResult(name)
    result.samples = max_samples
    line = str(exc).splitlines()
    result.add("R", "failed", "ranks diverged or hung: " + " / ".join(line[1:3]))
    return result


def _run_case(names: Sequence[str], max_samples: int, world_size: int, op_timeout: float,
              impl: str = "hp") -> List[OpResult]:
    """One multi-rank case for ``names``; if it fails, each op alone (a failing op is marked, not the batch)."""
    from hyper_parallel.testing import run_on_ranks
    from hyper_parallel.testing.multiprocess import MultiRankError
    try:
        return run_on_ranks(run_op_samples, world_size, args=(list(names), max_samples, (world_size,), impl),
                            timeout=op_timeout * len(names), collective_timeout=10.0)
    except MultiRankError as exc:  # the pool is recreated
        if len(names) == 1:
            return [_diverged(names[0], max_samples, exc)]
    return [r for name in names for r in _run_case([name], max_samples, world_size, op_timeout, impl)]


def run_coverage(names: Optional[Sequence[str]] = None, max_samples: int = 3, world_size: int = 2,
                 op_timeout: float = 120.0, progress: Optional[Callable[[str], None]] = None,
                 batch: int = 16, impls: Sequence[str] = ("hp",)) -> CoverageReport:
    """Run :func:`run_op_samples` in multi-rank cases of ``batch`` ops on a shared pool of ``world_size``
    ranks (a failing case is rerun op by op), for each of ``impls`` batch by batch (``("hp", "torch")``:
    torch DTensor's results go to ``report.peer``)."""
    import torch
    bad = [i for i in impls if i not in IMPLS] or ([] if "hp" in impls else ["(hp missing)"])
    if bad:
        raise ValueError(f"op_coverage: impls {list(impls)}: expected 'hp' and optionally 'torch'")
    start = time.monotonic()
    names = list(names) if names is not None else op_names()
    results: Dict[str, List[OpResult]] = {impl: [] for impl in impls}
    for k in range(0, len(names), batch):
        chunk = names[k:k + batch]
        for impl in impls:
            results[impl].extend(_run_case(chunk, max_samples, world_size, op_timeout, impl))
        if progress is not None:
            peer = {r.name: r.status for r in results.get("torch", [])}
            for j, r in enumerate(results["hp"][-len(chunk):], start=len(results["hp"]) - len(chunk) + 1):
                theirs = f" (torch DTensor: {peer[r.name]})" if r.name in peer else ""
                progress(f"[{j}/{len(names)} {time.monotonic() - start:.0f}s] {r.name}: {r.status}{theirs}")
    return CoverageReport(results["hp"], max_samples, world_size, time.monotonic() - start, torch.__version__,
                          os.getloadavg()[0], peer=results.get("torch", []))


def _cell(result: OpResult, config: str) -> str:
    c = result.counts[config]
    return f"{c['passed']} / {c['failed']} / {c['unsupported']}"


def render_markdown(report: CoverageReport) -> str:
    """The report as Markdown: headline totals, how it was run, then one row per op."""
    t = report.totals()
    peer = {r.name: r for r in report.peer}
    lines = [
        "# OpInfo coverage of hyper-parallel DTensor ops",
        "",
        *_peer_headline(report),
        f"**{t['ops']} OpInfo ops, {t['samples']} samples, {t['runs']} runs: {t['passed']} passed, "
        f"{t['failed']} failed, {t['unsupported']} unsupported.** Ops: {t['ops_pass']} pass every run, "
        f"{t['ops_partial']} pass some, {t['ops_fail']} fail without passing, {t['ops_unsupported']} unsupported "
        f"(no distributed rule), {t['ops_n/a']} with no countable run.",
        "",
        f"Generated by `python -m hyper_parallel.devtools.op_coverage --out docs/op_coverage.md` (`make coverage`) "
        f"in {report.seconds:.0f} s on {report.world_size} CPU ranks (gloo; machine load average "
        f"{report.load_average:.0f} at the end), torch {report.torch_version}. "
        f"Corpus: every op of `torch.testing._internal.common_methods_invocations.op_db` that supports float32 "
        f"on CPU, its first {report.max_samples} float32 sample inputs (the per-op limit keeps a full run to a "
        "few minutes). Each sample runs twice — every tensor argument `Replicate`, then every tensor argument "
        "`Shard(0)` (0-d tensors replicated) — and the gathered output is compared with the op on plain "
        f"tensors (rtol = atol = {RTOL:g}). Random ops are compared by shape and dtype, and their `Shard(0)` run "
        "must reproduce the `Replicate` run's values exactly (placement-invariant RNG); uninitialised ops "
        "(`empty*`, `new_empty*`) by shape and dtype only.",
        "",
        "*passed*: same result; *unsupported*: a clear refusal (`RuleError`, or \"no distributed rule\"); "
        "*failed*: a wrong result or any other error, on any rank (an op whose ranks diverged inside a "
        "collective counts one failed run). Samples invalid for the plain op, without tensor arguments or with "
        "sparse ones, and `Shard(0)` runs of samples without a tensor of rank >= 1, are not counted.",
        "",
        *_peer_lists(report),
        "| op | samples | R: passed / failed / unsupported | S(0): passed / failed / unsupported | status | "
        + ("torch DTensor status | " if peer else "") + "first problem |",
        "|---|---|---|---|---|---|" + ("---|" if peer else ""),
    ]
    for r in sorted(report.results, key=lambda r: r.name):
        detail = (r.details[0] if r.details else "").replace("|", "\\|").replace("`", "'")
        theirs = f" {peer[r.name].status} |" if r.name in peer else (" - |" if peer else "")
        lines.append(f"| `{r.name}` | {r.samples} | {_cell(r, 'R')} | {_cell(r, 'S(0)')} | {r.status} |{theirs} "
                     f"{detail} |")
    return "\n".join(lines + _entries_section(report)) + "\n"


def _entries_section(report: CoverageReport) -> List[str]:
    """Per op, the registry entries our runs dispatched through and their files (read by
    :mod:`hyper_parallel.devtools.op_share`)."""
    from hyper_parallel.devtools.op_share import ENTRIES_HEADING
    lines = ["", ENTRIES_HEADING, "",
             "What each op's runs dispatched through (entry and registry file; `generated.yaml` is written by "
             "`hp-agent dist-op dev`); ops that used none are not listed. "
             "`python -m hyper_parallel.devtools.op_share --baseline OLD.md` reads it.", "",
             "| op | registry entries |", "|---|---|"]
    for r in sorted(report.results, key=lambda r: r.name):
        if r.entries:
            lines.append(f"| `{r.name}` | " + ", ".join(f"`{n}` ({f})" for n, f in r.entries.items()) + " |")
    return lines


def _peer_headline(report: CoverageReport) -> List[str]:
    """Both implementations' all-pass counts side by side (nothing when only ours ran)."""
    if not report.peer:
        return []
    ours, theirs = report.totals(), report.totals(report.peer)
    return [f"**Same corpus, same run, same samples: hyper-parallel {ours['ops_pass']} ops pass every run "
            f"({ours['failed']} failed runs, {ours['wrong']} of them wrong results), torch DTensor "
            f"{theirs['ops_pass']} ({theirs['failed']} failed runs, {theirs['wrong']} of them wrong results, "
            f"{theirs['ops_unsupported']} ops with no sharding strategy).**", ""]


def _peer_lists(report: CoverageReport) -> List[str]:
    if not report.peer:
        return []
    theirs_only, ours_only = report.differences()
    return [f"Ops where torch DTensor passes every run and hyper-parallel does not ({len(theirs_only)}): "
            + (", ".join(f"`{n}`" for n in theirs_only) or "none") + ".", "",
            f"Ops where hyper-parallel passes every run and torch DTensor does not ({len(ours_only)}): "
            + (", ".join(f"`{n}`" for n in ours_only) or "none") + ".", ""]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m hyper_parallel.devtools.op_coverage", description=__doc__.split(
        "\n\n", maxsplit=1)[0])
    parser.add_argument("--out", default="docs/op_coverage.md", help="Markdown file to write")
    parser.add_argument("--max-samples", type=int, default=3, help="float32 samples per op (default 3)")
    parser.add_argument("--ops", nargs="*", help="OpInfo names to run (default: all float32 ops)")
    parser.add_argument("--world-size", type=int, default=2, help="ranks of the 1-D mesh (default 2)")
    parser.add_argument("--quiet", action="store_true", help="no per-op progress lines")
    parser.add_argument("--impl", choices=("hp", "both"), default="hp",
                        help="hp: our DTensor only; both: also torch DTensor on the same samples (default hp)")
    parser.add_argument("--baseline", help="an older report: print the share report (op_share) of the ops it "
                                           "marks unsupported")
    parser.add_argument("--since", help="with --baseline: git revision of the baseline (hand-written entries new "
                                        "since then count as hand-written code)")
    opts = parser.parse_args(argv)
    if opts.max_samples < 1 or opts.world_size < 1:
        parser.error("--max-samples and --world-size must be positive")
    if opts.since and not opts.baseline:
        parser.error("--since needs --baseline")
    progress = None if opts.quiet else (lambda line: print(line, flush=True))
    report = run_coverage(opts.ops, opts.max_samples, opts.world_size, progress=progress,
                          impls=("hp", "torch") if opts.impl == "both" else ("hp",))
    text = render_markdown(report)
    with open(opts.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print("\n".join(p for p in text.split("\n\n")[1:3] if p.startswith("**")))
    print(f"wrote {opts.out} ({report.seconds:.0f} s)")
    if opts.baseline:
        from hyper_parallel.devtools import op_share
        return op_share.main(["--baseline", opts.baseline, "--report", opts.out]
                             + (["--since", opts.since] if opts.since else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
