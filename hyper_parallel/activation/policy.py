# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checkpoint policies: what each op of a checkpointed region does with its output (pure).

A policy answers one question per op executed inside a checkpointed region: keep its output for
backward (``MUST_SAVE`` / ``PREFER_SAVE``), recompute it in backward (``MUST_RECOMPUTE`` /
``PREFER_RECOMPUTE``), or keep it but move it off the device until backward (``MUST_SWAP``).

Ops are named the way the dispatcher names them: ``"namespace.op"`` or ``"namespace.op.overload"``
(``"aten.mm"``, ``"aten.mm.default"``, ``"c10d.allreduce_"``, ``"_c10d_functional.all_to_all_single"``).
A name without a dot is a *group* (``"matmul"``, ``"attention"``, ``"collectives"``, ``"compute"``);
a name with ``*``/``?``/``[`` is an fnmatch pattern over full op names.

Our DTensor's collectives run as eager c10d calls, which the dispatcher reports as the in-place
``c10d.*`` ops listed in :data:`COLLECTIVE_OPS` (``c10d.allreduce_`` for the TP all-reduce,
``c10d._reduce_scatter_base_`` for the sequence-parallel reduce-scatter, ``c10d._allgather_base_``
for all-gathers, ``c10d.alltoall_base_`` for the MoE all-to-all); torch's functional collectives
appear as ``_c10d_functional.*``. The default :func:`op_policy` saves every one of them, so a
collective never runs again in backward.

Nothing here imports a framework.
"""
from __future__ import annotations

import enum
from fnmatch import fnmatchcase
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "CheckpointPolicy", "OpPolicy", "LayerSelection", "save_ops", "op_policy", "full_policy", "every_k_layers",
    "MATMUL_OPS", "ATTENTION_OPS", "COLLECTIVE_OPS", "ROUTING_OPS", "C10D_INPLACE_FIRST_ARG", "OP_GROUPS",
    "resolve_policy", "PolicyError",
]


class PolicyError(ValueError):
    """A policy was built from values it cannot use (the message names the argument)."""


class CheckpointPolicy(enum.Enum):
    """What happens to one op's output inside a checkpointed region (torch's names, plus ``MUST_SWAP``)."""

    MUST_SAVE = "must_save"
    PREFER_SAVE = "prefer_save"
    MUST_RECOMPUTE = "must_recompute"
    PREFER_RECOMPUTE = "prefer_recompute"
    MUST_SWAP = "must_swap"

    @property
    def keeps_output(self) -> bool:
        """True when the output is kept for backward (saved or swapped) rather than recomputed."""
        return self in (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE, CheckpointPolicy.MUST_SWAP)

    @classmethod
    def coerce(cls, value: Any, what: str = "policy") -> "CheckpointPolicy":
        """Our enum from our enum, torch's ``CheckpointPolicy`` (by member name), a bool (torch's
        meaning: ``True`` -> ``MUST_SAVE``, ``False`` -> ``PREFER_RECOMPUTE``) or a name such as
        ``"must_save"``, ``"save"``, ``"recompute"``, ``"swap"``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, bool):
            return cls.MUST_SAVE if value else cls.PREFER_RECOMPUTE
        name = getattr(value, "name", value)
        if isinstance(name, str):
            key = name.strip().lower().replace("-", "_")
            hit = _ALIASES.get(key)
            if hit is not None:
                return hit
            if key in ("must_cpu_offload", "prefer_cpu_offload"):
                return cls.MUST_SWAP
        raise PolicyError(f"{what}: expected a CheckpointPolicy (one of {[m.name for m in cls]}), a bool or one of "
                          f"{sorted(_ALIASES)}, got {value!r}")


_ALIASES = {m.value: m for m in CheckpointPolicy}
_ALIASES.update({"save": CheckpointPolicy.MUST_SAVE, "recompute": CheckpointPolicy.PREFER_RECOMPUTE,
                 "swap": CheckpointPolicy.MUST_SWAP})

