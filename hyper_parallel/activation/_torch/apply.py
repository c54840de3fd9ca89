# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``apply_activation_policy`` on torch models: find the layers, apply each layer's mode, solve ``auto``.

Layers are the modules matched by ``activation.layers`` (fnmatch globs over module names) or, by
default, the children of the model's largest ``ModuleList``/``Sequential`` whose children share one
class (``model.layers.0`` ... for the Llama). A module registered under several names (a shared
block, tied modules) is left alone and reported: wrapping it would change every place it is used.

``mode = "auto"`` measures the candidates on ``example_inputs`` (forward only, no optimizer step):

* bytes: with every layer in mode ``m``, the live bytes the allocator holds after forward (and
  ``loss_fn``) — ``AllocationTracker`` — minus what lives outside the layers; split over the layers
  in proportion to each layer's own saved bytes (counted by ``saved_tensors_hooks`` in mode none);
* time: each op of each layer is timed in a dispatch mode; ``full`` costs the layer's whole forward
  again, ``selective-op`` the ops the op policy recomputes, ``swap`` the bytes it moves, written and
  read back at the swap target's measured bandwidth, with no credit for overlap (an upper bound).
"""
from __future__ import annotations

import contextlib
import time
from fnmatch import fnmatchcase
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hyper_parallel.activation.plan import ActivationPlan
from hyper_parallel.activation.auto import LayerOption, LayerProfile, plan_auto
from hyper_parallel.activation.config import ActivationConfig, ActivationConfigError, resolve_layer_modes
from hyper_parallel.activation.manager import SwapManager
from hyper_parallel.activation.policy import full_policy, op_policy
from hyper_parallel.activation._torch.checkpoint import checkpoint_wrapper, op_name
from hyper_parallel.activation._torch.swap import module_storages, swap_wrapper

__all__ = ["apply_activation_policy", "find_layers", "shared_module_names", "measure_layers"]


def shared_module_names(model: torch.nn.Module) -> Dict[int, List[str]]:
    """id(module) -> its names, for modules registered under more than one name."""
    names: Dict[int, List[str]] = {}
    for name, mod in model.named_modules(remove_duplicate=False):
        names.setdefault(id(mod), []).append(name)
    return {k: v for k, v in names.items() if len(v) > 1}


def _default_layers(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    best: List[Tuple[str, torch.nn.Module]] = []
    for name, mod in model.named_modules():
        if isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)) and len(mod):
            items = list(mod.items()) if isinstance(mod, torch.nn.ModuleDict) else list(enumerate(mod))
            if len({type(c) for _, c in items}) == 1 and len(items) > len(best):
                best = [(f"{name}.{key}" if name else str(key), c) for key, c in items]
    if not best:
        raise ActivationConfigError("activation.layers: the model has no ModuleList/ModuleDict/Sequential of "
                                    "same-class blocks; name the layer modules with activation.layers (globs)")
    return best


def find_layers(model: torch.nn.Module, patterns: Optional[Sequence[str]]) -> List[Tuple[str, torch.nn.Module]]:
    """(name, module) of the layers the config applies to, in model order."""
    if not patterns:
        return _default_layers(model)
    named = list(model.named_modules())
    out, seen = [], set()
    for pattern in patterns:
        hits = [(n, m) for n, m in named if n and fnmatchcase(n, pattern)]
        if not hits:
            raise ActivationConfigError(f"activation.layers: {pattern!r} matches no module of "
                                        f"{type(model).__name__} (first names: {[n for n, _ in named[1:7]]})")
        for n, m in hits:
            if n not in seen:
                seen.add(n)
                out.append((n, m))
    order = {n: i for i, (n, _) in enumerate(named)}
    return sorted(out, key=lambda nm: order[nm[0]])


def _apply_mode(layer: torch.nn.Module, name: str, mode: str, cfg: ActivationConfig, manager) -> None:
    if mode == "full":
        checkpoint_wrapper(layer, full_policy(save_collectives=not cfg.recompute_collectives))
    elif mode == "selective-op":
        checkpoint_wrapper(layer, op_policy(list(cfg.save_ops), swap=list(cfg.swap_ops)),
                           manager=manager if cfg.swap_ops else None, group=name)
    elif mode == "swap":
        swap_wrapper(layer, manager, group=name)
    elif mode != "none":
        raise ActivationConfigError(f"activation: layer {name} has mode {mode!r}; expected one of none, full, "
                                    "selective-op, swap")


@contextlib.contextmanager
def _temporarily(layers, mode: str, cfg: ActivationConfig, manager):
    saved = [(m, m.__dict__.get("forward"), m.__dict__.get("_hp_activation")) for _, m in layers]
    try:
        for name, m in layers:
            _apply_mode(m, name, mode, cfg, manager)
        yield
    finally:
        for m, fwd, kinds in saved:
            for key, value in (("forward", fwd), ("_hp_activation", kinds)):
                if value is None:
                    m.__dict__.pop(key, None)
                else:
                    m.__dict__[key] = value


def _forward(model, example_inputs, loss_fn):
    out = model(*example_inputs)
    return loss_fn(out) if loss_fn is not None else out


def _live_after_forward(model, example_inputs, loss_fn, manager) -> int:
    from hyper_parallel.testing.memory import AllocationTracker
    with AllocationTracker() as tracker:
        tracker.mark("before")
        out = _forward(model, example_inputs, loss_fn)
        if manager is not None:
            manager.wait()
        tracker.mark("after")
        del out
    if manager is not None:
        manager.clear()
    return max(0, tracker.live("after") - tracker.live("before"))


class _OpTimer(TorchDispatchMode):
    """Times every op and adds it to the current layer's totals (all ops / ops the op policy recomputes)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer: Optional[str] = None
        self.total: Dict[str, float] = {}
        self.recomputed: Dict[str, float] = {}
        self._policy = op_policy()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        if self.layer is not None:
            dt = time.perf_counter() - start
            self.total[self.layer] = self.total.get(self.layer, 0.0) + dt
            if not self._policy.decide(op_name(func)).keeps_output:
                self.recomputed[self.layer] = self.recomputed.get(self.layer, 0.0) + dt
        return out


