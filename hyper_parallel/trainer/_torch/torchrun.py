# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``python -m hyper_parallel.trainer._torch.torchrun ARGS``: torchrun (``torch.distributed.run``, the same
arguments, agent and error report) that, once every rank succeeded, ends without the interpreter's teardown of
torch (4-7 s of every ``hp-train`` launch on a loaded CPU). ``hp-train`` launches one node through it; a failing
rank still ends the way torchrun ends (its ``ChildFailedError`` report, exit 1)."""
from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Run torchrun with ``argv`` (default ``sys.argv[1:]``); on success flush and ``os._exit(0)``."""
    from torch.distributed.run import main as torchrun_main  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.process_exit import flush_and_exit  # pylint: disable=import-outside-toplevel
    torchrun_main(None if argv is None else list(argv))
    flush_and_exit(0)


if __name__ == "__main__":
    main()