#: compute-intensive ops whose outputs the default policy keeps
MATMUL_OPS: Tuple[str, ...] = (
    "aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._int_mm", "aten._scaled_mm", "aten._grouped_mm",
    "aten.convolution", "aten._convolution",
)
#: fused attention kernels (their outputs include the softmax statistics backward needs)
ATTENTION_OPS: Tuple[str, ...] = (
    "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_cudnn_attention",
    "aten._scaled_dot_product_fused_attention_overrideable", "aten._flash_attention_forward",
    "aten._efficient_attention_forward",
)
#: c10d ops whose first argument is the tensor (list) they write: the eager collectives our DTensor,
#: FSDP and MoE issue through ``torch.distributed``
C10D_INPLACE_FIRST_ARG: Tuple[str, ...] = (
    "c10d.allreduce_", "c10d.allreduce_coalesced_", "c10d._allgather_base_", "c10d.allgather_",
    "c10d.allgather_coalesced_", "c10d.allgather_into_tensor_coalesced_", "c10d._reduce_scatter_base_",
    "c10d.reduce_scatter_", "c10d.reduce_scatter_tensor_coalesced_", "c10d.alltoall_base_", "c10d.alltoall_",
    "c10d.broadcast_", "c10d.reduce_", "c10d.gather_", "c10d.scatter_", "c10d.recv_", "c10d.recv_any_source_",
)
#: every communication op: never recomputed under the default policy (a recomputed collective costs
#: a second transfer, and a recomputed send/recv has no peer waiting for it)
COLLECTIVE_OPS: Tuple[str, ...] = C10D_INPLACE_FIRST_ARG + (
    "c10d.send", "c10d.barrier", "c10d.monitored_barrier_",
    "_c10d_functional.all_reduce", "_c10d_functional.all_reduce_", "_c10d_functional.all_reduce_coalesced",
    "_c10d_functional.all_reduce_coalesced_", "_c10d_functional.all_gather_into_tensor",
    "_c10d_functional.all_gather_into_tensor_out", "_c10d_functional.all_gather_into_tensor_coalesced",
    "_c10d_functional.reduce_scatter_tensor", "_c10d_functional.reduce_scatter_tensor_out",
    "_c10d_functional.reduce_scatter_tensor_coalesced", "_c10d_functional.all_to_all_single",
    "_c10d_functional.broadcast", "_c10d_functional.broadcast_", "_c10d_functional.isend",
    "_c10d_functional.irecv", "_c10d_functional.batch_p2p_ops",
    "_c10d_functional_autograd.all_to_all_single", "_c10d_functional_autograd.all_gather_into_tensor",
    "_c10d_functional_autograd.reduce_scatter_tensor",
)
#: MoE routing: the top-k choice is kept so a recompute routes exactly as forward did (TorchTitan keeps it too)
ROUTING_OPS: Tuple[str, ...] = ("aten.topk",)
#: group name -> op names (a policy key without a dot names a group)
OP_GROUPS: Dict[str, Tuple[str, ...]] = {
    "matmul": MATMUL_OPS,
    "attention": ATTENTION_OPS,
    "collectives": COLLECTIVE_OPS,
    "compute": MATMUL_OPS + ATTENTION_OPS,
    "routing": ROUTING_OPS,
}


def _split(op_name: str) -> Tuple[str, str]:
    """``"aten.mm.default"`` -> (``"aten.mm"``, ``"default"``); ``"aten.mm"`` -> (``"aten.mm"``, ``""``)."""
    parts = op_name.split(".")
    if len(parts) >= 3:
        return ".".join(parts[:2]), ".".join(parts[2:])
    return op_name, ""


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise PolicyError(f"{what}: expected an op name such as 'aten.mm' or a group ({sorted(OP_GROUPS)}), "
                          f"got {name!r}")
    name = name.strip()
    if "." not in name and name not in OP_GROUPS and not any(c in name for c in "*?["):
        raise PolicyError(f"{what}: {name!r} is neither an op name ('namespace.op[.overload]', e.g. 'aten.mm') "
                          f"nor a group (one of {sorted(OP_GROUPS)})")
    return name