def _layer_hooks(layers, on_enter, on_exit) -> list:
    handles = []
    for name, m in layers:
        handles.append(m.register_forward_pre_hook(lambda _m, _a, n=name: on_enter(n)))
        handles.append(m.register_forward_hook(lambda _m, _a, _o, n=name: on_exit(n)))
    return handles


def _saved_bytes(model, layers, example_inputs, loss_fn) -> Dict[str, int]:
    """Per layer, bytes of the distinct non-parameter storages autograd saves in its forward."""
    counts: Dict[str, int] = {n: 0 for n, _ in layers}
    seen: Dict[str, set] = {n: set() for n, _ in layers}
    stack: list = []
    excl = {n: module_storages(m) for n, m in layers}

    def enter(name):
        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in excl[name] and ptr not in seen[name] and not isinstance(t, torch.nn.Parameter):
                seen[name].add(ptr)
                counts[name] += t.untyped_storage().nbytes()
            return t
        stack.append(contextlib.ExitStack())
        stack[-1].enter_context(torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t))

    def leave(_name):
        stack.pop().close()
    handles = _layer_hooks(layers, enter, leave)
    try:
        _forward(model, example_inputs, loss_fn)
    finally:
        for h in handles:
            h.remove()
    return counts


def _op_times(model, layers, example_inputs, loss_fn, repeats: int = 3) -> Tuple[Dict[str, float], Dict[str, float]]:
    timer = _OpTimer()
    handles = _layer_hooks(layers, lambda n: setattr(timer, "layer", n), lambda n: setattr(timer, "layer", None))
    try:
        with torch.no_grad():
            _forward(model, example_inputs, loss_fn)  # warm-up
        timer.total.clear()
        timer.recomputed.clear()
        for _ in range(repeats):
            with timer:
                _forward(model, example_inputs, loss_fn)
    finally:
        for h in handles:
            h.remove()
    return ({k: v / repeats for k, v in timer.total.items()},
            {k: v / repeats for k, v in timer.recomputed.items()})


