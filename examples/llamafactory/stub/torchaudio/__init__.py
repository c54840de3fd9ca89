# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A stand-in ``torchaudio`` for text-only LlamaFactory runs on a CPU-only torch.

LlamaFactory 0.9.5 imports ``torchaudio`` at module level (``llamafactory/data/mm_plugin.py``), and the registry
has only CUDA builds of it, which do not load against the CPU torch (``libc10_cuda.so`` missing). Text SFT never
calls it; put this folder on ``PYTHONPATH`` (``make llamafactory-check`` does) and any audio use fails loudly.
"""

__version__ = "0.0.0+hyper-parallel-stub"


def load(*args: object, **kwargs: object) -> None:
    """Audio is not available in this environment."""
    raise RuntimeError("torchaudio stub (examples/llamafactory/stub): audio data needs a real torchaudio build")