class OpPolicy:
    """A per-op policy: ordered rules ``(name or group or pattern, CheckpointPolicy)`` and a default.

    Lookup order for an op ``ns.op.overload``: a rule naming exactly that overload, then one naming
    ``ns.op``, then groups and patterns in rule order, then ``default``. Decisions are cached per
    op name. ``recompute_collectives`` must be set explicitly to let a rule or the default recompute a
    communication op; otherwise collectives are always kept (a rank-consistent, transfer-free backward).

    ``needs_dispatch`` is False for a policy that recomputes every op (plain full recompute, no
    dispatch interception needed).
    """

    __slots__ = ("name", "default", "recompute_collectives", "_exact", "_patterns", "_cache")

    def __init__(self, rules: Union[Mapping[str, Any], Iterable[Tuple[str, Any]]] = (), *,
                 default: Any = CheckpointPolicy.PREFER_RECOMPUTE, recompute_collectives: bool = False,
                 name: str = "custom") -> None:
        items = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
        self.name = name
        self.default = CheckpointPolicy.coerce(default, "OpPolicy(default)")
        self.recompute_collectives = bool(recompute_collectives)
        self._exact: Dict[str, CheckpointPolicy] = {}
        self._patterns: list = []
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise PolicyError(f"OpPolicy(rules[{i}]): expected (op name, policy), got {item!r}")
            key = _check_name(item[0], f"OpPolicy(rules[{i}])")
            value = CheckpointPolicy.coerce(item[1], f"OpPolicy(rules[{key!r}])")
            if key in OP_GROUPS:
                for op in OP_GROUPS[key]:
                    self._exact.setdefault(op, value)
            elif any(c in key for c in "*?["):
                self._patterns.append((key, value))
            else:
                self._exact[key] = value
        self._cache: Dict[str, CheckpointPolicy] = {}

    @property
    def needs_dispatch(self) -> bool:
        """False when every op is recomputed, collectives included (plain full recompute)."""
        if self.default.keeps_output or self._patterns:
            return True
        if any(v.keeps_output for v in self._exact.values()):
            return True
        return not self.recompute_collectives

    @property
    def swaps(self) -> bool:
        """True when some op may be swapped (``MUST_SWAP``)."""
        return (self.default is CheckpointPolicy.MUST_SWAP or any(v is CheckpointPolicy.MUST_SWAP for v in
                                                                  self._exact.values())
                or any(v is CheckpointPolicy.MUST_SWAP for _, v in self._patterns))

    def decide(self, op_name: str) -> CheckpointPolicy:
        """The policy of op ``op_name`` (``"ns.op.overload"`` or ``"ns.op"``)."""
        hit = self._cache.get(op_name)
        if hit is not None:
            return hit
        hit = self._lookup(op_name)
        self._cache[op_name] = hit
        return hit

    def _lookup(self, op_name: str) -> CheckpointPolicy:
        base, _ = _split(op_name)
        value = self._exact.get(op_name)
        if value is None:
            value = self._exact.get(base)
        if value is None:
            for pattern, v in self._patterns:
                if fnmatchcase(op_name, pattern) or fnmatchcase(base, pattern):
                    value = v
                    break
        if value is None:
            value = self.default
        if not value.keeps_output and not self.recompute_collectives and base in _COLLECTIVE_SET:
            return CheckpointPolicy.MUST_SAVE
        return value

    def rules(self) -> Dict[str, CheckpointPolicy]:
        """The explicit per-op rules (groups expanded), for reports."""
        out = dict(self._exact)
        out.update(dict(self._patterns))
        return out

    def __repr__(self) -> str:
        return (f"OpPolicy(name={self.name!r}, rules={len(self._exact) + len(self._patterns)}, "
                f"default={self.default.name}, recompute_collectives={self.recompute_collectives})")


_COLLECTIVE_SET = frozenset(COLLECTIVE_OPS)


