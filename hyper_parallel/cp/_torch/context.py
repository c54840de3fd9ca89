# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``context_parallel`` and the module styles on torch: the CP state, the function mode that routes
``F.scaled_dot_product_attention`` (and the DSA ops) to distributed attention, buffer sharding.

A :class:`CPState` holds the CP group, the method and the load balancer. :class:`CPMode`, a
``TorchFunctionMode``, intercepts the attention functions called while it is active (whatever
name they were imported under) and leaves every other function alone. ``context_parallel`` enters
one mode for its block; ``ContextParallel`` enters one around each forward of the module it is
applied to (the innermost active mode handles a call).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from hyper_parallel.cp.load_balance import LoadBalancer, SeqLayout, SequenceLengthError, make_load_balancer
from hyper_parallel.cp.select import METHODS, select_method

__all__ = ["CPState", "CPMode", "context_parallel", "context_parallel_shard", "context_parallel_unshard",
           "install_style", "register_cp_op", "CP_OPS", "current_state"]

#: function -> (op name, handler(state, *args, **kwargs))
_HANDLERS: Dict[Callable, Any] = {}
CP_OPS: List[str] = []
_ACTIVE: List["CPState"] = []
_ORIGINAL_SDPA = F.scaled_dot_product_attention


def register_cp_op(func: Callable, name: str) -> Callable[[Callable], Callable]:
    """Decorator: ``handler(state, *args, **kwargs)`` runs ``func`` under CP when op ``name`` is enabled."""
    def deco(handler: Callable) -> Callable:
        _HANDLERS[func] = (name, handler)
        if name not in CP_OPS:
            CP_OPS.append(name)
        return handler
    return deco


def _check_method(method: str, async_: bool, what: str) -> str:
    if method not in METHODS + ("auto",):
        raise ValueError(f"{what}(method={method!r}): expected one of {METHODS + ('auto',)}")
    if async_ and method == "alltoall":
        raise ValueError(f"{what}: method 'alltoall' has no asynchronous variant (all-to-all needs its result "
                         "before any compute); use method='ring' or 'allgather'")
    return method


def _mesh_group(mesh, what: str):
    if mesh is None or not hasattr(mesh, "get_group"):
        raise TypeError(f"{what}(mesh): expected a DeviceMesh, got {type(mesh).__name__}")
    if mesh.ndim != 1:
        raise ValueError(f"{what}(mesh): expected a 1-D CP mesh (slice it, e.g. mesh['cp']), got {mesh}")
    return mesh.get_group(0), mesh.get_local_rank(0), mesh.size()


