# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: one checkpoint format for both backends — torch (2 gloo ranks) saves a TP MLP, one MindSpore launch
(2 mccl ranks) loads it into a MindSpore TP MLP and into a MindSpore fully_shard MLP, saves its own (model + AdamW state), and torch loads that
into a fully sharded MLP. Every value is compared with the weights the saving side had."""
import numpy as np

from hyper_parallel.testing import multi_rank
from hyper_parallel.testing.mindspore_launch import launch


def torch_mlp(seed):
    """Linear(8->16) -> ReLU -> Linear(16->8) named fc1/act/fc2 like the MindSpore cell."""
    import torch
    from torch import nn

    class MLP(nn.Module):
        """The test MLP."""

        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.act = nn.ReLU()
            self.fc2 = nn.Linear(16, 8)

        def forward(self, x):
            """fc2(relu(fc1(x)))."""
            return self.fc2(self.act(self.fc1(x)))

    torch.manual_seed(seed)
    return MLP()


@multi_rank(world_size=2, timeout=120)
def torch_save_tp(path):
    """TP MLP saved by torch; returns its full weights (rank 0)."""
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel
    mesh = hp.init_device_mesh("cpu", (2,))
    model = hp.parallelize_module(torch_mlp(0), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    ckpt.save({"model": ckpt.ModelState(model), "step": 3, "note": {"saved_by": "torch"}}, checkpoint_id=path)
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().numpy() for n, p in
            model.named_parameters()}


@multi_rank(world_size=2, timeout=120)
def torch_load_fsdp(path):
    """Load the MindSpore checkpoint into a fully sharded torch MLP; returns full weights and objects (rank 0)."""
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    mesh = hp.init_device_mesh("cpu", (2,))
    model = hp.fully_shard(torch_mlp(1), mesh=mesh)
    state = {"model": ckpt.ModelState(model), "step": 0, "note": {"saved_by": None}}
    ckpt.load(state, checkpoint_id=path)
    return ({n: p.full_tensor().detach().numpy() for n, p in model.named_parameters()}, state["step"], state["note"])


def test_torch_mindspore_round_trip(tmp_path):
    want = torch_save_tp(tmp_path / "torch_saved")
    np.savez(tmp_path / "expected.npz", **want)
    per_rank = launch("tests.st.mindspore.checkpoint_checks:run_checkpoint_suite", world_size=2, timeout=300,
                      env={"HP_CKPT_DIR": str(tmp_path)})
    for rank, res in enumerate(per_rank):
        assert list(res["results"].values()) == ["ok"] * 4, f"rank {rank}: {res['results']}"
    saved = per_rank[0]["saved"]
    for name, value in want.items():
        assert not np.array_equal(np.asarray(saved[name], dtype=np.float32), value)  # MindSpore changed them
    got, step, note = torch_load_fsdp(tmp_path / "ms_saved")
    assert step == 4 and note == {"saved_by": "mindspore"}
    for name, value in saved.items():
        np.testing.assert_array_equal(got[name], np.asarray(value, dtype=np.float32), err_msg=name)