def save_ops(ops: Sequence[str], *, swap: Sequence[str] = (), recompute_collectives: bool = False,
             default: Any = CheckpointPolicy.PREFER_RECOMPUTE) -> OpPolicy:
    """Save the outputs of ``ops`` (names, groups or patterns), swap those of ``swap`` (kept off the
    device until backward), recompute every other op. Collectives are saved unless
    ``recompute_collectives``."""
    if isinstance(ops, str) or not isinstance(ops, (list, tuple)):
        raise PolicyError(f"save_ops(ops): expected a list of op names or groups, got {ops!r}")
    if isinstance(swap, str) or not isinstance(swap, (list, tuple)):
        raise PolicyError(f"save_ops(swap): expected a list of op names or groups, got {swap!r}")
    rules = [(_check_name(s, f"save_ops(swap[{i}])"), CheckpointPolicy.MUST_SWAP) for i, s in enumerate(swap)]
    rules += [(_check_name(o, f"save_ops(ops[{i}])"), CheckpointPolicy.MUST_SAVE) for i, o in enumerate(ops)]
    return OpPolicy(rules, default=default, recompute_collectives=recompute_collectives, name="save_ops")


def op_policy(extra_save: Sequence[str] = (), *, swap: Sequence[str] = ()) -> OpPolicy:
    """The default "op" (selective) policy: keep matmul and fused-attention outputs, MoE routing
    (``topk``) and every collective, recompute the rest (norms, activations, rotary, residual adds,
    casts, views).
    ``extra_save`` adds names to keep, ``swap`` names whose outputs are swapped instead of kept."""
    policy = save_ops(["compute", "routing", "collectives", *extra_save], swap=swap)
    policy.name = "op"
    return policy


def full_policy(*, save_collectives: bool = False) -> OpPolicy:
    """Full recompute: every op of the region runs again in backward (torch's plain checkpoint).
    ``save_collectives=True`` keeps the collectives' outputs instead of communicating again."""
    return OpPolicy((), default=CheckpointPolicy.PREFER_RECOMPUTE, recompute_collectives=not save_collectives,
                    name="full")


class LayerSelection:
    """Which of a model's layers get a policy: every ``k``-th layer (TorchTitan's layer-frequency
    checkpointing: layer ``i`` (0-based) is selected when ``(i + 1) % k == 0``), each with ``policy``."""

    __slots__ = ("k", "policy")

    def __init__(self, k: int, policy: Optional[OpPolicy] = None) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise PolicyError(f"every_k_layers(k): expected an integer >= 1, got {k!r}")
        if policy is not None and not isinstance(policy, OpPolicy):
            raise PolicyError(f"every_k_layers(policy): expected an OpPolicy or None, got {type(policy).__name__}")
        self.k = k
        self.policy = policy if policy is not None else full_policy()

    def selects(self, index: int) -> bool:
        """True when layer ``index`` (0-based) is checkpointed."""
        return (index + 1) % self.k == 0

    def __repr__(self) -> str:
        return f"every_k_layers({self.k}, policy={self.policy.name})"


def every_k_layers(k: int, policy: Optional[OpPolicy] = None) -> LayerSelection:
    """Checkpoint every ``k``-th layer (``policy``: full recompute unless given)."""
    return LayerSelection(k, policy)


def resolve_policy(policy: Any, what: str = "policy") -> Any:
    """Normalise a user policy: ``None`` -> full recompute; ``"full"``/``"op"``/``"selective-op"``;
    a list of op names -> :func:`save_ops`; an :class:`OpPolicy` or a callable (a torch-SAC style
    ``policy_fn(ctx, op, *args, **kwargs)``) as given."""
    if policy is None:
        return full_policy()
    if isinstance(policy, OpPolicy) or callable(policy):
        return policy
    if isinstance(policy, str):
        key = policy.strip().lower()
        if key == "full":
            return full_policy()
        if key in ("op", "selective-op", "selective_op"):
            return op_policy()
        raise PolicyError(f"{what}: expected 'full', 'op' or 'selective-op', got {policy!r}")
    if isinstance(policy, (list, tuple)):
        return save_ops(list(policy))
    raise PolicyError(f"{what}: expected None, 'full', 'op', a list of op names, an OpPolicy or a policy function, "
                      f"got {type(policy).__name__}")