@dataclass
class CPState:
    """CP group + method + load balancer (+ async, + the ops it handles)."""

    mesh: Any
    method: str = "ring"
    balancer: LoadBalancer = field(default_factory=lambda: make_load_balancer("headtail"))
    async_: bool = False
    ops: FrozenSet[str] = frozenset()
    impl: Optional[str] = None
    what: str = "context_parallel"

    def __post_init__(self) -> None:
        self.group, self.rank, self.size = _mesh_group(self.mesh, self.what)
        _check_method(self.method, self.async_, self.what)
        self._layouts: Dict[int, SeqLayout] = {}
        self._even: set = set()  # local lengths found even on every CP rank

    def local_layout(self, local_len: int, what: str, device=None) -> SeqLayout:
        """The layout of the global sequence whose shard on this rank has ``local_len`` positions.

        The CP ranks compare their lengths (one 8-byte all-gather and host sync) the first time this state (one
        per CP-styled module, or per ``context_parallel`` block: the entry point) sees ``local_len``, not on every
        attention call: shards of different lengths (an uneven split such as ``torch.chunk`` / ``Shard``
        of 31 tokens into 16 + 15) raise :class:`SequenceLengthError` on every rank at that first call, before
        any attention exchange. ``context_parallel_shard`` (the trainer's entry point) splits evenly or raises
        itself. A rank whose length changes while another's stays at a length already checked is not caught here
        (the other rank skips the comparison); shard every step's batch the same way on every rank."""
        if local_len not in self._even:
            import torch.distributed as dist  # pylint: disable=import-outside-toplevel
            mine = torch.tensor([local_len], dtype=torch.int64, device=device)
            every = torch.empty(self.size, dtype=torch.int64, device=device)
            dist.all_gather_into_tensor(every, mine, group=self.group)
            lengths = every.tolist()
            if len(set(lengths)) > 1:
                raise SequenceLengthError(
                    f"{what}: the {self.size} CP ranks hold sequence shards of lengths {lengths} (a global sequence "
                    f"of {sum(lengths)} split unevenly); every rank must hold seq_len / cp positions: pad the "
                    f"sequence to a multiple of {self.balancer.required_multiple(self.size)} and shard it with "
                    "context_parallel_shard (see docs/cp.md, 'Lengths that do not divide')")
            self._even.add(local_len)
        return self.layout(local_len * self.size, what)

    def layout(self, seq_len: int, what: str = "attention input") -> SeqLayout:
        """The (cached) layout of a global sequence of ``seq_len``."""
        lay = self._layouts.get(seq_len)
        if lay is None:
            lay = self._layouts[seq_len] = self.balancer.layout(seq_len, self.size, what)
        return lay

    def resolve_method(self, seq_len: int, heads: int, kv_heads: int, head_dim: int, itemsize: int) -> str:
        """The configured method, or what ``"auto"`` picks for these sizes."""
        if self.method != "auto":
            return self.method
        picked = select_method(seq_len, self.size, heads, kv_heads, head_dim, itemsize)
        if picked == "alltoall" and self.async_:
            picked = "ring" if seq_len // self.size >= 2048 else "allgather"
        return picked

    def handles(self, name: str) -> bool:
        """True when op ``name`` runs distributed under this state."""
        return not self.ops or name in self.ops


def current_state() -> Optional[CPState]:
    """The innermost active CP state (None outside CP)."""
    return _ACTIVE[-1] if _ACTIVE else None


def route(func: Callable) -> Optional[Callable]:
    """The CP version of ``func`` bound to the active state, or None. For calls that the function mode
    cannot see: torch pops every function mode while a function it routed runs (``loss.backward()``
    included), so ops recomputed by activation checkpointing inside a backward come here."""
    state = current_state()
    entry = _HANDLERS.get(func)
    if state is None or entry is None or not state.handles(entry[0]):
        return None

    def run(*args, **kwargs):
        with torch._C.DisableTorchFunction():
            return entry[1](state, *args, **kwargs)
    return run


class CPMode(TorchFunctionMode):
    """Routes the registered attention functions to their CP handlers while active."""

    def __init__(self, state: CPState) -> None:
        super().__init__()
        self.state = state

    def __enter__(self):
        _ACTIVE.append(self.state)
        try:
            return super().__enter__()
        except BaseException:
            _ACTIVE.pop()
            raise

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _ACTIVE.remove(self.state)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        entry = _HANDLERS.get(func)
        if entry is not None and self.state.handles(entry[0]):
            with torch._C.DisableTorchFunction():
                return entry[1](self.state, *args, **kwargs)
        return func(*args, **kwargs)


# ------------------------------------------------------------------------------------ buffers
def _shard_along(x: torch.Tensor, dim: int, layout: SeqLayout, rank: int) -> torch.Tensor:
    parts = [x.narrow(dim, start, n) for start, n in layout.runs[rank]]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim)


def _check_buffers(buffers, seq_dims, what: str):
    buffers = list(buffers or [])
    seq_dims = list(seq_dims or [])
    if len(buffers) != len(seq_dims):
        raise ValueError(f"{what}: {len(buffers)} buffers but {len(seq_dims)} buffer_seq_dims; give one sequence "
                         "dim per buffer")
    out_dims = []
    for i, (buf, dim) in enumerate(zip(buffers, seq_dims)):
        if not isinstance(buf, torch.Tensor):
            raise TypeError(f"{what}: buffers[{i}] must be a torch.Tensor, got {type(buf).__name__}")
        if not isinstance(dim, int) or not -buf.dim() <= dim < buf.dim():
            raise ValueError(f"{what}: buffer_seq_dims[{i}]={dim!r} is not a dim of buffers[{i}] with shape "
                             f"{tuple(buf.shape)}")
        out_dims.append(dim % buf.dim())
    return buffers, out_dims


