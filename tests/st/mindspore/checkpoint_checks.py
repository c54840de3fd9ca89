# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The checks of the MindSpore checkpoint launch (``test_checkpoint_mindspore.py``), inside 2 MindSpore ranks.

``$HP_CKPT_DIR`` holds ``torch_saved`` (a TP MLP saved by torch on 2 ranks) and ``expected.npz`` (its
weights, written by the torch side from its own parameters). The MindSpore ranks load it into a MindSpore
TP MLP, change the weights (``w * 2 + 1``), take one AdamW step on a seeded gradient and save
``ms_saved``, which the torch side loads back.
"""
import os
import shutil
import traceback

import numpy as np

from tests.st.mindspore.common import mlp as _mlp

NAMES = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


def _full(cell, name):
    from hyper_parallel.tp import param_dtensor
    owner, leaf = name.split(".")
    sub = getattr(cell, owner)
    if leaf in sub.__dict__.get("_hp_param_specs", {}):
        return param_dtensor(sub, leaf).full_tensor().asnumpy()
    return getattr(sub, leaf).asnumpy()


def _tp(mesh):
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    cell = _mlp()
    parallelize_module(cell, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return cell


def _load_torch_checkpoint(mesh, root, expected):
    from hyper_parallel import checkpoint as ckpt
    cell = _tp(mesh)
    state = {"model": ckpt.ModelState(cell), "step": 0, "note": {"saved_by": None}}
    ckpt.load(state, checkpoint_id=os.path.join(root, "torch_saved"))
    for name in NAMES:
        np.testing.assert_array_equal(_full(cell, name), expected[name], err_msg=name)
    assert state["step"] == 3 and state["note"] == {"saved_by": "torch"}, state
    return cell


def _save_from_mindspore(mesh, root, cell, expected):
    import mindspore as ms
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.optim._mindspore.optimizers import AdamW
    for p in cell.get_parameters():
        p.set_data(p.value() * 2 + 1)
    opt = AdamW(list(cell.get_parameters()), lr=0.1)
    rng = np.random.default_rng(5)
    grads = {n: rng.standard_normal(expected[n].shape).astype(np.float32) for n in NAMES}
    from tests.st.mindspore.checks import _local_of
    coord = mesh.get_coordinate()
    specs = {}
    for owner in ("fc1", "fc2"):
        for leaf, spec in getattr(cell, owner).__dict__.get("_hp_param_specs", {}).items():
            specs[f"{owner}.{leaf}"] = spec
    local_grads = [_local_of(ms.Tensor(grads[p.name]), specs[p.name], coord) if p.name in specs
                   else ms.Tensor(grads[p.name]) for p in opt.parameters]
    opt.step(local_grads)
    path = os.path.join(root, "ms_saved")
    states = {"model": ckpt.ModelState(cell), "optim": ckpt.OptimizerState(cell, opt), "step": 4,
              "note": {"saved_by": "mindspore"}}
    ckpt.save(states, checkpoint_id=path)
    assert os.path.exists(os.path.join(path, "metadata.json"))
    # the MindSpore save reloads into a plain (unsharded) MindSpore model and into a fresh optimizer
    plain, fresh = _mlp(), None
    fresh = AdamW(list(plain.get_parameters()), lr=0.5)
    back = {"model": ckpt.ModelState(plain), "optim": ckpt.OptimizerState(plain, fresh), "step": 0,
            "note": {"saved_by": None}}
    ckpt.load(back, checkpoint_id=path)
    for name in NAMES:
        np.testing.assert_array_equal(plain.parameters_dict()[name].asnumpy(), _full(cell, name), err_msg=name)
    assert fresh.param_groups[0]["lr"] == 0.1 and fresh.state["fc1.weight"]["step"] == 1
    want_m = opt.state["fc2.bias"]["exp_avg"].asnumpy()
    np.testing.assert_array_equal(fresh.state["fc2.bias"]["exp_avg"].asnumpy(), want_m)
    return {n: _full(cell, n).tolist() for n in NAMES}


def _async_and_manager(mesh, root, cell):
    import mindspore as ms
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.checkpoint.format import CheckpointCorruptError
    fut = ckpt.async_save({"model": ckpt.ModelState(cell)}, checkpoint_id=os.path.join(root, "ms_async"))
    ckpt.save({"model": ckpt.ModelState(cell)}, checkpoint_id=os.path.join(root, "ms_sync"))  # waits for fut first
    assert fut.done()
    manager = ckpt.CheckpointManager(os.path.join(root, "run"), interval=1, keep_latest_k=1, states={
        "model": ckpt.ModelState(cell), "tag": 1})
    for step in (1, 2):
        manager.save(step)
    assert manager.latest_step() == 2 and sorted(os.listdir(os.path.join(root, "run"))) == ["latest", "step-00000002"]
    other = _tp(mesh)
    assert manager.load({"model": ckpt.ModelState(other), "tag": 0}) == 2
    for name in NAMES:
        np.testing.assert_array_equal(_full(other, name), _full(cell, name), err_msg=name)
    for folder in ("ms_async", "ms_sync"):
        plain = _mlp()
        ckpt.load({"model": ckpt.ModelState(plain)}, checkpoint_id=os.path.join(root, folder))
        for name in NAMES:
            np.testing.assert_array_equal(plain.parameters_dict()[name].asnumpy(), _full(cell, name), err_msg=name)
    # a damaged chunk is named at load
    from hyper_parallel.checkpoint._mindspore.api import barrier, coordinator
    bad = os.path.join(root, "ms_bad")
    if coordinator():
        shutil.copytree(os.path.join(root, "ms_sync"), bad)
        data = os.path.join(bad, "__0_0.safetensors")
        raw = bytearray(open(data, "rb").read())
        raw[-8] ^= 0xFF
        open(data, "wb").write(bytes(raw))
    barrier()
    try:
        ckpt.load({"model": ckpt.ModelState(_tp(mesh))}, checkpoint_id=bad)
    except CheckpointCorruptError as exc:
        assert exc.path.endswith("__0_0.safetensors") and "checksum mismatch" in str(exc), str(exc)
    else:
        raise AssertionError("a flipped byte was not detected")
    del ms


def _load_torch_into_fsdp(mesh, root, expected):
    """The torch (TP-saved) checkpoint loads into a MindSpore fully_shard MLP (nested unit fc1 + root)."""
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    cell = _mlp()
    hp.fully_shard(cell.fc1, mesh=mesh)
    hp.fully_shard(cell, mesh=mesh)
    assert tuple(cell.fc2.weight.shape) == (4, 16), cell.fc2.weight.shape  # Shard(0) of (8, 16)
    state = {"model": ckpt.ModelState(cell), "step": 0, "note": {"saved_by": None}}
    ckpt.load(state, checkpoint_id=os.path.join(root, "torch_saved"))
    for name in NAMES:
        np.testing.assert_array_equal(_full(cell, name), expected[name], err_msg=f"fully_shard {name}")


def run_checkpoint_suite():
    """Every check, each recorded as "ok" or its traceback; returns the results and the saved weights."""
    import hyper_parallel as hp
    hp.init_process_group("mccl")
    mesh = hp.init_device_mesh("cpu", (2,))
    root = os.environ["HP_CKPT_DIR"]
    expected = dict(np.load(os.path.join(root, "expected.npz")))
    results, saved, cell = {}, None, None
    try:
        cell = _load_torch_checkpoint(mesh, root, expected)
        results["load torch checkpoint into MindSpore TP"] = "ok"
        _load_torch_into_fsdp(mesh, root, expected)
        results["load torch checkpoint into MindSpore fully_shard"] = "ok"
        saved = _save_from_mindspore(mesh, root, cell, expected)
        results["save from MindSpore, reload plain with optimizer"] = "ok"
        _async_and_manager(mesh, root, cell)
        results["async save, manager, corrupted file"] = "ok"
    except Exception:  # pylint: disable=broad-except  # reported per check to the test
        results[f"failed after {len(results)} checks"] = traceback.format_exc()
    return {"results": results, "saved": saved}
