# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The hardware a plan runs on (:class:`ClusterSpec`) and the collective cost formulas (pure Python).

Collective costs follow the standard ring formulas (Thakur, Rabenseifner, Gropp 2005; NCCL's own
``nccl-tests`` "bus bandwidth" convention) with ``n`` ranks, ``B`` bytes of the *full* buffer and a
per-hop latency ``alpha``:

* all-gather / reduce-scatter: ``(n - 1) * alpha + (n - 1) / n * B / bw``
* all-reduce (reduce-scatter + all-gather): ``2 (n - 1) * alpha + 2 (n - 1) / n * B / bw``
* all-to-all (pairwise): ``(n - 1) * alpha + (n - 1) / n * B / bw``
* point-to-point: ``alpha + B / bw``

``bw`` is the intra-node bandwidth when the group fits inside one node, else the inter-node one.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Dict, Union

__all__ = ["ClusterSpec", "CLUSTER_PRESETS", "GIB", "parse_bytes", "collective_time"]

GIB = 1024 ** 3
_UNITS = {"b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12, "kib": 1024, "mib": 1024 ** 2,
          "gib": GIB, "tib": 1024 ** 4}


def parse_bytes(text: Union[str, int, float]) -> int:
    """``"80GiB"``, ``"512 MiB"``, ``"1.5GB"`` or a number of bytes -> bytes (int)."""
    if isinstance(text, bool):
        raise ValueError(f"memory size: expected a size like '80GiB', got {text!r}")
    if isinstance(text, (int, float)):
        if text <= 0:
            raise ValueError(f"memory size: expected a positive size, got {text!r}")
        return int(text)
    raw = str(text).strip().lower().replace(" ", "")
    for unit in sorted(_UNITS, key=len, reverse=True):
        if raw.endswith(unit):
            number = raw[: -len(unit)]
            break
    else:
        unit, number = "b", raw
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"memory size {text!r}: expected a number with a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, "
                         "TB), e.g. '80GiB'") from None
    if value <= 0 or not math.isfinite(value):
        raise ValueError(f"memory size {text!r}: expected a positive size")
    return int(value * _UNITS[unit])


