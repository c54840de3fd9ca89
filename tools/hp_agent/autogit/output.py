# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Redacted output and the exit-code mapping shared by ``hp-agent git`` and ``hp-agent gate-doctor``."""
from __future__ import annotations

import functools
import json
import sys
from typing import Any, Callable

import click

from hp_agent.redact import redact, redact_obj

EXIT_OK, EXIT_FAIL, EXIT_REFUSED, EXIT_INTERNAL = 0, 1, 2, 3


class CommandFailed(RuntimeError):
    """The action ran and failed (exit 1); the message says what failed."""


def say(text: Any = "", err: bool = False) -> None:
    """Print one redacted line."""
    click.echo(redact(text), err=err)


def emit_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON, every string redacted."""
    click.echo(json.dumps(redact_obj(obj), indent=2, ensure_ascii=False, default=str))


def is_interactive() -> bool:
    """True when both stdin and stdout are terminals (a person can confirm)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def guarded(refused: tuple[type[BaseException], ...], failed: tuple[type[BaseException], ...]) -> Callable:
    """Decorator: map ``refused`` exceptions to exit 2, ``failed`` to 1, anything else to 3; redact all."""
    def wrap(func: Callable) -> Callable:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except (click.exceptions.Exit, click.ClickException, click.Abort):
                raise
            except refused as exc:
                say(f"refused: {exc}", err=True)
                sys.exit(EXIT_REFUSED)
            except failed as exc:
                say(f"error: {exc}", err=True)
                sys.exit(EXIT_FAIL)
            except Exception as exc:  # pylint: disable=broad-except  # reported, never swallowed
                say(f"internal error: {type(exc).__name__}: {exc}", err=True)
                sys.exit(EXIT_INTERNAL)
        return inner
    return wrap
