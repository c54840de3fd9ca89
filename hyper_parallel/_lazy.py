# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Lazy public names for packages (``docs/design/layout.md``): a package lists ``name -> module`` in a
``_LAZY`` map and ends with ``__getattr__, __dir__ = lazy_exports(__name__, _LAZY)``, so importing the
package imports no framework and each name loads its module on first use."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, List, Mapping, Optional, Tuple

__all__ = ["lazy_exports"]


def lazy_exports(package: str, table: Mapping[str, str], cache: Optional[Callable[[str, str], bool]] = None
                 ) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """The module-level ``(__getattr__, __dir__)`` of ``package`` for the names in ``table``.

    A loaded name is stored in the package, so later look-ups skip ``__getattr__``; ``cache(name, module)``
    returning False keeps a name looked up on every access (a class chosen by the current backend).
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:  # pylint: disable=invalid-name
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        if cache is None or cache(name, module):
            namespace[name] = value
        return value

    def __dir__() -> List[str]:  # pylint: disable=invalid-name
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
