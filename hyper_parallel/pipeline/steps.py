# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The pipeline schedule as data: ``MetaStep`` s of ``MetaStepType`` (pure Python).

One step names a stage, what to do and (for compute and communication) the microbatch. The text
form is torch's action string: ``2I0`` = stage 2, backward-input, microbatch 0; ``1SEND_F3``;
``0REDUCE_GRAD``; an overlapped pair is ``(0F3;1B1)OVERLAP_F_B``. ``MetaStep.parse`` reads it back.
"""
from __future__ import annotations

import enum
import re
from typing import NamedTuple, Optional, Tuple

__all__ = ["MetaStepType", "MetaStep", "COMPUTE_TYPES", "COMM_TYPES"]


class MetaStepType(str, enum.Enum):
    """What a step does (values are torch's action-string codes)."""

    F = "F"                       #: forward of one microbatch
    I = "I"                       #: backward-input (dx) of one microbatch
    W = "W"                       #: backward-weight (dw) of one microbatch
    B = "B"                       #: full backward (dx and dw) of one microbatch
    UNSHARD = "UNSHARD"           #: FSDP: gather the stage's parameters
    RESHARD = "RESHARD"           #: FSDP: free the gathered parameters
    SEND_F = "SEND_F"             #: send a forward activation to the next stage
    RECV_F = "RECV_F"             #: receive a forward activation from the previous stage
    SEND_B = "SEND_B"             #: send an input gradient to the previous stage
    RECV_B = "RECV_B"             #: receive an output gradient from the next stage
    OVERLAP_F_B = "OVERLAP_F_B"   #: one microbatch's forward overlapped with another's backward
    REDUCE_GRAD = "REDUCE_GRAD"   #: data-parallel gradient reduction of a stage, once per step

    def __str__(self) -> str:
        return self.value


COMPUTE_TYPES = frozenset({MetaStepType.F, MetaStepType.I, MetaStepType.W, MetaStepType.B,
                           MetaStepType.OVERLAP_F_B})
COMM_TYPES = frozenset({MetaStepType.SEND_F, MetaStepType.RECV_F, MetaStepType.SEND_B, MetaStepType.RECV_B})
_NEEDS_MB = COMPUTE_TYPES | COMM_TYPES
_CODES = "|".join(sorted((t.value for t in MetaStepType if t is not MetaStepType.OVERLAP_F_B),
                         key=len, reverse=True))
_ONE = re.compile(rf"^(\d+)({_CODES})(\d*)$")


class MetaStep(NamedTuple):
    """One step of a rank's schedule: ``(stage_index, type, microbatch_index, sub_steps)``.

    ``sub_steps`` is set only for ``OVERLAP_F_B`` (its forward and backward steps, in that order);
    such a step has ``stage_index == -1`` and no microbatch of its own.
    """

    stage_index: int
    type: MetaStepType
    microbatch_index: Optional[int] = None
    sub_steps: Optional[Tuple["MetaStep", ...]] = None

    def __str__(self) -> str:
        if self.sub_steps is not None:
            return "(" + ";".join(str(s) for s in self.sub_steps) + ")" + self.type.value
        mb = "" if self.microbatch_index is None else str(self.microbatch_index)
        return f"{self.stage_index}{self.type.value}{mb}"

    __repr__ = __str__

    @property
    def is_compute(self) -> bool:
        """True for F, I, W, B and OVERLAP_F_B."""
        return self.type in COMPUTE_TYPES

    @property
    def is_comm(self) -> bool:
        """True for SEND_F, RECV_F, SEND_B and RECV_B."""
        return self.type in COMM_TYPES

    def leaves(self) -> Tuple["MetaStep", ...]:
        """The step itself, or the sub-steps of an ``OVERLAP_F_B``."""
        return self.sub_steps if self.sub_steps is not None else (self,)

    @staticmethod
    def overlap(forward: "MetaStep", backward: "MetaStep") -> "MetaStep":
        """An ``OVERLAP_F_B`` step of ``forward`` (F) and ``backward`` (B or I)."""
        if forward.type is not MetaStepType.F or backward.type not in (MetaStepType.B, MetaStepType.I):
            raise ValueError(f"MetaStep.overlap: expected a forward and a backward step, got {forward} and {backward}")
        return MetaStep(-1, MetaStepType.OVERLAP_F_B, None, (forward, backward))

    @staticmethod
    def parse(text: str) -> Optional["MetaStep"]:
        """Read an action string (``2I0``, ``1SEND_F3``, ``0UNSHARD``, ``(0F3;1B1)OVERLAP_F_B``);
        an empty string is ``None`` (an idle slot)."""
        if not isinstance(text, str):
            raise TypeError(f"MetaStep.parse: expected an action string, got {type(text).__name__}")
        text = text.strip()
        if not text:
            return None
        if text.startswith("("):
            end = text.find(")")
            kind = text[end + 1:] if end > 0 else ""
            if end < 0 or kind != MetaStepType.OVERLAP_F_B.value:
                raise ValueError(f"MetaStep.parse: {text!r} is not '(<F step>;<B step>)OVERLAP_F_B'")
            subs = tuple(MetaStep.parse(s) for s in text[1:end].split(";") if s.strip())
            if len(subs) != 2:
                raise ValueError(f"MetaStep.parse: {text!r} must hold exactly two sub-steps")
            return MetaStep.overlap(subs[0], subs[1])
        m = _ONE.match(text)
        if m is None:
            raise ValueError(f"MetaStep.parse: invalid action string {text!r}; expected "
                             "[stage][type][microbatch] such as '2F0', '1I3', '0SEND_B2' or '0REDUCE_GRAD'")
        kind = MetaStepType(m.group(2))
        mb = int(m.group(3)) if m.group(3) else None
        if (mb is None) == (kind in _NEEDS_MB):
            want = "needs" if kind in _NEEDS_MB else "takes no"
            raise ValueError(f"MetaStep.parse: {text!r}: a {kind.value} step {want} a microbatch index")
        return MetaStep(int(m.group(1)), kind, mb)