def context_parallel_shard(mesh, buffers: Sequence[torch.Tensor], seq_dims: Sequence[int],
                           load_balance: Union[None, str, LoadBalancer] = "headtail") -> List[torch.Tensor]:
    """This rank's shards of ``buffers`` along ``seq_dims`` (new tensors, differentiable)."""
    _, rank, size = _mesh_group(mesh, "context_parallel_shard")
    buffers, dims = _check_buffers(buffers, seq_dims, "context_parallel_shard")
    balancer = make_load_balancer(load_balance)
    out = []
    for i, (buf, dim) in enumerate(zip(buffers, dims)):
        layout = balancer.layout(buf.shape[dim], size, f"buffers[{i}] (shape {tuple(buf.shape)}, seq dim {dim})")
        out.append(_shard_along(buf, dim, layout, rank))
    return out


def context_parallel_unshard(mesh, buffers: Sequence[torch.Tensor], seq_dims: Sequence[int],
                             load_balance: Union[None, str, LoadBalancer] = "headtail") -> List[torch.Tensor]:
    """Gather CP shards back into whole tensors in the original order (differentiable: the gradient
    of a gathered tensor flows back to each rank's shard)."""
    from hyper_parallel.platform import get_platform
    group, rank, size = _mesh_group(mesh, "context_parallel_unshard")
    buffers, dims = _check_buffers(buffers, seq_dims, "context_parallel_unshard")
    balancer = make_load_balancer(load_balance)
    plat = get_platform("torch")
    out = []
    for i, (buf, dim) in enumerate(zip(buffers, dims)):
        local = buf.shape[dim]
        layout = balancer.layout(local * size, size, f"buffers[{i}] (local shape {tuple(buf.shape)}, seq dim {dim})")
        full = plat.all_gather(buf.contiguous(), group, dim, [local] * size, rank)
        idx = torch.tensor(layout.restore_order(), dtype=torch.long, device=buf.device)
        out.append(full.index_select(dim, idx))
    return out


def _check_in_place(buffers, no_restore_buffers) -> set:
    """Ids of the buffers to leave sharded; errors for foreign no-restore buffers and grad-requiring ones."""
    unknown = [i for i, b in enumerate(no_restore_buffers or []) if all(b is not x for x in buffers)]
    if unknown:
        raise ValueError(f"context_parallel: no_restore_buffers{unknown} are not among buffers")
    for i, buf in enumerate(buffers):
        if buf.requires_grad:
            raise ValueError(f"context_parallel: buffers[{i}] requires grad; buffers are sharded in place, pass data "
                             "tensors (ids, labels, positions, masks) or use context_parallel_shard")
    return {id(b) for b in (no_restore_buffers or [])}


def _sdpa_in_block(*args, **kwargs):
    """``F.scaled_dot_product_attention`` while a ``context_parallel`` block is open. The function mode
    catches SDPA under any name in forward; attention recomputed inside ``loss.backward()`` (activation
    checkpointing), where torch has popped the mode, reaches this module attribute (see :func:`route`)."""
    routed = route(_ORIGINAL_SDPA)
    return routed(*args, **kwargs) if routed is not None else _ORIGINAL_SDPA(*args, **kwargs)


