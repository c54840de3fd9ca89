# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The independent recompute schedule: per layer, which blocks recompute (pure Python, no framework).

MindSpore recomputes whole cells (``Cell.recompute()``), so selective recompute there is decided per *block*:
each block of a decoder layer (a norm, a projection, the attention core, the gated activation, the MoE router,
the experts) stands for the op its output is, and a :class:`~hyper_parallel.activation.policy.OpPolicy` decides
it with the same ``CheckpointPolicy`` names as torch's per-op selective checkpointing: a block whose op the
policy keeps (``MUST_SAVE`` / ``PREFER_SAVE``) keeps its activations, the others recompute in backward.

A :class:`RecomputeSchedule` gives every layer its own decision, independently of the others (the release
notes' "recompute independent schedule"): ``"none"`` (keep everything), ``"full"`` (the whole layer recomputes),
a policy (``"op"``, a list of op names / groups, an ``OpPolicy``) or an explicit ``{block: policy}`` table.
Built with :meth:`RecomputeSchedule.build` from a default and per-layer overrides (``"0-3"``, ``"5"``,
``"-1"`` for the last layer); ``keep_last=k`` keeps the activations of the last ``k`` layers whatever the
default says: their backward runs first, straight after the forward, so recomputing them saves nothing at the
peak and costs a forward (RiPipe's "remove the last layer's recompute").

:data:`BLOCK_OPS` names the op each block kind stands for; the MindSpore backend maps its cells to kinds
(``hyper_parallel.activation._mindspore.schedule``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from hyper_parallel.activation.policy import CheckpointPolicy, OpPolicy, PolicyError, resolve_policy

__all__ = ["BLOCK_OPS", "RecomputeSchedule", "LayerRecompute", "parse_layer_spec", "block_recomputes"]

#: block kind -> the op its output stands for (what a policy is asked about)
BLOCK_OPS: Dict[str, str] = {
    "matmul": "aten.mm",  # q/k/v/o, gate/up/down projections, MLA's low-rank projections, the LM head
    "grouped_matmul": "aten._grouped_mm",  # the routed experts
    "attention": "aten._scaled_dot_product_flash_attention_for_cpu",  # the attention core
    "routing": "aten.topk",  # the MoE router
    "norm": "aten.rms_norm",
    "activation": "aten.silu",  # the gated activation act(gate) * up
}
_WHOLE = ("none", "full")


def block_recomputes(policy: OpPolicy, kind: str) -> bool:
    """Whether a block of ``kind`` recomputes under ``policy`` (its op is not kept)."""
    if kind not in BLOCK_OPS:
        raise PolicyError(f"block kind {kind!r}: expected one of {sorted(BLOCK_OPS)}")
    return not policy.decide(BLOCK_OPS[kind]).keeps_output


@dataclass(frozen=True)
class LayerRecompute:
    """One layer's decision: ``mode`` ``"none"`` | ``"full"`` | ``"blocks"``; with ``"blocks"``, ``policy`` (an
    ``OpPolicy``) and ``blocks`` (``{block kind: CheckpointPolicy}`` taking precedence over it)."""

    mode: str
    policy: Optional[OpPolicy] = None
    blocks: Tuple[Tuple[str, CheckpointPolicy], ...] = ()

    def recomputes(self, kind: str) -> bool:
        """Whether this layer's blocks of ``kind`` recompute (``"full"`` recomputes the layer as a whole)."""
        if self.mode != "blocks":
            return self.mode == "full"
        explicit = dict(self.blocks)
        if kind in explicit:
            return not explicit[kind].keeps_output
        return self.policy is not None and block_recomputes(self.policy, kind)


def _decision(value: Any, where: str) -> LayerRecompute:
    if isinstance(value, LayerRecompute):
        return value
    if isinstance(value, str) and value.strip().lower() in _WHOLE:
        return LayerRecompute(value.strip().lower())
    if isinstance(value, Mapping):
        blocks = []
        for kind, pol in value.items():
            if kind not in BLOCK_OPS:
                raise PolicyError(f"{where}: block {kind!r}: expected one of {sorted(BLOCK_OPS)}")
            blocks.append((kind, CheckpointPolicy.coerce(pol, f"{where}[{kind!r}]")))
        return LayerRecompute("blocks", None, tuple(sorted(blocks)))
    policy = resolve_policy(value, where)
    if not isinstance(policy, OpPolicy):
        raise PolicyError(f"{where}: a policy function cannot decide blocks; give 'op', a list of op names or an "
                          "OpPolicy")
    return LayerRecompute("blocks", policy)


def parse_layer_spec(spec: Union[int, str], num_layers: int) -> Tuple[int, ...]:
    """Layer indices of ``spec``: an int, ``"3"``, ``"-1"`` (from the end) or an inclusive range ``"0-3"``."""
    text = str(spec).strip()
    try:
        if "-" in text[1:]:
            lo, hi = (int(v) for v in text.split("-", 1)) if not text.startswith("-") else (None, None)
            if lo is None:
                raise ValueError
            out = tuple(range(lo, hi + 1))
        else:
            i = int(text)
            out = (i % num_layers if -num_layers <= i < 0 else i,)
    except ValueError:
        raise PolicyError(f"recompute schedule layer {spec!r}: expected an index ('3', '-1') or a range "
                          "('0-3')") from None
    bad = [i for i in out if not 0 <= i < num_layers]
    if bad or not out:
        raise PolicyError(f"recompute schedule layer {spec!r}: outside 0..{num_layers - 1}")
    return out


@dataclass(frozen=True)
class RecomputeSchedule:
    """One :class:`LayerRecompute` per layer (index = position in the model's layer list)."""

    layers: Tuple[LayerRecompute, ...]

    @classmethod
    def build(cls, num_layers: int, default: Any = "op", overrides: Optional[Mapping[Any, Any]] = None, *,
              keep_last: int = 0) -> "RecomputeSchedule":
        """``default`` for every layer, then ``overrides`` (``{layer spec: decision}``, in order), then the last
        ``keep_last`` layers ``"none"``. A decision: ``"none"``, ``"full"``, ``"op"``, a list of op names or
        groups (kept, the rest recomputes), an ``OpPolicy``, or ``{block kind: CheckpointPolicy or name}``."""
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
            raise PolicyError(f"RecomputeSchedule.build(num_layers): expected an int >= 1, got {num_layers!r}")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or not 0 <= keep_last <= num_layers:
            raise PolicyError(f"RecomputeSchedule.build(keep_last): expected an int in 0..{num_layers}, got "
                              f"{keep_last!r}")
        layers = [_decision(default, "RecomputeSchedule(default)")] * num_layers
        for spec, value in (overrides or {}).items():
            decision = _decision(value, f"RecomputeSchedule(overrides[{spec!r}])")
            for i in parse_layer_spec(spec, num_layers):
                layers[i] = decision
        for i in range(num_layers - keep_last, num_layers):
            layers[i] = LayerRecompute("none")
        return cls(tuple(layers))

    def describe(self, kinds: Sequence[str] = tuple(BLOCK_OPS)) -> Tuple[str, ...]:
        """One line per layer: ``"none"``, ``"full"`` or the recomputed block kinds."""
        out = []
        for d in self.layers:
            if d.mode != "blocks":
                out.append(d.mode)
            else:
                out.append(",".join(k for k in kinds if d.recomputes(k)) or "none")
        return tuple(out)
