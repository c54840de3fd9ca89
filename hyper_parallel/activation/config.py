# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The ``activation`` config block read by ``apply_activation_policy`` (pure parsing and validation).

One block (a dict, e.g. a TOML table) chooses what happens to the activations of a model's layers::

    [activation]
    mode = "selective-op"          # none | full | selective-op | every-k | swap | auto
    layers = "model.layers.*"      # glob(s) of the layer modules (default: the model's repeated blocks)
    every_k = 2                    # every-k: checkpoint layers 1, 3, 5 ... (0-based (i + 1) % k == 0)
    every_k_policy = "full"        # every-k: policy of the chosen layers (full | selective-op)
    save_ops = ["aten.max"]        # selective-op: ops kept in addition to matmuls, attention, collectives
    swap_ops = []                  # selective-op: ops whose outputs are swapped instead of kept
    recompute_collectives = true   # full: false keeps the collectives' outputs instead of communicating again
    [activation.swap]
    target = "auto"                # auto (pinned host memory on accelerators, disk on CPU) | host | disk
    dir = "/tmp"                   # disk: directory of the swap files (default: the system temp dir)
    io = "pread"                   # disk: pread (pwrite/preadv) | mmap (memory-mapped copies)
    min_bytes = 65536              # smaller saved tensors stay where they are
    fusion_bytes = 1048576         # saved tensors below this size are fused into one transfer per layer
    prefetch = 1                   # layers brought back ahead of their backward
    [activation.auto]
    budget_mib = 512               # auto: activation memory budget (or budget_bytes)
    modes = ["none", "selective-op", "full", "swap"]
    [activation.overrides]
    "model.layers.0" = "none"      # per-layer mode (none | full | selective-op | swap), by glob

Every error names the key (``activation.swap.min_bytes: expected ...``). Nothing here imports a framework.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from hyper_parallel.activation.policy import PolicyError, save_ops

__all__ = ["ActivationConfig", "SwapConfig", "AutoConfig", "ActivationConfigError", "parse_activation_config",
           "MODES", "LAYER_MODES", "SWAP_TARGETS", "resolve_layer_modes"]

MODES = ("none", "full", "selective-op", "every-k", "swap", "auto")
LAYER_MODES = ("none", "full", "selective-op", "swap")
SWAP_TARGETS = ("auto", "host", "disk")
_TOP_KEYS = ("mode", "layers", "every_k", "every_k_policy", "save_ops", "swap_ops", "recompute_collectives", "swap",
             "auto", "overrides")
_SWAP_KEYS = ("target", "dir", "io", "min_bytes", "fusion_bytes", "prefetch")
_AUTO_KEYS = ("budget_mib", "budget_bytes", "modes")


class ActivationConfigError(ValueError):
    """A bad ``activation`` config; the message starts with the offending key."""


@dataclass(frozen=True)
class SwapConfig:
    """Where swapped activations go and what is swapped (see the module docstring)."""

    target: str = "auto"
    directory: Optional[str] = None
    min_bytes: int = 64 * 1024
    fusion_bytes: int = 1024 * 1024
    prefetch: int = 1
    io: str = "pread"


@dataclass(frozen=True)
class AutoConfig:
    """``mode = "auto"``: the activation memory budget and the per-layer modes to choose from."""

    budget_bytes: int = 0
    modes: Tuple[str, ...] = ("none", "selective-op", "full", "swap")


@dataclass(frozen=True)
class ActivationConfig:
    """A validated ``activation`` block."""

    mode: str = "none"
    layers: Optional[Tuple[str, ...]] = None
    every_k: int = 2
    every_k_policy: str = "full"
    save_ops: Tuple[str, ...] = ()
    swap_ops: Tuple[str, ...] = ()
    recompute_collectives: bool = True
    swap: SwapConfig = field(default_factory=SwapConfig)
    auto: AutoConfig = field(default_factory=AutoConfig)
    overrides: Tuple[Tuple[str, str], ...] = ()


def _fail(key: str, msg: str) -> ActivationConfigError:
    return ActivationConfigError(f"{key}: {msg}")


def _unknown(block: Mapping, known: Sequence[str], where: str) -> None:
    for key in block:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise _fail(f"{where}.{key}", f"unknown key (known: {', '.join(known)}){hint}")