@dataclass(frozen=True)
class ClusterSpec:  # pylint: disable=too-many-instance-attributes
    """Devices, their memory and speed, and the links between them.

    Args:
        num_devices: devices (ranks) in all.
        devices_per_node: devices sharing the fast intra-node links.
        device_memory: bytes of memory per device.
        peak_flops: sustained matmul FLOP/s per device in the compute dtype (for a measured spec: what a
            training-shaped matmul reaches; for a published one: the dense peak).
        intra_node_bw: bytes/s per device for collectives inside a node (one direction).
        inter_node_bw: bytes/s per device for collectives across nodes.
        latency: seconds per collective hop (``alpha``).
        mfu: fraction of ``peak_flops`` a training step reaches on real layers (1.0 for a measured spec,
            whose ``peak_flops`` already is an achieved rate).
        op_overhead: seconds of launch/dispatch cost per operator call (eager CPU dispatch is tens of µs).
        comm_overlap: fraction of the overlappable communication (FSDP prefetch, EP a2a against shared
            experts) that hides under compute: ~1 on GPUs with separate copy engines, 0 on CPUs where gloo
            and the compute share the same cores.
        host_cores: physical cores shared by all ranks of one host when the "devices" are CPU processes;
            ranks beyond it share them: every rank's compute, eager dispatch and collective work runs
            ``ranks / host_cores`` times slower (``None`` on accelerators).
        fsdp_reduce: how FSDP reduces gradients: ``reduce_scatter`` (NCCL/HCCL) or ``all_reduce`` (what
            ``fully_shard`` does on gloo, whose ring all-reduce beats its reduce-scatter; twice the bytes).
        name: a label for tables.
    """

    num_devices: int
    devices_per_node: int
    device_memory: int
    peak_flops: float
    intra_node_bw: float
    inter_node_bw: float
    latency: float = 5e-6
    mfu: float = 0.45
    op_overhead: float = 5e-6
    comm_overlap: float = 1.0
    host_cores: Union[int, None] = None
    fsdp_reduce: str = "reduce_scatter"
    name: str = "custom"

    def __post_init__(self) -> None:
        for f in ("num_devices", "devices_per_node"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ClusterSpec.{f}: expected a positive int, got {value!r}")
        for f in ("device_memory", "peak_flops", "intra_node_bw", "inter_node_bw"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"ClusterSpec.{f}: expected a positive number, got {value!r}")
        if not 0.0 < self.mfu <= 1.0:
            raise ValueError(f"ClusterSpec.mfu: expected a fraction in (0, 1], got {self.mfu!r}")
        if self.fsdp_reduce not in ("reduce_scatter", "all_reduce"):
            raise ValueError(f"ClusterSpec.fsdp_reduce: expected 'reduce_scatter' or 'all_reduce', got "
                             f"{self.fsdp_reduce!r}")
        if not 0.0 <= self.comm_overlap <= 1.0:
            raise ValueError(f"ClusterSpec.comm_overlap: expected a fraction in [0, 1], got {self.comm_overlap!r}")

    def with_devices(self, num_devices: int, device_memory: Union[int, str, None] = None) -> "ClusterSpec":
        """The same hardware with another device count (and optionally another memory size)."""
        mem = self.device_memory if device_memory is None else parse_bytes(device_memory)
        return replace(self, num_devices=num_devices, device_memory=mem)

    def host_share(self, ranks_on_host: int = 1) -> float:
        """How many times slower a rank's CPU work runs when ``ranks_on_host`` ranks share ``host_cores``
        cores (1.0 when every rank has a core, or on accelerators)."""
        if self.host_cores is not None and ranks_on_host > self.host_cores:
            return ranks_on_host / self.host_cores
        return 1.0

    def compute_rate(self, ranks_on_host: int = 1) -> float:
        """Achieved FLOP/s of one rank when ``ranks_on_host`` ranks share a host."""
        return self.peak_flops * self.mfu / self.host_share(ranks_on_host)

    def bandwidth(self, group_size: int, stride: int = 1) -> float:
        """Link bandwidth of a group of ``group_size`` ranks ``stride`` apart in rank order."""
        return self.intra_node_bw if group_size * stride <= self.devices_per_node else self.inter_node_bw

    def to_json(self, path: Union[str, Path]) -> None:
        """Write the spec as JSON (what ``hp-auto-parallel calibrate`` produces)."""
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, path: Union[str, Path]) -> "ClusterSpec":
        """Read a spec written by :meth:`to_json` (unknown keys are an error naming the file)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown ClusterSpec keys {unknown}; expected {sorted(known)}")
        return cls(**data)


def collective_time(kind: str, nbytes: float, group_size: int, cluster: ClusterSpec, stride: int = 1) -> float:
    """Seconds of one collective of ``kind`` over ``group_size`` ranks on a buffer of ``nbytes`` (the full,
    gathered size for all-gather/reduce-scatter/all-reduce/all-to-all; the message for ``p2p``)."""
    n = group_size
    if kind == "p2p":
        return cluster.latency + nbytes / cluster.bandwidth(2, stride)
    if n <= 1 or nbytes <= 0:
        return 0.0
    bw = cluster.bandwidth(n, stride)
    frac = (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) * cluster.latency + frac * nbytes / bw
    if kind == "all_reduce":
        return 2 * (n - 1) * cluster.latency + 2 * frac * nbytes / bw
    raise ValueError(f"collective_time(kind): unknown collective {kind!r}; expected all_gather, reduce_scatter, "
                     "all_reduce, all_to_all or p2p")


# Published figures (vendor datasheets; dense bf16/fp16 tensor throughput without sparsity; per-direction
# NVLink/HCCS bandwidth per device; one 200/400 Gb/s NIC per device across nodes):
# - A100 SXM 80GB: 312 TFLOP/s bf16, 80 GB HBM2e, NVLink3 600 GB/s bidirectional (300 GB/s per direction),
#   HDR InfiniBand 200 Gb/s = 25 GB/s (NVIDIA A100 datasheet; DGX A100 user guide).
# - H100 SXM 80GB: 989 TFLOP/s bf16, 80 GB HBM3, NVLink4 900 GB/s bidirectional (450 per direction),
#   NDR 400 Gb/s = 50 GB/s (NVIDIA H100 datasheet; DGX H100 user guide).
# - H200 SXM 141GB: same compute and links as H100, 141 GB HBM3e (NVIDIA H200 datasheet).
# - Ascend 910B (910B2 class): ~313 TFLOP/s fp16, 64 GB HBM2e, HCCS 7 links x 56 GB/s = 392 GB/s
#   (~196 GB/s per direction), 200 Gb/s RoCE = 25 GB/s (Huawei Atlas 800T A2 technical white paper).
# - cpu-gloo-2core: this repository's CI machine (2 cores, CPU ranks over gloo on loopback), measured by
#   ``hp-auto-parallel calibrate`` (see docs/auto_parallel.md for the run): fp32 matmul rate per core,
#   gloo all-reduce bandwidth on loopback, eager dispatch overhead per op.
CLUSTER_PRESETS: Dict[str, ClusterSpec] = {
    "a100": ClusterSpec(8, 8, 80 * 10 ** 9, 312e12, 300e9, 25e9, latency=6.6e-6, name="A100-80GB"),
    "h100": ClusterSpec(8, 8, 80 * 10 ** 9, 989e12, 450e9, 50e9, latency=6.6e-6, name="H100-80GB"),
    "h200": ClusterSpec(8, 8, 141 * 10 ** 9, 989e12, 450e9, 50e9, latency=6.6e-6, name="H200-141GB"),
    "ascend910b": ClusterSpec(8, 8, 64 * GIB, 313e12, 196e9, 25e9, latency=8e-6, name="Ascend-910B"),
    "cpu-gloo-2core": ClusterSpec(2, 1024, 24 * GIB, 60e9, 2.0e9, 2.0e9, latency=60e-6, mfu=1.0, op_overhead=12e-6,
                                  comm_overlap=0.0, host_cores=2, fsdp_reduce="all_reduce",
                                  name="cpu-gloo-2core (measured)"),
}