@contextlib.contextmanager
def context_parallel(mesh, buffers: Optional[Sequence[torch.Tensor]] = None,
                     buffer_seq_dims: Optional[Sequence[int]] = None,
                     no_restore_buffers: Optional[Sequence[torch.Tensor]] = None, method: str = "ring",
                     load_balance: Union[None, str, LoadBalancer] = "headtail", *, async_op: bool = False,
                     impl: Optional[str] = None) -> Iterator[None]:
    """Shard ``buffers`` in place along ``buffer_seq_dims`` and run ``F.scaled_dot_product_attention``
    (and the DSA ops) as CP attention inside the block; restore the buffers on exit (except those in
    ``no_restore_buffers``). See ``hyper_parallel.cp.context_parallel`` for the full contract."""
    state = CPState(mesh, method, make_load_balancer(load_balance), async_op, frozenset(), impl)
    buffers, dims = _check_buffers(buffers, buffer_seq_dims, "context_parallel")
    keep = _check_in_place(buffers, no_restore_buffers)
    shards = context_parallel_shard(mesh, buffers, dims, state.balancer)
    originals = [None if id(b) in keep else b.clone() for b in buffers]
    for buf, shard in zip(buffers, shards):
        shard = shard.clone()
        buf.resize_(shard.shape)
        buf.copy_(shard)
    previous = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = _sdpa_in_block
    try:
        with CPMode(state):
            yield
    finally:
        F.scaled_dot_product_attention = previous
        for buf, orig in zip(buffers, originals):
            if orig is not None:
                buf.resize_(orig.shape)
                buf.copy_(orig)


# ------------------------------------------------------------------------------------ module styles
def install_style(module, mesh, style) -> None:
    """Hook ``module`` so that its forward runs under a :class:`CPMode` of ``style``'s configuration."""
    state = CPState(mesh, style.method, make_load_balancer(style.load_balance), style.is_async,
                    frozenset(style.ops or ()), getattr(style, "impl", None), type(style).__name__)
    unknown = sorted(set(state.ops) - set(CP_OPS))
    if unknown:
        raise ValueError(f"{type(style).__name__}(ops={sorted(state.ops)}): unknown ops {unknown}; known: {CP_OPS}")
    stacks: List[contextlib.ExitStack] = []

    def pre_hook(_mod, _args):
        stack = contextlib.ExitStack()
        stack.enter_context(CPMode(state))
        stacks.append(stack)

    def post_hook(_mod, _args, _out):
        if stacks:
            stacks.pop().close()

    module.register_forward_pre_hook(pre_hook)
    module.register_forward_hook(post_hook, always_call=True)


# ------------------------------------------------------------------------------------ SDPA
def _unwrap(x):
    from hyper_parallel.platform.torch.dtensor import DTensor
    if isinstance(x, DTensor):
        return x.to_local(), x
    return x, None


def _check_dtensor(name: str, dt, ndim: int) -> None:
    from hyper_parallel.core.placement import Partial, Shard
    for p in dt.placements:
        if isinstance(p, Partial):
            raise ValueError(f"context parallel attention: {name} is a Partial DTensor; reduce it first")
        if isinstance(p, Shard) and p.dim % ndim >= ndim - 2:
            raise ValueError(f"context parallel attention: {name} is a DTensor sharded on dim {p.dim} (sequence or "
                             "head dim); CP shards the sequence itself — shard batch or heads with TP")


def _rewrap(out: torch.Tensor, like, v_like):
    """TP DTensor local rewrap: the local result goes back into a DTensor with q's placements."""
    if like is None:
        return out
    from hyper_parallel.platform.torch.dtensor import DTensor
    shape = tuple(like.shape[:-1]) + (v_like.shape[-1],)
    return DTensor.from_local(out, like.device_mesh, like.placements, shape=shape)


def _prepare_mask(attn_mask, q, seq_len: int, layout: SeqLayout, rank: int, method: str):
    if attn_mask is None:
        return None
    from hyper_parallel.cp._torch.kernel import additive_mask
    m = attn_mask
    if m.shape[-1] != seq_len:
        raise ValueError(f"context parallel attention: attn_mask has {m.shape[-1]} key columns; pass the global mask "
                         f"[..., {seq_len}, {seq_len}] in original order (its rows may be CP-sharded)")
    if method == "alltoall":
        if m.shape[-2] != seq_len:
            raise ValueError("context parallel attention: method 'alltoall' needs the whole mask "
                             f"[..., {seq_len}, {seq_len}], got rows {m.shape[-2]}")
        return m
    if m.shape[-2] == seq_len and seq_len != q.shape[-2]:
        m = _shard_along(m, m.dim() - 2, layout, rank)
    elif m.shape[-2] != q.shape[-2]:
        raise ValueError(f"context parallel attention: attn_mask has {m.shape[-2]} rows; expected {seq_len} (global) "
                         f"or {q.shape[-2]} (this rank's queries)")
    return additive_mask(m, q.dtype)