def _choice(value: Any, choices: Sequence[str], key: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise _fail(key, f"expected one of {', '.join(choices)}, got {value!r}")
    return value.strip().lower()


def _int(value: Any, key: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _fail(key, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _names(value: Any, key: str) -> Tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _fail(key, f"expected a list of non-empty strings, got {value!r}")
    return tuple(v.strip() for v in value)


def _table(value: Any, key: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise _fail(key, f"expected a table (mapping), got {type(value).__name__}")
    return value


def _parse_swap(block: Any, where: str) -> SwapConfig:
    block = _table(block, where)
    _unknown(block, _SWAP_KEYS, where)
    directory = block.get("dir")
    if directory is not None and (not isinstance(directory, str) or not directory.strip()):
        raise _fail(f"{where}.dir", f"expected a directory path (string), got {directory!r}")
    return SwapConfig(target=_choice(block.get("target", "auto"), SWAP_TARGETS, f"{where}.target"),
                      directory=directory,
                      min_bytes=_int(block.get("min_bytes", SwapConfig.min_bytes), f"{where}.min_bytes", 0),
                      fusion_bytes=_int(block.get("fusion_bytes", SwapConfig.fusion_bytes), f"{where}.fusion_bytes", 0),
                      prefetch=_int(block.get("prefetch", SwapConfig.prefetch), f"{where}.prefetch", 0),
                      io=_choice(block.get("io", "pread"), ("pread", "mmap"), f"{where}.io"))


def _parse_auto(block: Any, where: str, required: bool) -> AutoConfig:
    block = _table(block, where)
    _unknown(block, _AUTO_KEYS, where)
    if "budget_mib" in block and "budget_bytes" in block:
        raise _fail(where, "give budget_mib or budget_bytes, not both")
    budget = 0
    if "budget_mib" in block:
        mib = block["budget_mib"]
        if isinstance(mib, bool) or not isinstance(mib, (int, float)) or mib <= 0:
            raise _fail(f"{where}.budget_mib", f"expected a positive number of MiB, got {mib!r}")
        budget = int(mib * 2 ** 20)
    elif "budget_bytes" in block:
        budget = _int(block["budget_bytes"], f"{where}.budget_bytes", 1)
    elif required:
        raise _fail(f"{where}.budget_mib", "mode = 'auto' needs a memory budget (budget_mib or budget_bytes)")
    modes = _names(block.get("modes", AutoConfig.modes), f"{where}.modes")
    for i, m in enumerate(modes):
        _choice(m, LAYER_MODES, f"{where}.modes[{i}]")
    return AutoConfig(budget_bytes=budget, modes=tuple(m.lower() for m in modes))


def _check_ops(names: Tuple[str, ...], key: str) -> None:
    try:
        save_ops(list(names))
    except PolicyError as exc:
        raise _fail(key, str(exc)) from exc


def parse_activation_config(block: Any, where: str = "activation") -> ActivationConfig:
    """Validate ``block`` (a mapping, an :class:`ActivationConfig`, or a mode string) into an
    :class:`ActivationConfig`. Errors are :class:`ActivationConfigError` naming the key."""
    if isinstance(block, ActivationConfig):
        return block
    if isinstance(block, str):
        block = {"mode": block}
    block = _table(block, where)
    _unknown(block, _TOP_KEYS, where)
    if "mode" not in block:
        raise _fail(f"{where}.mode", f"missing (one of {', '.join(MODES)})")
    mode = _choice(block["mode"], MODES, f"{where}.mode")
    layers = block.get("layers")
    if layers is not None:
        layers = _names(layers, f"{where}.layers")
    save = _names(block.get("save_ops", ()), f"{where}.save_ops")
    swap_ops = _names(block.get("swap_ops", ()), f"{where}.swap_ops")
    _check_ops(save, f"{where}.save_ops")
    _check_ops(swap_ops, f"{where}.swap_ops")
    rc = block.get("recompute_collectives", True)
    if not isinstance(rc, bool):
        raise _fail(f"{where}.recompute_collectives", f"expected true or false, got {rc!r}")
    overrides = _table(block.get("overrides", {}), f"{where}.overrides")
    pairs = []
    for pattern, value in overrides.items():
        if not isinstance(pattern, str) or not pattern:
            raise _fail(f"{where}.overrides", f"keys must be module-name globs, got {pattern!r}")
        pairs.append((pattern, _choice(value, LAYER_MODES, f"{where}.overrides.{pattern}")))
    return ActivationConfig(
        mode=mode, layers=layers,
        every_k=_int(block.get("every_k", 2), f"{where}.every_k", 1),
        every_k_policy=_choice(block.get("every_k_policy", "full"), ("full", "selective-op"),
                               f"{where}.every_k_policy"),
        save_ops=save, swap_ops=swap_ops, recompute_collectives=rc,
        swap=_parse_swap(block.get("swap", {}), f"{where}.swap"),
        auto=_parse_auto(block.get("auto", {}), f"{where}.auto", required=mode == "auto"),
        overrides=tuple(pairs))


def resolve_layer_modes(config: ActivationConfig, layer_names: Sequence[str]) -> Dict[str, str]:
    """Per-layer mode (one of :data:`LAYER_MODES`, or ``"auto"`` for layers the auto planner decides)
    after the block's mode, ``every_k`` and ``overrides`` (an override that matches no layer is an error)."""
    out: Dict[str, str] = {}
    for i, name in enumerate(layer_names):
        if config.mode == "every-k":
            out[name] = config.every_k_policy if (i + 1) % config.every_k == 0 else "none"
        else:
            out[name] = config.mode
    for pattern, mode in config.overrides:
        hits = [n for n in layer_names if fnmatchcase(n, pattern)]
        if not hits:
            raise ActivationConfigError(f"activation.overrides.{pattern}: matches none of the layers "
                                        f"{list(layer_names)[:6]}{' ...' if len(layer_names) > 6 else ''}")
        for n in hits:
            out[n] = mode
    return out
