# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``ChainedOptimizer``: several optimizers (e.g. Muon for matrices + AdamW for the rest) as one.

It is a ``torch.optim.Optimizer`` so torch's LR schedulers accept it; its ``param_groups`` is a view
(the children's group dicts, in order), so a scheduler or a manual ``group["lr"] = ...`` on the
chain changes the children. ``step`` steps every child in order, ``zero_grad`` clears all of them,
and ``state_dict`` / ``load_state_dict`` use torch's format with one index space over the chain.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch
from torch.optim import Optimizer

__all__ = ["ChainedOptimizer"]


class _StateView(Mapping):
    """Read view over the children's per-parameter states (looks up without creating entries)."""

    def __init__(self, optimizers: Sequence[Optimizer]) -> None:
        self._optimizers = optimizers

    def __getitem__(self, key: Any) -> Any:
        for opt in self._optimizers:
            if key in opt.state:
                return opt.state[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        for opt in self._optimizers:
            yield from opt.state

    def __len__(self) -> int:
        return sum(len(opt.state) for opt in self._optimizers)


class ChainedOptimizer(Optimizer):
    """Run a list of optimizers as one (``step``, ``zero_grad``, ``state_dict``, ``param_groups``).

    Args:
        optimizers: the child optimizers (``torch.optim.Optimizer`` instances, at least one); no
            parameter may belong to two of them.
    """

    def __init__(self, optimizers: Sequence[Optimizer]) -> None:  # pylint: disable=super-init-not-called
        if isinstance(optimizers, Optimizer) or not isinstance(optimizers, (list, tuple)):
            raise TypeError(f"ChainedOptimizer(optimizers): expected a list of optimizers, got "
                            f"{type(optimizers).__name__}")
        if not optimizers:
            raise ValueError("ChainedOptimizer(optimizers): expected at least one optimizer, got an empty list")
        seen: Dict[int, int] = {}
        for i, opt in enumerate(optimizers):
            if not isinstance(opt, Optimizer):
                raise TypeError(f"ChainedOptimizer(optimizers[{i}]): expected a torch.optim.Optimizer, got "
                                f"{type(opt).__name__}")
            for group in opt.param_groups:
                for p in group["params"]:
                    if id(p) in seen:
                        raise ValueError(f"ChainedOptimizer: a parameter of shape {tuple(p.shape)} belongs to "
                                         f"optimizers[{seen[id(p)]}] and optimizers[{i}]")
                    seen[id(p)] = i
        self.optimizers: List[Optimizer] = list(optimizers)
        # what torch.optim.Optimizer.__init__ sets up, minus its own param groups and state
        self.defaults: Dict[str, Any] = {}
        self._optimizer_step_pre_hooks = OrderedDict()
        self._optimizer_step_post_hooks = OrderedDict()
        self._optimizer_state_dict_pre_hooks = OrderedDict()
        self._optimizer_state_dict_post_hooks = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        self._patch_step_function()
        self._warned_capturable_if_run_uncaptured = True

    # ------------------------------------------------------------------ views
    @property
    def param_groups(self) -> List[Dict[str, Any]]:  # type: ignore[override]
        """Every child's param groups, in order (the same dict objects: edits reach the children)."""
        return [g for opt in self.optimizers for g in opt.param_groups]

    @param_groups.setter
    def param_groups(self, value) -> None:
        raise AttributeError("ChainedOptimizer.param_groups is a view of the children's groups; set values inside "
                             "the groups (group['lr'] = ...) or on a child optimizer")

    @property
    def state(self) -> Mapping:  # type: ignore[override]
        """Every child's per-parameter state (read view)."""
        return _StateView(self.optimizers)

    @state.setter
    def state(self, value) -> None:
        raise AttributeError("ChainedOptimizer.state is a view of the children's states")

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """Not available on the chain: add the group to one of ``optimizers``."""
        raise TypeError("ChainedOptimizer.add_param_group: add the group to one of chain.optimizers[i]")

    # ------------------------------------------------------------------ steps
    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None):  # pylint: disable=arguments-differ
        """Evaluate ``closure`` once (if given), then step every child in order."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for opt in self.optimizers:
            opt.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of every child's parameters."""
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    # ------------------------------------------------------------------ state dicts
    def state_dict(self) -> Dict[str, Any]:
        """torch's optimizer state-dict format over the chain: parameter indices run through the children's
        param groups in order (exactly what one optimizer holding the chain's ``param_groups`` would number),
        so tools written for one torch optimizer (``hyper_parallel.fsdp`` / ``checkpoint`` state dicts) accept it."""
        state: Dict[int, Any] = {}
        groups: List[Dict[str, Any]] = []
        offset = 0
        for opt in self.optimizers:
            sd = opt.state_dict()
            state.update({offset + i: st for i, st in sd["state"].items()})
            groups.extend({**g, "params": [offset + i for i in g["params"]]} for g in sd["param_groups"])
            offset += sum(len(g["params"]) for g in opt.param_groups)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Load a :meth:`state_dict` of a chain whose children have the same param groups."""
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise ValueError("ChainedOptimizer.load_state_dict: expected {'state': ..., 'param_groups': [...]}")
        groups = list(state_dict["param_groups"])
        counts = [len(opt.param_groups) for opt in self.optimizers]
        if len(groups) != sum(counts):
            raise ValueError(f"ChainedOptimizer.load_state_dict: the state dict holds {len(groups)} param groups, "
                             f"this chain has {sum(counts)} ({counts} per optimizer)")
        offset, start = 0, 0
        for opt, count in zip(self.optimizers, counts):
            mine = groups[start:start + count]
            n = sum(len(g["params"]) for g in opt.param_groups)
            sub_groups = [{**g, "params": [i - offset for i in g["params"]]} for g in mine]
            sub_state = {i - offset: st for i, st in state_dict["state"].items() if offset <= i < offset + n}
            opt.load_state_dict({"state": sub_state, "param_groups": sub_groups})
            offset += n
            start += count

    def __getstate__(self) -> Dict[str, Any]:
        return {"optimizers": self.optimizers}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(state["optimizers"])  # pylint: disable=unnecessary-dunder-call

    def __repr__(self) -> str:
        inner = ",\n  ".join(repr(o).replace("\n", "\n  ") for o in self.optimizers)
        return f"ChainedOptimizer([\n  {inner}\n])"
