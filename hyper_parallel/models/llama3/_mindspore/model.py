# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The Llama 3 decoder on MindSpore (PyNative): the same architecture, config and parameter names as the
torch model (``hyper_parallel.models.llama3.model``), so a checkpoint in the shared format or a Hugging Face
``LlamaForCausalLM`` state dict loads into either.

Written with ``mindspore.mint`` / ``ops`` calls that have CPU kernels in MindSpore 2.10: ``mint.nn.Linear``
(its ``linear`` kernel), ``ops.gather`` for the embedding lookup (the mint ``Embedding`` kernel is missing on
CPU), RMSNorm as ``x * rsqrt(mean(x^2) + eps) * w`` (no CPU ``RmsNorm``), attention as two batched
``mint.matmul`` with an additive causal mask and ``mint.softmax``, the cross-entropy with ``max``/``exp``/
``log``/``gather`` (no CPU ``LogSoftmaxExt``/``LogSumExp``), and constants built in NumPy (no CPU
``Arange``). Head counts are read from tensor sizes, so the same code runs on tensor-parallel shards.
Dense flavors only (MoE flavors are torch-only here).
"""
from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import mint, nn, ops

from hyper_parallel.models.llama3.args import TINY_CONFIGS, LlamaConfig

__all__ = ["LlamaConfig", "LlamaForCausalLM", "TINY_CONFIGS", "LlamaModel", "LlamaDecoderLayer", "LlamaAttention",
           "LlamaMLP", "LlamaRMSNorm", "LlamaRotary", "Embedding", "Linear", "attention", "apply_rotary_emb",
           "cross_entropy"]


def _normal(shape, std: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * std).astype(np.float32)


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
        self.weight = ms.Parameter(ms.Tensor(np.ones(dim, np.float32)), name="weight")
        self.eps = eps

    def construct(self, x):
        """Normalise the last dim."""
        return x * mint.rsqrt(mint.mean(x * x, -1, keepdim=True) + self.eps) * self.weight


class LlamaRotary(nn.Cell):
    """cos/sin tables (HF ``rotate_half`` convention); ``inv_freq`` as the torch model computes it."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hd = config.head_dim
        inv = 1.0 / (np.float32(config.rope_theta) ** (np.arange(0, hd, 2, dtype=np.int64).astype(np.float32) / hd))
        if getattr(config, "rope_type", "default") == "llama3":
            inv = _llama3_scaled(inv.astype(np.float64), config).astype(np.float32)
        self.inv_freq = ms.Tensor(inv.astype(np.float32))

    def construct(self, positions):
        """(cos, sin) of shape ``[seq, 1, head_dim]`` for positions ``[seq]``."""
        freqs = positions.astype(ms.float32).unsqueeze(-1) * self.inv_freq
        emb = mint.cat((freqs, freqs), -1)
        return mint.cos(emb).unsqueeze(-2), mint.sin(emb).unsqueeze(-2)


def _llama3_scaled(inv: np.ndarray, config) -> np.ndarray:
    low = config.rope_original_max_position_embeddings / config.rope_low_freq_factor
    high = config.rope_original_max_position_embeddings / config.rope_high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > low, inv / config.rope_factor, inv)
    smooth = ((config.rope_original_max_position_embeddings / wavelen - config.rope_low_freq_factor)
              / (config.rope_high_freq_factor - config.rope_low_freq_factor))
    blended = (1 - smooth) * scaled / config.rope_factor + smooth * scaled
    return np.where((wavelen >= high) & (wavelen <= low), blended, scaled)


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


def attention(q, k, v):
    """Causal attention on ``[batch, seq, heads, dim]`` (grouped-query: query head ``i`` reads key/value head
    ``i // (heads / kv_heads)``, torch's ``enable_gqa``), returning ``[batch, seq, heads * dim]``."""
    b, s, h, d = q.shape
    kv = k.shape[2]
    if kv != h:
        rep = h // kv
        k = k.unsqueeze(3).broadcast_to((b, s, kv, rep, d)).reshape(b, s, h, d)
        v = v.unsqueeze(3).broadcast_to((b, s, kv, rep, d)).reshape(b, s, h, d)
    qt, kt, vt = q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
    scores = mint.matmul(qt, kt) * (1.0 / math.sqrt(d)) + _causal_bias(s).astype(q.dtype)
    out = mint.matmul(mint.softmax(scores, dim=-1), vt)
    return out.transpose(0, 2, 1, 3).reshape(b, s, h * d)