def _check_sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("context parallel attention expects query/key/value of shape [batch, heads, seq, head_dim], "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if dropout_p:
        raise ValueError(f"context parallel attention: dropout_p={dropout_p} is not supported (use dropout outside "
                         "attention)")
    if is_causal and attn_mask is not None:
        raise ValueError("context parallel attention: pass either attn_mask or is_causal=True, not both (as SDPA)")
    if k.shape[-2] != q.shape[-2] or v.shape[-2] != q.shape[-2]:
        raise ValueError(f"context parallel attention: query, key and value must hold the same sequence shard, got "
                         f"lengths {q.shape[-2]}, {k.shape[-2]}, {v.shape[-2]} (cross-attention is not CP-sharded)")
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if heads != kv_heads and (not enable_gqa or heads % kv_heads):
        raise ValueError(f"context parallel attention: {heads} query heads vs {kv_heads} key/value heads needs "
                         "enable_gqa=True and a whole number of query heads per key/value head")


@register_cp_op(F.scaled_dot_product_attention, "sdpa")
def cp_sdpa(state: CPState, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
            enable_gqa=False):
    """``F.scaled_dot_product_attention`` on CP shards (q, k, v hold this rank's sequence shard)."""
    from hyper_parallel.cp._torch.attention import AllGatherAttention, AttnConfig, RingAttention, ulysses_attention
    (q, q_dt), (k, k_dt), (v, _) = _unwrap(query), _unwrap(key), _unwrap(value)
    for name, dt in (("query", q_dt), ("key", k_dt)):
        if dt is not None:
            _check_dtensor(name, dt, q.dim())
    if attn_mask is not None:
        attn_mask = _unwrap(attn_mask)[0]
    _check_sdpa_args(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa)
    q, k, v, scale, v_dim = _same_head_dims(q, k, v, scale)
    seq_len = q.shape[-2] * state.size
    layout = state.local_layout(q.shape[-2], f"context parallel attention: query {tuple(q.shape)} x cp={state.size}",
                                q.device)
    method = state.resolve_method(seq_len, q.shape[-3], k.shape[-3], q.shape[-1], q.element_size())
    mask = _prepare_mask(attn_mask, q, seq_len, layout, state.rank, method)
    if method == "alltoall":
        out = ulysses_attention(q, k, v, group=state.group, layout=layout, causal=is_causal, scale=scale, mask=mask,
                                sdpa=_ORIGINAL_SDPA)
    else:
        cfg = AttnConfig(state.group, state.rank, state.size, layout, bool(is_causal), scale, mask, state.async_,
                         state.impl, method if not state.async_ else f"{method}_async")
        fn = RingAttention if method == "ring" else AllGatherAttention
        out = fn.apply(q, k, v, cfg)
    if out.shape[-1] != v_dim:
        out = out[..., :v_dim]
    return _rewrap(out, q_dt, value)


def _same_head_dims(q, k, v, scale):
    """K and V travel packed together, so they need one head dim: a value head dim that differs from the key's
    (DeepSeek-V3's MLA: 24 vs 16) is zero-padded to the larger one (a zero value column adds zero to the
    output, cut off again; zero query/key columns add zero to every score, the scale stays the key dim's).
    Returns ``(q, k, v, scale, v_dim)``."""
    dk, dv = k.shape[-1], v.shape[-1]
    if dk == dv:
        return q, k, v, scale, dv
    if dv < dk:
        return q, k, F.pad(v, (0, dk - dv)), scale, dv
    scale = scale if scale is not None else dk ** -0.5
    return F.pad(q, (0, dv - dk)), F.pad(k, (0, dv - dk)), v, scale, dv
