# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The Llama-family decoder on MindSpore (PyNative): the same architecture, configs and parameter names as the
torch models (``hyper_parallel.models.llama3.model``), so a checkpoint in the shared format or a Hugging Face
state dict (through the same adapter) loads into either. Qwen3 (``qk_norm``, explicit ``head_dim``, tied
embeddings), Qwen3-MoE (MoE layers: ``hyper_parallel.moe._mindspore``) and DeepSeek-V3 (MLA, in
``hyper_parallel.models.deepseek_v3._mindspore``) build on these cells.

Written with ``mindspore.mint`` / ``ops`` calls that have CPU kernels in MindSpore 2.10: ``mint.nn.Linear``
(its ``linear`` kernel), ``ops.gather`` for the embedding lookup (the mint ``Embedding`` kernel is missing on
CPU), RMSNorm as ``x * rsqrt(mean(x^2) + eps) * w`` (no CPU ``RmsNorm``), attention as two batched
``mint.matmul`` with an additive causal mask and ``mint.softmax``, the cross-entropy with ``max``/``exp``/
``log``/``gather`` (no CPU ``LogSoftmaxExt``/``LogSumExp``), and constants built in NumPy (no CPU
``Arange``). Head counts are read from tensor sizes, so the same code runs on tensor-parallel shards.