class LlamaAttention(nn.Cell):
    """Causal self-attention with grouped-query heads."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        hd = config.head_dim
        self.head_dim = hd
        self.q_proj = Linear(config.hidden_size, config.num_attention_heads * hd)
        self.k_proj = Linear(config.hidden_size, config.num_key_value_heads * hd)
        self.v_proj = Linear(config.hidden_size, config.num_key_value_heads * hd)
        self.o_proj = Linear(config.num_attention_heads * hd, config.hidden_size)

    def construct(self, x, cos, sin):
        """``x: [batch, seq, hidden]``."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x).reshape(b, s, -1, self.head_dim)
        k = self.k_proj(x).reshape(b, s, -1, self.head_dim)
        v = self.v_proj(x).reshape(b, s, -1, self.head_dim)
        return self.o_proj(attention(apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin), v))


class LlamaMLP(nn.Cell):
    """SwiGLU feed-forward."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size)

    def construct(self, x):
        """``down(silu(gate(x)) * up(x))``."""
        return self.down_proj(mint.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Cell):
    """Pre-norm attention + MLP block."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def construct(self, x, cos, sin):
        """Residual stream in, residual stream out."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Cell):
    """Embedding + decoder layers + final norm."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.CellList([LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = LlamaRotary(config)

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
    torch model's (``model.layers.0.self_attn.q_proj.weight``, ``lm_head.weight``)."""

    def __init__(self, config: LlamaConfig, seed: int = 0) -> None:
        super().__init__()
        if config.moe is not None:
            raise ValueError("LlamaForCausalLM (MindSpore): MoE flavors are not supported by the MindSpore Llama; "
                             "use a dense flavor such as 'debug'")
        if config.tie_word_embeddings:
            raise ValueError("LlamaForCausalLM (MindSpore): tie_word_embeddings is not supported")
        if getattr(config, "qk_norm", False):
            raise ValueError("LlamaForCausalLM (MindSpore): qk_norm (Qwen3) is not supported")
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size)
        for name, param in self.parameters_and_names():
            param.name = name  # the hierarchical name, as torch's named_parameters
        self.reset_parameters(seed=seed)

    def reset_parameters(self, std: float = 0.02, seed: int = 0) -> None:
        """Normal(0, std) for linear and embedding weights, ones for norms. Every parameter draws from its own
        NumPy generator seeded by ``(seed, its index)``: the full weights are the same on every rank and for
        every layout (initialise before parallelising). Use :meth:`load_numpy` to start from the torch model's
        weights."""
        for i, (_, param) in enumerate(self.parameters_and_names()):
            if param.name.endswith("norm.weight"):
                continue
            param.set_data(ms.Tensor(_normal(tuple(param.shape), std, seed * 100003 + i)))

    def load_numpy(self, weights) -> None:
        """Set every parameter from ``{name: ndarray}`` (full, unsharded; e.g. the torch model's state dict as
        NumPy); a missing or extra name, or a shape mismatch, is an error naming it."""
        own = dict(self.parameters_and_names())
        missing = sorted(set(own) - set(weights))
        extra = sorted(set(weights) - set(own))
        if missing or extra:
            raise ValueError(f"LlamaForCausalLM.load_numpy: missing {missing}, unexpected {extra}")
        for name, param in own.items():
            value = np.asarray(weights[name], dtype=np.float32)
            if tuple(value.shape) != tuple(param.shape):
                raise ValueError(f"LlamaForCausalLM.load_numpy: {name} has shape {value.shape}, expected "
                                 f"{tuple(param.shape)}")
            param.set_data(ms.Tensor(value))

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