def _bandwidth(manager: SwapManager, device: torch.device, nbytes: int = 8 * 2 ** 20) -> float:
    """Bytes per second of writing then reading ``nbytes`` through the manager's target (round trip)."""
    from hyper_parallel.activation._torch.swap import swap_tensor_wrapper
    t = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    handle = swap_tensor_wrapper(t, manager, "bandwidth-probe")
    start = time.perf_counter()
    handle.swap_out().wait()
    handle.swap_in().wait()
    elapsed = time.perf_counter() - start
    return nbytes / max(elapsed, 1e-9)


def measure_layers(model, layers, cfg: ActivationConfig, example_inputs, loss_fn, manager) -> Tuple[List[LayerProfile],
                                                                                                    int]:
    """(per-layer candidates, bytes outside the layers) for the auto planner (see the module docstring)."""
    if example_inputs is None:
        raise ActivationConfigError("activation.mode: 'auto' needs example_inputs=(...) to measure the layers")
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    modes = cfg.auto.modes
    own = _saved_bytes(model, layers, example_inputs, loss_fn)
    total_none = _live_after_forward(model, example_inputs, loss_fn, None)
    layer_sum = sum(own.values())
    fixed = max(0, total_none - layer_sum)
    totals = {"none": total_none}
    for mode in modes:
        if mode != "none":
            with _temporarily(layers, mode, cfg, manager):
                totals[mode] = _live_after_forward(model, example_inputs, loss_fn, manager)
    t_all, t_re = _op_times(model, layers, example_inputs, loss_fn)
    device = next(iter(model.parameters())).device if any(True for _ in model.parameters()) else torch.device("cpu")
    bw = _bandwidth(manager, device) if "swap" in modes else 0.0
    profiles = []
    for name, _ in layers:
        share = own[name] / layer_sum if layer_sum else 1.0 / len(layers)
        options = []
        for mode in modes:
            mem = own[name] if mode == "none" else max(0, int(round((totals[mode] - fixed) * share)))
            if mode == "none":
                cost = 0.0
            elif mode == "full":
                cost = t_all.get(name, 0.0)
            elif mode == "selective-op":
                cost = t_re.get(name, 0.0)
            else:
                cost = 2.0 * max(0, own[name] - mem) / bw if bw else 0.0
            options.append(LayerOption(mode, mem, cost))
        profiles.append(LayerProfile(name, tuple(options)))
    return profiles, fixed


def _needs_manager(cfg: ActivationConfig, modes: Dict[str, str]) -> bool:
    swapping = "swap" in modes.values()
    return swapping or bool(cfg.swap_ops and "selective-op" in modes.values())


def _solve_auto(model, layers, modes, cfg, example_inputs, loss_fn, manager):
    todo = [(n, m) for n, m in layers if modes[n] == "auto"]
    profiles, fixed = measure_layers(model, todo, cfg, example_inputs, loss_fn, manager)
    auto = plan_auto(profiles, cfg.auto.budget_bytes, fixed_bytes=fixed)
    modes.update(auto.as_dict())
    return auto


def apply_activation_policy(model: torch.nn.Module, cfg: ActivationConfig, *, example_inputs=None, loss_fn=None,
                            manager: Optional[SwapManager] = None) -> ActivationPlan:
    """Apply ``cfg`` (a parsed block) to ``model``'s layers in place; see ``hyper_parallel.activation.api``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"apply_activation_policy(model): expected a torch.nn.Module, got {type(model).__name__}")
    if manager is not None and not isinstance(manager, SwapManager):
        raise TypeError(f"apply_activation_policy(manager): expected a SwapManager, got {type(manager).__name__}")
    layers = find_layers(model, cfg.layers)
    shared = shared_module_names(model)
    excluded = tuple(sorted(n for n, m in layers if id(m) in shared))
    layers = [(n, m) for n, m in layers if id(m) not in shared]
    modes = resolve_layer_modes(cfg, [n for n, _ in layers])
    if manager is None and (_needs_manager(cfg, modes) or "auto" in modes.values()):
        manager = SwapManager.from_config(cfg.swap)
    auto = None
    if "auto" in modes.values():
        auto = _solve_auto(model, layers, modes, cfg, example_inputs, loss_fn, manager)
    for name, layer in layers:
        _apply_mode(layer, name, modes[name], cfg, manager)
    return ActivationPlan(layers=modes, excluded=excluded, manager=manager if _needs_manager(cfg, modes) else None,
                          auto=auto)