Initial values: ``init_parameters`` (``hyper_parallel.models._mindspore.init``) — norms ones, everything else
Normal(0, 0.02) from the counter-based RNG keyed by ``(seed, parameter name)``: bit-identical to the torch
model after ``hyper_parallel.models.init_parameters(model, seed=seed)``, without torch. Each block of a layer
is its own cell (``core_attention``, ``act``), the granularity at which ``hyper_parallel.activation``
recomputes on MindSpore.
"""
from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import mint, nn, ops
from mindspore.common.initializer import initializer

from hyper_parallel.cp._mindspore.attention import active as cp_active
from hyper_parallel.models.llama3.args import TINY_CONFIGS, LlamaConfig

__all__ = ["LlamaConfig", "LlamaForCausalLM", "TINY_CONFIGS", "LlamaModel", "LlamaDecoderLayer", "LlamaAttention",
           "LlamaMLP", "LlamaRMSNorm", "LlamaRotary", "Embedding", "Linear", "CoreAttention", "GatedAct", "attention",
           "apply_rotary_emb", "cross_entropy", "rope_inv_freq"]


class Linear(mint.nn.Linear):
    """``mint.nn.Linear`` without bias by default (parameter ``weight [out, in]`` like torch's)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(in_features, out_features, bias=bias)

    def construct(self, x):  # pylint: disable=arguments-differ
        """``x @ weight.T (+ bias)``; on a 2-D view (MindSpore's CPU linear kernel is several times faster on
        2-D inputs than on 3-D ones)."""
        out = mint.nn.functional.linear(x.reshape(-1, x.shape[-1]), self.weight, self.bias)
        return out.reshape(tuple(x.shape[:-1]) + (out.shape[-1],))


class Embedding(mint.nn.Embedding):
    """``mint.nn.Embedding`` (parameter ``weight``, as torch's) whose lookup is ``ops.gather``: the mint
    ``Embedding`` kernel has no CPU implementation. TP styles replace ``construct`` as for any Embedding."""

    def construct(self, input_ids):  # pylint: disable=arguments-differ
        """Rows of ``weight`` for ``input_ids``."""
        return ops.gather(self.weight, input_ids, 0)


class LlamaRMSNorm(nn.Cell):
    """Root-mean-square norm with a learned scale (torch's ``F.rms_norm`` formula)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = ms.Parameter(initializer("ones", (dim,), ms.float32), name="weight")
        self.eps = eps

    def construct(self, x):
        """Normalise the last dim."""
        return x * mint.rsqrt(mint.mean(x * x, -1, keepdim=True) + self.eps) * self.weight


def rope_inv_freq(config, dim: int) -> np.ndarray:
    """``theta ** (-2i / dim)`` in float32 as the torch model computes it (Llama 3.1-scaled with
    ``rope_type="llama3"``)."""
    inv = 1.0 / (np.float32(config.rope_theta) ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim))
    if getattr(config, "rope_type", "default") == "llama3":
        inv = _llama3_scaled(inv.astype(np.float32), config)
    return inv.astype(np.float32)


class LlamaRotary(nn.Cell):
    """cos/sin tables (HF ``rotate_half`` convention); ``inv_freq`` as the torch model computes it."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.inv_freq = ms.Tensor(rope_inv_freq(config, config.head_dim))
        self.magnitude = 1.0

    def construct(self, positions):
        """(cos, sin) of shape ``[seq, 1, head_dim]`` for positions ``[seq]``."""
        freqs = positions.astype(ms.float32).unsqueeze(-1) * self.inv_freq
        emb = mint.cat((freqs, freqs), -1)
        cos, sin = mint.cos(emb), mint.sin(emb)
        if self.magnitude != 1.0:
            cos, sin = cos * self.magnitude, sin * self.magnitude
        return cos.unsqueeze(-2), sin.unsqueeze(-2)


def _llama3_scaled(inv: np.ndarray, config) -> np.ndarray:
    low = config.rope_original_max_position_embeddings / config.rope_low_freq_factor
    high = config.rope_original_max_position_embeddings / config.rope_high_freq_factor
    wavelen = np.float32(2 * math.pi) / inv
    scaled = np.where(wavelen > low, inv / np.float32(config.rope_factor), inv)
    smooth = ((np.float32(config.rope_original_max_position_embeddings) / wavelen - config.rope_low_freq_factor)
              / (config.rope_high_freq_factor - config.rope_low_freq_factor))
    blended = (1 - smooth) * scaled / np.float32(config.rope_factor) + smooth * scaled
    return np.where((wavelen >= high) & (wavelen <= low), blended, scaled).astype(np.float32)


def apply_rotary_emb(x, cos, sin):
    """``x * cos + rotate_half(x) * sin`` on ``[batch, seq, heads, head_dim]``."""
    half = x.shape[-1] // 2
    rotated = mint.cat((-x[..., half:], x[..., :half]), -1)
    return x * cos + rotated * sin


_MASKS = {}


def _causal_bias(seq: int):
    """``[seq, seq]`` additive mask: 0 on and below the diagonal, a large negative number above."""
    if seq not in _MASKS:
        _MASKS[seq] = ms.Tensor(np.triu(np.full((seq, seq), -1e30, np.float32), 1))
    return _MASKS[seq]


def attention(q, k, v, scale=None):
    """Causal attention on ``[batch, seq, heads, dim]`` (grouped-query: query head ``i`` reads key/value head
    ``i // (heads / kv_heads)``, torch's ``enable_gqa``; ``v`` may have another head size), returning
    ``[batch, seq, heads * v_dim]``; ``scale`` default ``dim ** -0.5``. Inside a ``hyper_parallel.cp.context_parallel``
    block on a MindSpore mesh (default ``scale``, equal head sizes), the block's CP attention over the whole
    sequence (q, k, v are this rank's sequence shards)."""
    cp = cp_active()
    if cp is not None:
        if scale is not None or v.shape[-1] != q.shape[-1]:
            raise ValueError("attention (MindSpore): context parallel supports the default scale and equal q/v "
                             "head sizes (Llama / Qwen3 attention); not this model's attention")
        return cp(q, k, v)
    b, s, h, d = q.shape
    kv, dv = k.shape[2], v.shape[-1]
    if kv != h:
        rep = h // kv
        k = k.unsqueeze(3).broadcast_to((b, s, kv, rep, d)).reshape(b, s, h, d)
        v = v.unsqueeze(3).broadcast_to((b, s, kv, rep, dv)).reshape(b, s, h, dv)
    qt, kt, vt = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
    scale = (1.0 / math.sqrt(d)) if scale is None else scale
    scores = mint.matmul(qt, kt) * scale + _causal_bias(s).astype(q.dtype)
    out = mint.matmul(mint.softmax(scores, dim=-1), vt)
    return out.transpose(0, 2, 1, 3).reshape(b, s, h * dv)


class CoreAttention(nn.Cell):
    """The attention core (scores, causal softmax, weighted values) as its own cell: the block the selective
    recompute policies name ``attention``."""

    def __init__(self, scale=None) -> None:
        super().__init__()
        self.scale = scale

    def construct(self, q, k, v):
        """See :func:`attention`."""
        return attention(q, k, v, self.scale)


def _gelu_tanh(x):
    return mint.nn.functional.gelu(x, approximate="tanh")


#: ``config.hidden_act`` -> the gate activation (the torch model's ``ACTIVATIONS``)
ACTIVATIONS = {"silu": mint.nn.functional.silu, "swish": mint.nn.functional.silu, "gelu": mint.nn.functional.gelu,
               "gelu_pytorch_tanh": _gelu_tanh, "gelu_new": _gelu_tanh, "relu": mint.nn.functional.relu}


class GatedAct(nn.Cell):
    """``act(gate) * up`` as its own cell (the pointwise block of the MLP that selective recompute redoes)."""

    def __init__(self, hidden_act: str = "silu") -> None:
        super().__init__()
        self.fn = ACTIVATIONS[hidden_act]

    def construct(self, gate, up):
        """``act(gate) * up``."""
        return self.fn(gate) * up


class LlamaAttention(nn.Cell):
    """Causal self-attention with grouped-query heads (and Qwen3's per-head query/key RMSNorm when
    ``config.qk_norm``)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hd = config.head_dim
        self.head_dim = hd
        self.q_proj = Linear(config.hidden_size, config.num_attention_heads * hd)
        self.k_proj = Linear(config.hidden_size, config.num_key_value_heads * hd)
        self.v_proj = Linear(config.hidden_size, config.num_key_value_heads * hd)
        self.o_proj = Linear(config.num_attention_heads * hd, config.hidden_size)
        if getattr(config, "qk_norm", False):
            self.q_norm = LlamaRMSNorm(hd, config.rms_norm_eps)
            self.k_norm = LlamaRMSNorm(hd, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.core_attention = CoreAttention()

    def construct(self, x, cos, sin):
        """``x: [batch, seq, hidden]``."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x).reshape(b, s, -1, self.head_dim)
        k = self.k_proj(x).reshape(b, s, -1, self.head_dim)
        v = self.v_proj(x).reshape(b, s, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        return self.o_proj(self.core_attention(q, k, v))


class LlamaMLP(nn.Cell):
    """Gated feed-forward ``down(act(gate(x)) * up(x))`` (SwiGLU with ``hidden_act="silu"``)."""

    def __init__(self, config: LlamaConfig, intermediate_size: int = 0) -> None:
        super().__init__()
        inner = intermediate_size or config.intermediate_size
        self.gate_proj = Linear(config.hidden_size, inner)
        self.up_proj = Linear(config.hidden_size, inner)
        self.down_proj = Linear(inner, config.hidden_size)
        self.act = GatedAct(getattr(config, "hidden_act", "silu"))

    def construct(self, x):
        """``down(act(gate(x)) * up(x))``."""
        return self.down_proj(self.act(self.gate_proj(x), self.up_proj(x)))


def _moe(config):
    from hyper_parallel.moe._mindspore.moe import MoE  # pylint: disable=import-outside-toplevel
    return MoE(config.moe)


class LlamaDecoderLayer(nn.Cell):
    """Pre-norm attention + MLP (or MoE) block; a model family with another attention sets ``attention_cls``."""

    attention_cls = LlamaAttention

    def __init__(self, config: LlamaConfig, index: int = 0) -> None:
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = self.attention_cls(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = _moe(config) if config.is_moe_layer(index) else LlamaMLP(config)

    def construct(self, x, cos, sin):
        """Residual stream in, residual stream out."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Cell):
    """Embedding + decoder layers + final norm (``layer_cls`` / ``rotary_cls``: what a derived model swaps in)."""

    layer_cls = LlamaDecoderLayer
    rotary_cls = LlamaRotary

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.CellList([self.layer_cls(config, i) for i in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = self.rotary_cls(config)

    def construct(self, input_ids, position_ids=None):
        """Hidden states ``[batch, seq, hidden]``; ``position_ids [seq]`` default ``0..seq-1``."""
        if position_ids is None:
            position_ids = ms.Tensor(np.arange(input_ids.shape[1], dtype=np.int32))
        cos, sin = self.rotary(position_ids)
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.norm(h)


class LlamaForCausalLM(nn.Cell):
    """Decoder + LM head; ``construct`` returns logits ``[batch, seq, vocab]``. Parameters are named as the
    torch model's (``model.layers.0.self_attn.q_proj.weight``, ``lm_head.weight``); with
    ``tie_word_embeddings`` the head is the embedding's Parameter (listed once, as
    ``model.embed_tokens.weight``)."""

    model_cls = LlamaModel

    def __init__(self, config: LlamaConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_cls(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        for name, param in self.parameters_and_names():
            param.name = name  # the hierarchical name, as torch's named_parameters
        from hyper_parallel.models._mindspore.init import is_empty_init  # pylint: disable=C0415
        if not is_empty_init():  # inside init_empty_weights() the parameters stay lazy until init_parameters
            self.reset_parameters(seed=seed)

    def reset_parameters(self, std: float = 0.02, seed: int = 0) -> None:
        """``hyper_parallel.models._mindspore.init.init_parameters(self, seed=seed, std=std)``: the torch
        model's ``init_parameters`` values for the same seed, bit for bit; layout-independent."""
        from hyper_parallel.models._mindspore.init import init_parameters  # pylint: disable=C0415
        init_parameters(self, seed=seed, std=std)

    def tied_names(self):
        """``{alias: name}`` of parameters listed under another name (``lm_head.weight`` when tied)."""
        return {"lm_head.weight": "model.embed_tokens.weight"} if self.config.tie_word_embeddings else {}

    def load_numpy(self, weights) -> None:
        """Set every parameter (and the MoE expert biases) from ``{name: ndarray}`` (full, unsharded; e.g. the
        torch model's state dict as NumPy, or ``adapter.from_hf`` of a Hugging Face state dict); a missing or
        extra name, or a shape mismatch, is an error naming it."""
        from hyper_parallel.models._mindspore.init import load_numpy  # pylint: disable=C0415
        load_numpy(self, weights)

    def construct(self, input_ids, position_ids=None):
        """Logits for next-token prediction."""
        return self.lm_head(self.model(input_ids, position_ids))

    @staticmethod
    def loss(logits, labels):
        """Mean next-token cross-entropy (labels already shifted, -100 ignored); a ``Shard(-1)`` DTensor of
        logits (loss parallel) goes to ``vocab_parallel_cross_entropy``."""
        if not isinstance(logits, ms.Tensor):
            from hyper_parallel.tp._mindspore.loss import vocab_parallel_cross_entropy  # noqa  # pylint: disable=C0415
            return vocab_parallel_cross_entropy(logits, labels)
        return cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def cross_entropy(logits, target, ignore_index: int = -100):
    """Mean cross-entropy of ``[tokens, classes]`` logits against class ids (``ignore_index`` skipped), from
    kernels MindSpore has on CPU."""
    logits = logits.astype(ms.float32)
    shifted = logits - ops.stop_gradient(logits.max(axis=-1, keepdims=True))
    lse = mint.log(mint.exp(shifted).sum(-1))
    valid = target != ignore_index
    idx = mint.where(valid, target, ops.zeros_like(target)).astype(ms.int64).unsqueeze(-1)
    nll = (lse - mint.gather(shifted, -1, idx).squeeze(-1)) * valid.astype(ms.float32)
    return nll.sum() / mint.clamp(valid.astype(ms.float32).sum(), min=1.0)
