# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Who started ``hp-train``: an outside launcher (torchrun, srun, msrun) or nobody (then hp-train launches
torchrun itself, on one node or as one node of several). Pure logic on an environment mapping: no framework.

* ``torchrun`` (or any torch elastic agent): ``RANK``/``WORLD_SIZE`` and ``TORCHELASTIC_RUN_ID`` are set.
* ``srun`` starting one rank per task (no torchrun inside): ``SLURM_PROCID``/``SLURM_NTASKS`` without
  ``RANK``; :func:`srun_rank_env` derives the torch variables from Slurm's (``MASTER_ADDR`` must be set by the
  batch script, or is taken from ``SLURM_LAUNCH_NODE_IPADDR``).
* ``msrun`` (MindSpore): ``MS_ROLE`` is set.
* ``RANK``/``WORLD_SIZE`` without a torch elastic agent: another launcher (``env://`` variables).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence

__all__ = ["Launcher", "detect_launcher", "srun_rank_env", "torchrun_command"]


@dataclasses.dataclass(frozen=True)
class Launcher:
    """What :func:`detect_launcher` found: ``name`` (``"torchrun"``, ``"srun"``, ``"msrun"``, ``"env"`` or
    ``"none"``), ``world_size``, ``nnodes`` and ``node_rank`` where the launcher says them (``nnodes`` 0: not
    said, as under msrun; ``node_rank`` is then the process's rank)."""

    name: str
    world_size: int = 1
    nnodes: int = 1
    node_rank: int = 0

    @property
    def outside(self) -> bool:
        """True when a launcher already started the ranks (hp-train trains in this process)."""
        return self.name != "none"

    def describe(self) -> str:
        """One line for the banner: ``launcher: torchrun (2 nodes, this is node 1, world 4)``."""
        if not self.outside:
            return "launcher: none (hp-train launches torchrun itself)"
        if not self.nnodes:  # the launcher does not say how many nodes (msrun): node_rank holds the rank
            return f"launcher: {self.name} (rank {self.node_rank}, world {self.world_size})"
        nodes = f"{self.nnodes} node{'s' if self.nnodes != 1 else ''}, this is node {self.node_rank}, "
        return f"launcher: {self.name} ({nodes}world {self.world_size})"


def _int(env: Mapping[str, str], key: str, default: int) -> int:
    try:
        return int(env.get(key, default))
    except (TypeError, ValueError):
        return default


def detect_launcher(env: Mapping[str, str]) -> Launcher:
    """The launcher that started this process, from its environment (``os.environ``)."""
    if env.get("MS_ROLE"):  # msrun exports no node count: the banner gives the rank (MS_NODE_ID) instead
        return Launcher("msrun", _int(env, "MS_WORKER_NUM", 1), 0, _int(env, "MS_NODE_ID", 0))
    if "RANK" in env and "WORLD_SIZE" in env:
        world = _int(env, "WORLD_SIZE", 1)
        local = _int(env, "LOCAL_WORLD_SIZE", world) or world
        name = "torchrun" if env.get("TORCHELASTIC_RUN_ID") else "env"
        return Launcher(name, world, _int(env, "GROUP_WORLD_SIZE", max(1, world // local)), _int(env, "GROUP_RANK", 0))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and _int(env, "SLURM_NTASKS", 1) > 1:
        return Launcher("srun", _int(env, "SLURM_NTASKS", 1), _int(env, "SLURM_NNODES", 1),
                        _int(env, "SLURM_NODEID", 0))
    return Launcher("none")


def srun_rank_env(env: Mapping[str, str], default_port: int = 29500) -> Dict[str, str]:
    """The ``env://`` variables of a rank that ``srun`` started directly (one task per rank): ``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (kept if set, else the launch node's
    address) and ``MASTER_PORT`` (kept if set, else ``default_port``)."""
    missing = [k for k in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID") if k not in env]
    if missing:
        raise ValueError(f"srun_rank_env: the environment lacks {', '.join(missing)} (not a task started by srun)")
    addr = env.get("MASTER_ADDR") or env.get("SLURM_LAUNCH_NODE_IPADDR")
    if not addr:
        raise ValueError("srun_rank_env: set MASTER_ADDR to the first node's address in the batch script")
    per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0] or str(
        _int(env, "SLURM_NTASKS", 1) // max(1, _int(env, "SLURM_NNODES", 1)))
    return {"RANK": env["SLURM_PROCID"], "WORLD_SIZE": env["SLURM_NTASKS"], "LOCAL_RANK": env["SLURM_LOCALID"],
            "LOCAL_WORLD_SIZE": per_node, "MASTER_ADDR": addr,
            "MASTER_PORT": env.get("MASTER_PORT") or str(default_port)}


def torchrun_command(python: str, nproc: int, entry: Sequence[str], *, nnodes: int = 1,
                     node_rank: Optional[int] = None, rdzv_endpoint: Optional[str] = None, rdzv_id: str = "hp-train",
                     max_restarts: int = 0, module: str = "torch.distributed.run") -> List[str]:
    """The torchrun command line running ``entry`` (``["-m", MODULE, *args]`` or ``[SCRIPT, *args]``):
    ``--standalone`` on one node, else this node's agent of a c10d rendezvous at ``rdzv_endpoint`` (``nproc`` is
    the world size; each node runs ``nproc / nnodes``). ``module``: the torchrun entry module (``hp-train`` names
    ``hyper_parallel.trainer._torch.torchrun``, torchrun without the teardown, on one node)."""
    if nnodes < 1 or nproc % nnodes:
        raise ValueError(f"--nnodes {nnodes}: job.nproc = {nproc} ranks must split evenly over the nodes")
    cmd = [python, "-m", module]
    if nnodes == 1:
        cmd += ["--standalone", "--nproc_per_node", str(nproc)]
    else:
        if not rdzv_endpoint:
            raise ValueError(f"--nnodes {nnodes}: give --rdzv-endpoint HOST:PORT (the first node's address)")
        cmd += ["--nnodes", str(nnodes), "--nproc_per_node", str(nproc // nnodes), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", rdzv_endpoint, "--rdzv-id", rdzv_id]
        if node_rank is not None:
            cmd += ["--node-rank", str(node_rank)]
    if max_restarts:
        cmd += ["--max-restarts", str(max_restarts)]
    return cmd + list(entry)
