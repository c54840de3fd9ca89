# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The random generators of a training run as a ``Stateful`` (torch).

Put an :class:`RNGState` in the state dict given to ``save``/``load``/``CheckpointManager``: a resumed
run then draws the same random numbers as an uninterrupted one.
"""
from __future__ import annotations

import random
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist


__all__ = ["RNGState", "this_rank"]


def this_rank() -> int:
    """The global rank (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class RNGState:
    """Every random generator a resumed run needs, so that it draws the same numbers.

    * the placement-invariant distributed stream of ``hyper_parallel`` DTensor random ops (``(seed, offset)``,
      identical on every rank: stored once);
    * per rank (key ``rank<r>``): torch's CPU generator, the accelerator generators, Python's ``random``
      and NumPy's global generator (when NumPy is installed).

    Loading needs the same world size (each rank restores its own generators); a rank whose entry is
    missing from the checkpoint gets a clear error.
    """

    def state_dict(self) -> Dict[str, Any]:
        """The current generator states."""
        from hyper_parallel.core import random as hp_random
        seed, offset = hp_random.get_rng_state()
        mine: Dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            mine["cuda"] = torch.cuda.get_rng_state_all()
        np_state = _numpy_state()
        if np_state is not None:
            mine["numpy"] = np_state
        return {"stream": [seed, offset], f"rank{this_rank()}": mine}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore the generators of this rank and the distributed stream."""
        from hyper_parallel.core import random as hp_random
        key = f"rank{this_rank()}"
        if key not in state_dict:
            raise KeyError(f"RNGState: the checkpoint holds no generator state for {key} (saved with a different "
                           "world size?)")
        mine = state_dict[key]
        hp_random.set_rng_state(tuple(state_dict["stream"]))
        torch.set_rng_state(mine["torch"])
        random.setstate(mine["python"])
        if "cuda" in mine and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(mine["cuda"])
        if "numpy" in mine:
            import numpy as np
            np.random.set_state(mine["numpy"])


def _numpy_state() -> Optional[Any]:
    try:
        import numpy as np
    except ImportError:
        return None
    return np.random.get_state()
