# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Every Hugging Face ``config.json`` field is honoured, irrelevant to training, or refused (pure Python).

A model's state-dict adapter declares :class:`HFFieldRules`: ``honoured`` fields become fields of our config
(the model computes what transformers computes with them; ``tests/st/torch/test_hf_fields.py`` proves each by
a logits parity case or, for training-only fields, a config round trip), ``irrelevant`` fields do not change
the model's values (with the reason), and ``refused`` fields are accepted only at the values our model
implements: ``config_from_hf`` raises one line naming the field and value otherwise. A field in none of the
three lists is refused unless its value is off (``None``, ``False``, ``0``, empty).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

__all__ = ["HFFieldRules", "COMMON_IRRELEVANT", "check_hf_fields", "off"]

#: fields that never change a causal LM's training values, with the reason
COMMON_IRRELEVANT: Dict[str, str] = {
    "_name_or_path": "where transformers loaded the config from",
    "architectures": "the class name; model_type picks the model",
    "transformers_version": "the writer's version",
    "bos_token_id": "generation: written to generation_config.json",
    "eos_token_id": "generation: written to generation_config.json",
    "pad_token_id": "generation / batching: padding positions carry no loss",
    "chunk_size_feed_forward": "transformers' memory chunking: same values",
    "dtype": "the storage dtype; the trainer's precision is training.mixed_precision",
    "torch_dtype": "the storage dtype (transformers 4 name)",
    "id2label": "sequence-classification heads",
    "label2id": "sequence-classification heads",
    "problem_type": "sequence-classification heads",
    "is_encoder_decoder": "always false for a causal LM",
    "output_attentions": "what transformers' forward returns",
    "output_hidden_states": "what transformers' forward returns",
    "return_dict": "what transformers' forward returns",
    "use_cache": "the inference KV cache",
    "initializer_range": "initialisation; init_from loads the weights",
    "pretraining_tp": "transformers' split matmul: the same product",
    "output_router_logits": "what transformers' forward returns (our MoE balances with its own loss/bias)",
    "tokenizer_class": "the tokenizer comes from the folder's tokenizer files",
}


def off(value: Any) -> bool:
    """A value that turns a feature off: ``None``, ``False``, ``0``, ``""``, ``[]``, ``{}``."""
    return value is None or value is False or (not isinstance(value, bool) and value in (0, "", [], {}))


@dataclass(frozen=True)
class HFFieldRules:
    """The classification of one model family's ``config.json`` fields.

    ``honoured``: fields our config carries; ``irrelevant``: ``{field: reason}`` on top of
    :data:`COMMON_IRRELEVANT`; ``refused``: ``{field: (accepts(value) -> bool, why)}``: the field is accepted
    when ``accepts`` says so, else refused with ``why`` (an honoured field listed here too is honoured at the
    values it accepts, e.g. ``hidden_act``)."""

    honoured: Tuple[str, ...]
    irrelevant: Mapping[str, str] = field(default_factory=dict)
    refused: Mapping[str, Tuple[Callable[[Any], bool], str]] = field(default_factory=dict)

    def all_irrelevant(self) -> Dict[str, str]:
        """The common and the family's irrelevant fields."""
        return {**COMMON_IRRELEVANT, **self.irrelevant}

    def classify(self, name: str) -> Optional[str]:
        """``"honoured"``, ``"irrelevant"``, ``"refused"`` or None (unknown)."""
        if name in self.honoured:
            return "honoured"
        if name in self.refused:
            return "refused"
        if name in self.all_irrelevant():
            return "irrelevant"
        return None


def check_hf_fields(rules: HFFieldRules, hf_config: Mapping[str, Any], what: str) -> None:
    """Raise ``ValueError`` (one line: field, value, why) for the first refused field of ``hf_config``."""
    for name, (accepts, why) in rules.refused.items():  # in declaration order (the switch before its details)
        # an honoured field may still refuse values the model does not implement
        if name in hf_config and not accepts(hf_config[name]):
            raise ValueError(f"{what}: config.json {name}={hf_config[name]!r} is not supported: {why}")
    for name in sorted(hf_config):
        value = hf_config[name]
        if rules.classify(name) is None and not off(value):
            raise ValueError(f"{what}: config.json {name}={value!r} is not a field this model knows (neither "
                             f"honoured nor known to be irrelevant); remove it if it does not change the model")
