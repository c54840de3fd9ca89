# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One module per AI coding assistant, each defining ``ASSISTANT`` (an :class:`~.base.Assistant`).

An assistant's module holds everything hp-agent knows about it: the hook payloads it sends and the
answers it understands (used by ``hp-agent hook``), the files ``hp-agent sync`` generates for it, and
how ``hp-agent doctor`` probes its hooks. Adding an assistant is adding one module here; nothing else
lists them. Only the module asked for is imported (the hook path stays fast).
"""
from __future__ import annotations

import importlib
import re

from hp_agent.assistants.base import Assistant

_SKIP = {"base"}


def names() -> list[str]:
    """Names of every assistant module, sorted."""
    import pkgutil  # pylint: disable=import-outside-toplevel

    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _SKIP and not m.name.startswith("_"))


def get(name: str) -> Assistant:
    """The assistant called ``name``; ValueError naming the known ones otherwise."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or "") or name in _SKIP:
        raise ValueError(f"unknown assistant {name!r}; expected one of {', '.join(names())}")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise ValueError(f"unknown assistant {name!r}; expected one of {', '.join(names())}") from None
    assistant = module.ASSISTANT
    if assistant.name != name:
        raise ValueError(f"hp_agent.assistants.{name} defines an assistant called {assistant.name!r}")
    return assistant


def all_assistants() -> list[Assistant]:
    """Every assistant, in detection order (most specific payload shape first)."""
    return sorted((get(n) for n in names()), key=lambda a: (a.detect_priority, a.name))


def detect(payload: dict) -> Assistant:
    """The assistant whose payload shape ``payload`` has (Claude Code's shape is the fallback)."""
    for assistant in all_assistants():
        if assistant.detects(payload):
            return assistant
    return get("claude")


__all__ = ["Assistant", "all_assistants", "detect", "get", "names"]
