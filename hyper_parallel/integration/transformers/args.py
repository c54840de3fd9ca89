# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``HyperParallelArguments``: the strategy of a ``transformers`` / LlamaFactory run, read from a JSON object.

Pure Python (no framework): parsing, validation (every unknown key or bad value is one ``ValueError`` line that
names the key and what was expected) and the parallel degrees handed to ``ParallelDims``.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Union

__all__ = ["HyperParallelArguments", "ACTIVATION_MODES", "DTYPES"]

#: ``activation_mode`` values (the ``mode`` of ``hyper_parallel.activation``'s config block, less ``auto``).
ACTIVATION_MODES = ("none", "full", "selective-op", "every-k", "swap")
#: dtype names accepted for ``param_dtype`` / ``reduce_dtype`` -> the torch dtype attribute they mean.
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}
_WHERE = "hyper_parallel_args"


def _fail(key: str, msg: str) -> ValueError:
    return ValueError(f"{_WHERE}.{key}: {msg}")


def _check_int(key: str, value: Any, minimum: int, allow_minus_one: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or (value < minimum and
                                                                  not (allow_minus_one and value == -1)):
        extra = " or -1 (the rest of the world)" if allow_minus_one else ""
        raise _fail(key, f"expected an int >= {minimum}{extra}, got {value!r}")


@dataclass
class HyperParallelArguments:  # pylint: disable=too-many-instance-attributes
    """How ``hyper_parallel`` trains a ``transformers`` model (the JSON of ``hyper_parallel_args``).

    Attributes:
        tp_size: tensor-parallel degree (attention heads and MLP split; vocabulary-parallel embedding and head).
        cp_size: context-parallel degree (only 1 is supported by the transformers integration today).
        dp_replicate_size: HSDP replicas; > 1 with ``dp_shard_size`` > 1 is HSDP (a 2-D data-parallel mesh).
        dp_shard_size: ranks each parameter is sharded over; -1: the rest of the world
            (``world / (dp_replicate_size * cp_size * tp_size)``).
        param_dtype: compute dtype of the gathered parameters (``"bfloat16"``, ``"float16"``, ``"float32"`` or
            None: the model's own); the sharded master copy keeps the model's dtype.
        reduce_dtype: dtype of the gradient reduction (None: ``param_dtype``).
        reshard_after_forward: ``fully_shard``'s (True, False or an int dividing the shard group size).
        cpu_offload: keep sharded parameters, gradients and optimizer states on the CPU.
        activation_mode: ``none``, ``full`` (recompute each layer), ``selective-op`` (keep matmuls, attention and
            collectives; recompute the rest), ``every-k`` or ``swap`` (saved activations to host memory or disk).
        activation: the other keys of ``hyper_parallel.activation``'s config block (``every_k``, ``swap``,
            ``save_ops``, ``swap_ops``, ``layers``, ...), checked by ``parse_activation_config``.
        wrap_modules: class names of the modules made one ``fully_shard`` unit each (default: the model's
            ``_no_split_modules``, i.e. its decoder layers); the root is always a unit too.
        seed: optional seed set on every rank before sharding (None: leave the RNG alone).
    """

    tp_size: int = 1
    cp_size: int = 1
    dp_replicate_size: int = 1
    dp_shard_size: int = -1
    param_dtype: Optional[str] = None
    reduce_dtype: Optional[str] = None
    reshard_after_forward: Union[bool, int] = True
    cpu_offload: bool = False
    activation_mode: str = "none"
    activation: Dict[str, Any] = field(default_factory=dict)
    wrap_modules: Optional[list] = None
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        _check_int("tp_size", self.tp_size, 1)
        _check_int("cp_size", self.cp_size, 1)
        _check_int("dp_replicate_size", self.dp_replicate_size, 1)
        _check_int("dp_shard_size", self.dp_shard_size, 1, allow_minus_one=True)
        self._check_precision()
        self._check_activation()
        wm = self.wrap_modules
        if wm is not None and (not isinstance(wm, list) or not all(isinstance(n, str) and n for n in wm)):
            raise _fail("wrap_modules", f"expected a list of module class names, got {wm!r}")
        if self.seed is not None:
            _check_int("seed", self.seed, 0)

    def _check_precision(self) -> None:
        for key in ("param_dtype", "reduce_dtype"):
            value = getattr(self, key)
            if value is not None and value not in DTYPES:
                raise _fail(key, f"expected one of {', '.join(DTYPES)} or null, got {value!r}")
        rao = self.reshard_after_forward
        if not isinstance(rao, bool) and (not isinstance(rao, int) or rao < 1):
            raise _fail("reshard_after_forward", f"expected true, false or a positive int, got {rao!r}")
        if not isinstance(self.cpu_offload, bool):
            raise _fail("cpu_offload", f"expected true or false, got {self.cpu_offload!r}")

    def _check_activation(self) -> None:
        if self.activation_mode not in ACTIVATION_MODES:
            close = difflib.get_close_matches(str(self.activation_mode), ACTIVATION_MODES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise _fail("activation_mode", f"expected one of {', '.join(ACTIVATION_MODES)}, got "
                                           f"{self.activation_mode!r}{hint}")
        if not isinstance(self.activation, Mapping):
            raise _fail("activation", f"expected an object (the activation config block), got {self.activation!r}")
        if "mode" in self.activation:
            raise _fail("activation.mode", "give the mode as activation_mode")
        self.activation_config()  # validates the block now, not at the first step

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "HyperParallelArguments":
        """Build from a mapping (the parsed JSON); an unknown key is refused naming the key."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{_WHERE}: expected a JSON object of strategy arguments, got {type(data).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise _fail(str(key), f"unknown key (known: {', '.join(known)}){hint}")
        return cls(**dict(data))

    @classmethod
    def from_json(cls, path: Union[str, os.PathLike]) -> "HyperParallelArguments":
        """Read the JSON file at ``path`` (errors name the file)."""
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ValueError(f"{_WHERE}: {path!r} is not a file (expected a JSON file of strategy arguments)")
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{_WHERE}: {path}: invalid JSON ({exc})") from None
        return cls.from_dict(data)

    @classmethod
    def from_finetuning_args(cls, finetuning_args: Any) -> "HyperParallelArguments":
        """LlamaFactory's entry point: ``finetuning_args.hyper_parallel_args`` is None (defaults), a path to a
        JSON file, a JSON string or a mapping; ``hyper_parallel_cp_size`` (LlamaFactory's main branch), when
        present and > 1, sets ``cp_size`` (a different ``cp_size`` in the JSON is refused)."""
        source = getattr(finetuning_args, "hyper_parallel_args", None)
        if source is None or source == "":
            args = cls()
        elif isinstance(source, Mapping):
            args = cls.from_dict(source)
        elif isinstance(source, str) and source.lstrip().startswith("{"):
            try:
                args = cls.from_dict(json.loads(source))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{_WHERE}: invalid JSON string ({exc})") from None
        elif isinstance(source, (str, os.PathLike)):
            args = cls.from_json(source)
        else:
            raise ValueError(f"{_WHERE}: expected a path to a JSON file, got {type(source).__name__}")
        cp = getattr(finetuning_args, "hyper_parallel_cp_size", None)
        if isinstance(cp, int) and not isinstance(cp, bool) and cp > 1:
            if args.cp_size not in (1, cp):
                raise _fail("cp_size", f"{args.cp_size} differs from hyper_parallel_cp_size={cp}")
            args.cp_size = cp
        return args

    # ------------------------------------------------------------------ derived
    @property
    def context_parallel_size(self) -> int:
        """LlamaFactory main's name for ``cp_size``."""
        return self.cp_size

    @context_parallel_size.setter
    def context_parallel_size(self, value: int) -> None:
        """Set ``cp_size`` (validated)."""
        _check_int("context_parallel_size", value, 1)
        self.cp_size = value

    def degrees(self) -> Dict[str, int]:
        """The degrees for ``hyper_parallel.models.ParallelDims`` (``dp_shard`` may be -1: inferred)."""
        return {"dp_replicate": self.dp_replicate_size, "dp_shard": self.dp_shard_size, "cp": self.cp_size,
                "tp": self.tp_size}

    def activation_config(self) -> Optional[Dict[str, Any]]:
        """The ``hyper_parallel.activation`` config block (validated), or None for ``activation_mode="none"``."""
        if self.activation_mode == "none":
            if self.activation:
                raise _fail("activation", "given while activation_mode is 'none'")
            return None
        from hyper_parallel.activation.config import ActivationConfigError, parse_activation_config
        block = {"mode": self.activation_mode, **dict(self.activation)}
        try:
            parse_activation_config(block, where=f"{_WHERE}.activation")
        except ActivationConfigError as exc:
            raise ValueError(str(exc)) from None
        return block

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object (round-trips through :meth:`from_dict`)."""
        return dataclasses.asdict(self)
