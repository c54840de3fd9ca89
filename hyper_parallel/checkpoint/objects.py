# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Non-tensor values of a state dict (step counters, scheduler and data-loader states), backend-free.

A value that JSON represents exactly (``None``, ``bool``, ``int``, ``float``, ``str`` and lists/dicts with
string keys of those; tuples do not qualify) is stored as JSON: inlined into ``metadata.json`` when small,
readable by any tool. Anything else is pickled (protocol 4). Loading a pickle runs code named in it:
load checkpoints you trust, as with ``torch.load(weights_only=False)``, which torch's DCP itself uses.
"""
from __future__ import annotations

import json
import math
import pickle
from typing import Any, Tuple

__all__ = ["encode_object", "decode_object", "INLINE_LIMIT", "JSON", "PICKLE"]

JSON = "json"
PICKLE = "pickle"
#: JSON values up to this many bytes are inlined into ``metadata.json``.
INLINE_LIMIT = 4096


def _json_exact(value: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return type(value) is int  # pylint: disable=unidiomatic-typecheck  # not an IntEnum
    if isinstance(value, float):
        return type(value) is float and math.isfinite(value)  # pylint: disable=unidiomatic-typecheck
    if type(value) is list:  # pylint: disable=unidiomatic-typecheck
        return all(_json_exact(v, depth + 1) for v in value)
    if type(value) is dict:  # pylint: disable=unidiomatic-typecheck
        return all(isinstance(k, str) and _json_exact(v, depth + 1) for k, v in value.items())
    return False


def encode_object(value: Any) -> Tuple[str, bytes]:
    """``(encoding, payload)``: ``('json', utf-8 JSON)`` when JSON holds ``value`` exactly, else ``('pickle', ...)``."""
    if _json_exact(value):
        return JSON, json.dumps(value, separators=(",", ":")).encode()
    try:
        return PICKLE, pickle.dumps(value, protocol=4)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(f"state dict value of type {type(value).__name__} can be neither JSON-encoded nor "
                        f"pickled: {exc}") from exc


def decode_object(encoding: str, payload: bytes, what: str = "object") -> Any:
    """Inverse of :func:`encode_object`."""
    if encoding == JSON:
        return json.loads(payload.decode())
    if encoding == PICKLE:
        try:
            return pickle.loads(payload)
        except (ImportError, AttributeError) as exc:
            raise TypeError(f"{what}: the pickled value needs {exc}; load it where that module is importable") \
                from exc
    raise ValueError(f"{what}: unknown object encoding {encoding!r} (expected 'json' or 'pickle')")
