# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""hp_agent: the agent layer of hyper-parallel (console script ``hp-agent``).

``__version__`` is the distribution's (``hyper_parallel/_version.py``). The hooks of a fresh clone run this
package from ``tools/`` on the system Python with nothing installed, where ``hyper_parallel`` is not
importable: the version is then read from that file beside ``tools/`` (no import of the library)."""
from __future__ import annotations


def _version() -> str:
    try:
        from hyper_parallel._version import __version__ as found  # pylint: disable=import-outside-toplevel
        return found
    except ImportError:
        import re  # pylint: disable=import-outside-toplevel
        from pathlib import Path  # pylint: disable=import-outside-toplevel
        source = Path(__file__).resolve().parents[2] / "hyper_parallel" / "_version.py"
        match = re.search(r'__version__ = "([^"]+)"', source.read_text(encoding="utf-8")) if source.is_file() else None
        return match.group(1) if match else "unknown"


__version__ = _version()

__all__ = ["__version__"]
