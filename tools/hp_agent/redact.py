# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Secret redaction for every line hp-agent prints, logs or writes into a report.

Two layers: secrets registered at run time (the code-host token, the Jenkins API token) are replaced
wherever they occur, and well-known credential shapes (``access_token=…``, ``Authorization: …``,
``https://user:pass@host``, ``PRIVATE-TOKEN: …``) are masked even when they were never registered.
"""
from __future__ import annotations

import re
import threading
from typing import Any

MASK = "***"

_LOCK = threading.Lock()
_SECRETS: set[str] = set()

_PATTERNS = [
    (re.compile(r"(?i)((?:access_token|private_token|token|password|api_token)=)[^&\s'\"]+"), r"\1" + MASK),
    (re.compile(r"(?i)(authorization\s*[:=]\s*['\"]?(?:bearer|token|basic)?\s*)[^\s'\",}]+"), r"\1" + MASK),
    (re.compile(r"(?i)(private-token\s*[:=]\s*['\"]?)[^\s'\",}]+"), r"\1" + MASK),
    (re.compile(r"(?i)(https?://)[^/\s:@]+:[^/\s@]+@"), r"\1" + MASK + "@"),
]


def register_secret(secret: str | None) -> None:
    """Remember ``secret`` so that :func:`redact` masks it everywhere (short values are ignored)."""
    if secret and len(secret) >= 4:
        with _LOCK:
            _SECRETS.add(secret)


def clear_secrets() -> None:
    """Forget every registered secret (tests use this between cases)."""
    with _LOCK:
        _SECRETS.clear()


def redact(text: Any) -> str:
    """Return ``str(text)`` with registered secrets and credential-looking substrings masked."""
    out = "" if text is None else str(text)
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        out = out.replace(secret, MASK)
    for pattern, repl in _PATTERNS:
        out = pattern.sub(repl, out)
    return out


def redact_obj(obj: Any) -> Any:
    """Redact every string inside a JSON-like structure (dicts, lists, tuples, scalars)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact(k): redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    return obj
