# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The optimizer / LR-scheduler configuration block: parsing and validation (pure Python).

One flat block drives both factories (``get_hyper_optimizer`` reads the optimizer keys,
``get_hyper_lr_scheduler`` the schedule keys). It may be a dict, a dataclass or any object with
attributes (a trainer's config block); a dict with ``optimizer`` / ``lr_scheduler`` sub-dicts
(TorchTitan style) is merged first. Every value is checked here, and an error names the key::

    OptimConfig.parse({"name": "muon", "lr": 3e-4, "warmup_steps": 100, "decay": "wsd", "total_steps": 1000})
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from hyper_parallel.optim.lr import DECAYS, WSD_SHAPES

__all__ = ["OptimConfig", "OPTIMIZER_NAMES", "ADJUST_LR_MODES", "GROUP_KEYS"]

#: optimizer names accepted by ``name`` (``muon`` = Muon for hidden matrices + AdamW for the rest)
OPTIMIZER_NAMES = ("adamw", "adam", "muon")
#: Muon learning-rate adjustments (see ``Muon``)
ADJUST_LR_MODES = ("match_rms_adamw", "spectral", "original", None)
#: keys a ``param_groups`` entry may set besides ``params``
GROUP_KEYS = ("optimizer", "lr", "weight_decay", "betas", "eps", "momentum", "nesterov", "ns_steps", "adjust_lr")


def _fail(key: str, expected: str, value: Any) -> ValueError:
    return ValueError(f"optimizer config {key!r}: expected {expected}, got {value!r}")


def _number(key: str, value: Any, lo: float = 0.0, hi: float = math.inf, hi_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise _fail(key, "a number", value)
    upper = value >= hi if hi_open else value > hi
    if value < lo or upper:
        bound = f"< {hi}" if hi_open else f"<= {hi}"
        raise _fail(key, f"a number >= {lo}" + ("" if math.isinf(hi) else f" and {bound}"), value)
    return float(value)


def _int(key: str, value: Any, lo: int = 0, hi: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        raise _fail(key, f"an int >= {lo}" + ("" if hi is None else f" and <= {hi}"), value)
    return int(value)


def _globs(key: str, value: Any) -> Tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise _fail(key, "a list of parameter-name globs", value)
    return tuple(value)


def _betas(key: str, value: Any) -> Tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _fail(key, "two numbers (beta1, beta2)", value)
    return (_number(f"{key}[0]", value[0], 0.0, 1.0, True), _number(f"{key}[1]", value[1], 0.0, 1.0, True))


def _adjust(key: str, value: Any) -> Optional[str]:
    if isinstance(value, str) and value.lower() == "none":
        value = None
    if value not in ADJUST_LR_MODES:
        raise _fail(key, f"one of {list(ADJUST_LR_MODES)}", value)
    return value


def _choice(key: str, value: Any, options: Tuple[str, ...]) -> str:
    if not isinstance(value, str) or value.lower() not in options:
        raise _fail(key, f"one of {list(options)}", value)
    return value.lower()


def _group(index: int, entry: Any) -> Dict[str, Any]:
    key = f"param_groups[{index}]"
    if not isinstance(entry, Mapping) or "params" not in entry:
        raise _fail(key, "a dict with 'params' (globs) and overrides", entry)
    unknown = sorted(set(entry) - set(GROUP_KEYS) - {"params"})
    if unknown:
        raise ValueError(f"optimizer config {key!r}: unknown keys {unknown}; expected 'params' and any of "
                         f"{list(GROUP_KEYS)}")
    out: Dict[str, Any] = {"params": _globs(f"{key}.params", entry["params"])}
    for k, v in entry.items():
        where = f"{key}.{k}"
        if k == "optimizer":
            out[k] = _choice(where, v, ("adamw", "adam", "muon"))
        elif k in ("lr", "weight_decay", "eps"):
            out[k] = _number(where, v)
        elif k == "momentum":
            out[k] = _number(where, v, 0.0, 1.0, True)
        elif k == "betas":
            out[k] = _betas(where, v)
        elif k == "nesterov":
            if not isinstance(v, bool):
                raise _fail(where, "True or False", v)
            out[k] = v
        elif k == "ns_steps":
            out[k] = _int(where, v, 1, 99)
        elif k == "adjust_lr":
            out[k] = _adjust(where, v)
    return out


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer and LR-schedule settings (every field validated by :meth:`parse`).

    Optimizer: ``name`` (``adamw`` | ``adam`` | ``muon``), ``lr``, ``betas``, ``eps``,
    ``weight_decay``, ``foreach`` (AdamW/Adam). Muon (``name="muon"``): ``muon_lr`` (default
    ``lr``; with ``adjust_lr="match_rms_adamw"`` the AdamW lr carries over), ``momentum``,
    ``nesterov``, ``ns_steps``, ``adjust_lr``, ``muon_weight_decay`` (default ``weight_decay``).
    Assignment: ``muon_params`` (globs; default: every parameter with 2 or more dims except
    embeddings and the output head), ``adamw_params`` (globs forced to AdamW), ``head_names``
    (module-name globs of output heads), ``param_groups`` (``[{"params": [globs], "lr": ...}]``
    overrides; a parameter may be claimed by one entry only).
    Schedule: ``warmup_steps``, ``decay`` (``constant`` | ``linear`` | ``cosine`` | ``wsd``),
    ``total_steps`` (needed by the decays), ``decay_ratio`` and ``wsd_shape`` (WSD), ``min_lr_ratio``.
    """

    name: str = "adamw"
    lr: float = 8e-4
    betas: Tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    foreach: Optional[bool] = None
    muon_lr: Optional[float] = None
    momentum: float = 0.95
    nesterov: bool = True
    ns_steps: int = 5
    adjust_lr: Optional[str] = "match_rms_adamw"
    muon_weight_decay: Optional[float] = None
    muon_params: Optional[Tuple[str, ...]] = None
    adamw_params: Tuple[str, ...] = ()
    head_names: Tuple[str, ...] = ("lm_head", "output", "*.lm_head", "*.output")
    param_groups: Tuple[Dict[str, Any], ...] = ()
    warmup_steps: int = 0
    decay: str = "constant"
    total_steps: Optional[int] = None
    decay_ratio: float = 0.1
    wsd_shape: str = "linear"
    min_lr_ratio: float = 0.0

    @classmethod
    def keys(cls) -> Tuple[str, ...]:
        """Every accepted key."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def parse(cls, config: Any = None) -> "OptimConfig":
        """Validate a dict / dataclass / attribute object (or an ``OptimConfig``) into an ``OptimConfig``."""
        if isinstance(config, OptimConfig):
            return config
        raw = _as_dict(config)
        unknown = sorted(set(raw) - set(cls.keys()))
        if unknown:
            raise ValueError(f"optimizer config: unknown keys {unknown}; expected any of {list(cls.keys())}")
        values = {k: _check(k, v) for k, v in raw.items()}
        out = cls(**values)
        _cross_check(out)
        return out

    def scheduler_settings(self) -> Dict[str, Any]:
        """Keyword arguments of :func:`hyper_parallel.optim.lr.lr_factor`."""
        return {"warmup_steps": self.warmup_steps, "decay": self.decay, "total_steps": self.total_steps,
                "min_lr_ratio": self.min_lr_ratio, "decay_ratio": self.decay_ratio, "wsd_shape": self.wsd_shape}


def _raw(config: Any) -> Dict[str, Any]:
    if config is None:
        return {}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    if isinstance(config, Mapping):
        return dict(config)
    if hasattr(config, "__dict__"):
        return {k: v for k, v in vars(config).items() if not k.startswith("_")}
    raise TypeError(f"optimizer config: expected a dict, a dataclass or an object with attributes, got "
                    f"{type(config).__name__}")


def _as_dict(config: Any) -> Dict[str, Any]:
    """The block as a flat dict; ``optimizer`` / ``lr_scheduler`` sub-blocks are merged into it."""
    raw = _raw(config)
    for section in ("optimizer", "lr_scheduler"):
        sub = raw.get(section)
        if sub is None or isinstance(sub, str) or not (isinstance(sub, Mapping) or hasattr(sub, "__dict__")):
            continue
        del raw[section]
        for k, v in _as_dict(sub).items():
            if k in raw and raw[k] != v:
                raise ValueError(f"optimizer config: key {k!r} is set twice with different values "
                                 f"({raw[k]!r} and {v!r} in {section!r})")
            raw[k] = v
    return raw


_NUMBERS = {"lr": (0.0, math.inf, False), "eps": (0.0, math.inf, False), "weight_decay": (0.0, math.inf, False),
            "muon_lr": (0.0, math.inf, False), "muon_weight_decay": (0.0, math.inf, False),
            "momentum": (0.0, 1.0, True), "decay_ratio": (0.0, 1.0, False), "min_lr_ratio": (0.0, 1.0, False)}


def _check(key: str, value: Any) -> Any:
    if key in _NUMBERS:
        if value is None and key in ("muon_lr", "muon_weight_decay"):
            return None
        lo, hi, hi_open = _NUMBERS[key]
        return _number(key, value, lo, hi, hi_open)
    checks = {
        "name": lambda v: _choice(key, v, OPTIMIZER_NAMES),
        "betas": lambda v: _betas(key, v),
        "foreach": lambda v: v if v is None or isinstance(v, bool) else _raise(_fail(key, "None, True or False", v)),
        "nesterov": lambda v: v if isinstance(v, bool) else _raise(_fail(key, "True or False", v)),
        "ns_steps": lambda v: _int(key, v, 1, 99),
        "adjust_lr": lambda v: _adjust(key, v),
        "muon_params": lambda v: None if v is None else _globs(key, v),
        "adamw_params": lambda v: _globs(key, v) if v else (),
        "head_names": lambda v: _globs(key, v) if v else (),
        "param_groups": lambda v: tuple(_group(i, e) for i, e in enumerate(_listish(key, v))),
        "warmup_steps": lambda v: _int(key, v, 0),
        "decay": lambda v: _choice(key, v, DECAYS),
        "total_steps": lambda v: None if v is None else _int(key, v, 1),
        "wsd_shape": lambda v: _choice(key, v, WSD_SHAPES),
    }
    return checks[key](value)


def _listish(key: str, value: Any):
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise _fail(key, "a list of {'params': [globs], ...} dicts", value)
    return value


def _raise(exc: Exception):
    raise exc


def _cross_check(cfg: OptimConfig) -> None:
    if cfg.decay != "constant":
        if cfg.total_steps is None:
            raise ValueError(f"optimizer config 'total_steps': decay {cfg.decay!r} needs total_steps (an int > "
                             f"warmup_steps={cfg.warmup_steps})")
        if cfg.total_steps <= cfg.warmup_steps:
            raise ValueError(f"optimizer config 'total_steps': expected more than warmup_steps={cfg.warmup_steps}, "
                             f"got {cfg.total_steps}")
    if cfg.name != "muon":
        muon_keys = [k for k in ("muon_params", "muon_lr", "muon_weight_decay") if getattr(cfg, k) is not None]
        muon_keys += [f"param_groups[{i}].optimizer" for i, g in enumerate(cfg.param_groups)
                      if g.get("optimizer") == "muon"]
        if muon_keys:
            raise ValueError(f"optimizer config {muon_keys[0]!r}: Muon settings need name='muon', got "
                             f"name={cfg.name!r}")
