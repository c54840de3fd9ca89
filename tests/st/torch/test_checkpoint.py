# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: distributed checkpoints on 2 gloo ranks — save in one layout, load in another, bit-exact.

Every loaded value is compared with the global tensor that was saved (built on one process from the same
seed), so a layout change that loses, duplicates or misplaces one element fails.
"""
import pytest

from hyper_parallel.testing import multi_rank

SHAPES = [(8, 6), (7, 5), (1, 3)]  # even, uneven, a dim smaller than the mesh (an empty shard)


def full_value(shape, seed):
    """The global tensor of a case (same on every rank)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g)


def placements_of(name):
    """Placements on a 1-D mesh by name."""
    from hyper_parallel import Replicate, Shard
    return {"S0": [Shard(0)], "S1": [Shard(1)], "R": [Replicate()]}[name]


@pytest.mark.parametrize("src,dst", [("S0", "S1"), ("S1", "R"), ("R", "S0"), ("S0", "S0")])
@multi_rank(world_size=2, timeout=120)
def test_save_load_other_placements(tmp_path, src, dst):
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    mesh = hp.init_device_mesh("cpu", (2,))
    path = tmp_path / f"{src}_{dst}"
    saved = {"model": {f"w{i}": hp.distribute_tensor(full_value(s, i), mesh, placements_of(src))
                       for i, s in enumerate(SHAPES)},
             "plain": torch.arange(5, dtype=torch.int64), "step": 7, "name": ("tiny", 1),
             "bf16": hp.distribute_tensor(full_value((5, 4), 9).bfloat16(), mesh, placements_of(src))}
    ckpt.save(saved, checkpoint_id=path)
    target = {"model": {f"w{i}": hp.distribute_tensor(torch.zeros(s), mesh, placements_of(dst))
                        for i, s in enumerate(SHAPES)},
              "plain": torch.zeros(5, dtype=torch.int64), "step": 0, "name": None,
              "bf16": hp.distribute_tensor(torch.zeros(5, 4, dtype=torch.bfloat16), mesh, placements_of(dst))}
    ckpt.load(target, checkpoint_id=path)
    for i, s in enumerate(SHAPES):
        got = target["model"][f"w{i}"]
        assert got.placements == tuple(placements_of(dst))
        assert torch.equal(got.full_tensor(), full_value(s, i)), (i, s)
    assert torch.equal(target["bf16"].full_tensor(), full_value((5, 4), 9).bfloat16())
    assert torch.equal(target["plain"], torch.arange(5))
    assert target["step"] == 7 and target["name"] == ("tiny", 1)
    dist.barrier()


@multi_rank(world_size=2, timeout=120)
def test_partial_is_reduced_by_save_and_refused_by_torch_dcp(tmp_path):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import hyper_parallel as hp
    from hyper_parallel import Partial, Replicate
    from hyper_parallel import checkpoint as ckpt
    mesh = hp.init_device_mesh("cpu", (2,))
    rank = dist.get_rank()
    local = torch.full((3, 2), float(rank + 1))
    part = hp.DTensor.from_local(local, mesh, [Partial("sum")])
    ckpt.save({"p": part}, checkpoint_id=tmp_path / "p")
    target = {"p": hp.distribute_tensor(torch.zeros(3, 2), mesh, [Replicate()])}
    ckpt.load(target, checkpoint_id=tmp_path / "p")
    assert torch.equal(target["p"].full_tensor(), torch.full((3, 2), 3.0))
    with pytest.raises(BaseException) as info:  # DCP wraps per-rank errors in CheckpointException
        dcp.save({"p": part}, checkpoint_id=tmp_path / "q")
    assert "Partial(sum) on mesh dim 0" in str(info.value) and "reduces it before saving" in str(info.value)
    with pytest.raises(ckpt.CheckpointError, match="Loading into a Partial DTensor is not supported"):
        ckpt.load({"p": part}, checkpoint_id=tmp_path / "p")


# ---------------------------------------------------------------------- model helpers (run in the ranks)
def tiny_llama(seed):
    """The debug Llama with weights from ``seed``."""
    import torch
    from hyper_parallel.models.llama3 import TINY_CONFIGS, LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(TINY_CONFIGS["debug"])


def fsdp_llama(seed, mesh):
    """Tiny Llama, one ``fully_shard`` unit per layer plus the root."""
    import hyper_parallel as hp
    model = tiny_llama(seed)
    for layer in model.model.layers:
        hp.fully_shard(layer, mesh=mesh)
    return hp.fully_shard(model, mesh=mesh)


def llama_batch(step, rank=0, world=1):
    """This rank's slice of the global batch of ``step``."""
    import torch
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(0, 256, (4, 16), generator=g)
    return ids.chunk(world)[rank]


def llama_step(model, opt, ids):
    """One AdamW step; returns the local loss."""
    logits = model(ids)
    from hyper_parallel.models.llama3 import LlamaForCausalLM
    loss = LlamaForCausalLM.loss(logits[:, :-1], ids[:, 1:])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def full_params(model):
    """``{name: full tensor}`` of a model whose parameters may be DTensors."""
    out = {}
    for name, p in model.named_parameters():
        out[name] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
    return out


def full_optim_states(model, opt):
    """``{(name, key): full tensor}`` of an optimizer's states, through the checkpoint's full state dict."""
    from hyper_parallel import checkpoint as ckpt
    osd = ckpt.get_optimizer_state_dict(model, opt, options=ckpt.StateDictOptions(full_state_dict=True))
    return {(n, k): v.detach().clone() for n, st in osd["state"].items() for k, v in st.items()}


@multi_rank(world_size=2, timeout=180)
def test_fsdp_checkpoint_loads_into_tp_plain_and_pp_layouts(tmp_path):
    """FSDP model + AdamW saved; loaded into TP, into a plain model on each rank and from pipeline-stage
    subsets: every parameter and optimizer state equals the saved one bit for bit."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.models.llama3 import parallelize_llama
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    model = fsdp_llama(0, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(2):
        llama_step(model, opt, llama_batch(step, rank, world))
    want_params, want_states = full_params(model), full_optim_states(model, opt)
    ckpt.save({"model": ckpt.ModelState(model), "optim": ckpt.OptimizerState(model, opt)},
              checkpoint_id=tmp_path / "fsdp")

    # TP layout, fresh weights and a fresh optimizer, through the functional API (flattened optimizer keys,
    # as OptimizerState saves them)
    tp_mesh = hp.init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    tp = parallelize_llama(tiny_llama(1), tp_mesh)
    tp_opt = torch.optim.AdamW(tp.parameters(), lr=1e-2)
    flat = ckpt.StateDictOptions(flatten_optimizer_state_dict=True)
    msd, osd = ckpt.get_state_dict(tp, tp_opt, options=flat)
    assert "state.lm_head.weight.exp_avg" in osd and osd["param_groups.lm_head.weight.lr"] == 1e-2
    ckpt.load({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "fsdp")
    ckpt.set_state_dict(tp, tp_opt, model_state_dict=msd, optim_state_dict=osd)
    got = full_params(tp)
    assert sorted(got) == sorted(want_params)
    for name, value in want_params.items():
        assert torch.equal(got[name], value), name
    got_states = full_optim_states(tp, tp_opt)
    assert sorted(got_states) == sorted(want_states)
    for key, value in want_states.items():
        assert torch.equal(got_states[key], value), key
    # both continue: one more step in each layout gives the same parameters (to float32 rounding)
    llama_step(model, opt, llama_batch(2, rank, world))
    llama_step(tp, tp_opt, llama_batch(2))
    after_fsdp, after_tp = full_params(model), full_params(tp)
    for name, value in after_fsdp.items():
        torch.testing.assert_close(after_tp[name], value, rtol=1e-5, atol=1e-5, msg=name)

    # plain model on every rank, through a full state dict in memory
    plain = tiny_llama(2)
    sd = plain.state_dict()
    ckpt.load({"model": sd}, checkpoint_id=tmp_path / "fsdp", planner=None)
    for name, value in want_params.items():
        assert torch.equal(sd[name], value), name

    # pipeline stages (this rank's model parts hold a subset of the FQNs): load the FSDP checkpoint into
    # them, model and optimizer, then save from them and load that into a fresh FSDP model
    from hyper_parallel.models.llama3 import pipeline_llama
    _, parts = pipeline_llama(tiny_llama(3), n_microbatches=2)
    pp_opt = torch.optim.AdamW([p for part in parts for p in part.parameters()], lr=1e-2)
    pp_states = {"model": ckpt.ModelState(parts), "optim": ckpt.OptimizerState(parts, pp_opt)}
    ckpt.load(pp_states, checkpoint_id=tmp_path / "fsdp")
    mine = {n: p for part in parts for n, p in part.named_parameters()}
    assert 0 < len(mine) < len(want_params)
    pp_osd = ckpt.get_optimizer_state_dict(parts, pp_opt)
    for name, p in mine.items():
        assert torch.equal(p.detach(), want_params[name]), name
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(pp_osd["state"][name][k], want_states[(name, k)]), (name, k)
    ckpt.save(pp_states, checkpoint_id=tmp_path / "pp")
    fsdp2 = fsdp_llama(3, mesh)
    opt2 = torch.optim.AdamW(fsdp2.parameters(), lr=1e-2)
    ckpt.load({"model": ckpt.ModelState(fsdp2), "optim": ckpt.OptimizerState(fsdp2, opt2)},
              checkpoint_id=tmp_path / "pp")
    got, got_states = full_params(fsdp2), full_optim_states(fsdp2, opt2)
    for name, value in want_params.items():
        assert torch.equal(got[name], value), name
    for key, value in want_states.items():
        assert torch.equal(got_states[key], value), key


@multi_rank(world_size=2, timeout=180)
def test_muon_chained_optimizer_state_across_layouts(tmp_path):
    """ChainedOptimizer(Muon for matrices, AdamW for the rest) on FSDP, saved and loaded into TP."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.models.llama3 import parallelize_llama
    from hyper_parallel.optim import ChainedOptimizer, Muon
    rank, world = dist.get_rank(), dist.get_world_size()

    def chain(model):
        mats = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n and "lm_head" not in n]
        rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n
                                                               and "lm_head" not in n)]
        return ChainedOptimizer([Muon(mats, lr=0.02), torch.optim.AdamW(rest, lr=1e-2)])

    mesh = hp.init_device_mesh("cpu", (world,))
    model = fsdp_llama(0, mesh)
    opt = chain(model)
    for step in range(2):
        llama_step(model, opt, llama_batch(step, rank, world))
    want_p, want_s = full_params(model), full_optim_states(model, opt)
    assert any(k == "momentum_buffer" for _, k in want_s) and any(k == "exp_avg" for _, k in want_s)
    ckpt.save({"model": ckpt.ModelState(model), "optim": ckpt.OptimizerState(model, opt)},
              checkpoint_id=tmp_path / "c")
    tp = parallelize_llama(tiny_llama(1), hp.init_device_mesh("cpu", (world,), mesh_dim_names=("tp",)))
    tp_opt = chain(tp)
    ckpt.load({"model": ckpt.ModelState(tp), "optim": ckpt.OptimizerState(tp, tp_opt)}, checkpoint_id=tmp_path / "c")
    got_p, got_s = full_params(tp), full_optim_states(tp, tp_opt)
    assert sorted(got_s) == sorted(want_s)
    for k, v in want_p.items():
        assert torch.equal(got_p[k], v), k
    for k, v in want_s.items():
        assert torch.equal(got_s[k], v), k
    # both continue from the same state. Muon orthogonalises in bf16, so gradients that differ in the last
    # float32 bit between the layouts may round to neighbouring bf16 values: one bf16 ulp of the update for
    # orthogonalised entries below 2 is lr 0.02 * 0.2 * sqrt(128) * 2**-7 = 3.5e-4. The five bf16 Newton-Schulz
    # iterations can carry such a flip to a few ulps of a few entries (seen: 2 of 4096 entries of a 64x64 matrix
    # at 7.2e-4 on one CPU, none on another), so: nearly every entry within one ulp, none beyond four
    llama_step(model, opt, llama_batch(2, rank, world))
    llama_step(tp, tp_opt, llama_batch(2))
    after_fsdp, after_tp = full_params(model), full_params(tp)
    for name, value in after_fsdp.items():
        torch.testing.assert_close(after_tp[name], value, rtol=0, atol=1.4e-3, msg=lambda m, n=name: f"{n}: {m}")
        beyond_one_ulp = int(((after_tp[name] - value).abs() > 4e-4).sum())
        assert beyond_one_ulp <= max(2, value.numel() // 500), f"{name}: {beyond_one_ulp} entries beyond 4e-4"


class Batches:
    """A tiny resumable data loader: random token batches drawn from torch's global generator,
    position counted (the ``Stateful`` protocol: ``state_dict`` / ``load_state_dict``)."""

    def __init__(self):
        self.position = 0

    def next(self, rank, world):
        """The next local batch (draws from torch's global RNG: resuming needs the RNG state too)."""
        import torch
        self.position += 1
        ids = torch.randint(0, 256, (4, 16))
        return ids.chunk(world)[rank]

    def state_dict(self):
        """The position."""
        return {"position": self.position}

    def load_state_dict(self, sd):
        """Restore the position."""
        self.position = sd["position"]


def _train_state(seed, mesh):
    import torch
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    model = fsdp_llama(seed, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    loader = Batches()
    states = {"model": ckpt.ModelState(model), "optim": ckpt.OptimizerState(model, opt), "lr": sched,
              "data": ckpt.PerRank(loader), "rng": ckpt.RNGState()}
    del hp
    return model, opt, sched, loader, states


def _run_steps(model, opt, sched, loader, mesh, steps, manager=None, first=1):
    """Train ``steps`` steps: batch from the loader and torch's RNG, loss scaled by a DTensor random draw
    (the placement-invariant stream); returns the global losses."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Shard
    rank, world = dist.get_rank(), dist.get_world_size()
    losses = []
    for step in range(first, first + steps):
        ids = loader.next(rank, world)
        noise = hp.rand((6,), device_mesh=mesh, placements=[Shard(0)]).full_tensor().sum()
        from hyper_parallel.models.llama3 import LlamaForCausalLM
        loss = LlamaForCausalLM.loss(model(ids)[:, :-1], ids[:, 1:]) * (1 + 0.01 * noise)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item())
        if manager is not None:
            manager.save(step)
    del torch
    return losses


@pytest.mark.parametrize("async_mode", ["disabled", "async"])
@multi_rank(world_size=2, timeout=240)
def test_resume_is_bit_identical(tmp_path, async_mode):
    """Model + AdamW + LR scheduler + RNG (torch, Python, the DTensor stream) + data position: resume from
    the checkpoint of step 3 in a fresh state; 5 more steps equal the uninterrupted run bit for bit."""
    import random
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    world = dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    hp.manual_seed(7)
    random.seed(7)
    model, opt, sched, loader, states = _train_state(0, mesh)
    manager = ckpt.CheckpointManager(tmp_path / "run", interval=3, keep_latest_k=2, async_mode=async_mode,
                                     states=states)
    uninterrupted = _run_steps(model, opt, sched, loader, mesh, 8, manager)
    manager.close()
    want = full_params(model)
    assert manager.latest_step() == 6
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["latest", "step-00000003", "step-00000006"]

    hp.manual_seed(12345)  # a fresh process: other weights, other RNG states
    random.seed(99)
    model, opt, sched, loader, states = _train_state(5, mesh)
    manager = ckpt.CheckpointManager(tmp_path / "run", interval=3, keep_latest_k=2, async_mode=async_mode,
                                     states=states)
    assert manager.load(step=3) == 3
    assert loader.position == 3 and sched.last_epoch == 3
    resumed = _run_steps(model, opt, sched, loader, mesh, 5, None, first=4)
    assert resumed == uninterrupted[3:], (resumed, uninterrupted)
    got = full_params(model)
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    manager.close()


class GatedWriter:
    """Factory of a checkpoint writer whose ``write_data`` waits for an event set by the training thread
    (to prove that training steps run while a save persists)."""

    @staticmethod
    def make(path, gate, entered):
        from hyper_parallel.checkpoint import FileSystemWriter

        class _Gated(FileSystemWriter):
            def write_data(self, plan, planner):
                entered.set()
                assert gate.wait(60), "the training thread never opened the gate"
                return super().write_data(plan, planner)

        return _Gated(path)


def _load_fresh(path, mesh, model_seed):
    import torch
    from hyper_parallel import checkpoint as ckpt
    model = fsdp_llama(model_seed, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    msd, osd = ckpt.get_state_dict(model, opt)
    ckpt.load({"model": msd, "optim": osd}, checkpoint_id=path)
    ckpt.set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    return full_params(model), full_optim_states(model, opt)


@multi_rank(world_size=2, timeout=180)
def test_async_save_equals_sync_save_while_training_runs(tmp_path):
    import threading
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    model = fsdp_llama(0, mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    llama_step(model, opt, llama_batch(0, rank, world))
    msd, osd = ckpt.get_state_dict(model, opt)
    ckpt.save({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "sync")
    before = full_params(model)
    gate, entered = threading.Event(), threading.Event()
    fut = ckpt.async_save({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "async",
                          storage_writer=GatedWriter.make(tmp_path / "async", gate, entered))
    assert entered.wait(60), "the background save never reached write_data"
    for step in range(1, 4):  # training (with its own collectives) runs while the save is held in write_data
        llama_step(model, opt, llama_batch(step, rank, world))
    assert not fut.done()
    assert not (tmp_path / "async").exists()  # not published before the data is written
    gate.set()
    fut.result(timeout=60)
    assert (tmp_path / "async" / "metadata.json").exists()
    changed = full_params(model)
    assert any(not torch.equal(changed[n], before[n]) for n in before)
    sync_p, sync_s = _load_fresh(tmp_path / "sync", mesh, 1)
    async_p, async_s = _load_fresh(tmp_path / "async", mesh, 2)
    for name, value in before.items():
        assert torch.equal(async_p[name], value) and torch.equal(sync_p[name], value), name
    for key, value in sync_s.items():
        assert torch.equal(async_s[key], value), key

    # the next save waits for the previous one
    gate2, entered2 = threading.Event(), threading.Event()
    first = ckpt.async_save({"model": msd}, checkpoint_id=tmp_path / "a1",
                            storage_writer=GatedWriter.make(tmp_path / "a1", gate2, entered2))
    assert entered2.wait(60)
    threading.Timer(0.2, gate2.set).start()
    second = ckpt.async_save({"model": msd}, checkpoint_id=tmp_path / "a2")
    assert first.done()
    second.result(timeout=60)

    # an error in the background surfaces at the next call
    (tmp_path / "blocker").write_text("a file where a folder is expected")
    bad = ckpt.async_save({"model": msd}, checkpoint_id=tmp_path / "blocker" / "ckpt")
    while not bad.done():
        threading.Event().wait(0.01)
    with pytest.raises(ckpt.CheckpointError, match="previous async_save to .*blocker/ckpt failed in the background"):
        ckpt.save({"model": msd}, checkpoint_id=tmp_path / "after")
    ckpt.save({"model": msd}, checkpoint_id=tmp_path / "after")  # reported once, then saving works again


@pytest.mark.parametrize("damage", ["flip", "truncate", "metadata"])
@multi_rank(world_size=2, timeout=120)
def test_corrupted_or_truncated_file_is_named(tmp_path, damage):
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel import checkpoint as ckpt
    mesh = hp.init_device_mesh("cpu", (2,))
    sd = {"w": hp.distribute_tensor(full_value((64, 8), 0), mesh, [Shard(0)])}
    path = tmp_path / "c"
    ckpt.save(sd, checkpoint_id=path)
    victim = path / ("metadata.json" if damage == "metadata" else "__1_0.safetensors")
    if dist.get_rank() == 0:
        raw = bytearray(victim.read_bytes())
        if damage == "truncate":
            raw = raw[:len(raw) // 2]
        elif damage == "flip":
            raw[-40] ^= 0x01
        else:
            raw = raw.replace(b'"world_size": 2', b'"world_size": 3')
        victim.write_bytes(bytes(raw))
    dist.barrier()
    target = {"w": hp.distribute_tensor(torch.zeros(64, 8), mesh, [Shard(1)])}
    with pytest.raises(ckpt.CheckpointCorruptError) as info:
        ckpt.load(target, checkpoint_id=path)
    assert info.value.path == str(victim)
    expected = {"flip": "checksum mismatch for tensor", "truncate": "the manifest records", "metadata": "checksum mismatch (stored"}
    assert expected[damage] in str(info.value), str(info.value)


@multi_rank(world_size=2, timeout=120)
def test_torch_interop_both_ways(tmp_path):
    """torch's DCP with torch's own DTensor <-> hyper_parallel DTensors, in both formats."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh as torch_mesh
    from torch.distributed.tensor import Replicate as TR, Shard as TS, distribute_tensor as torch_distribute
    import hyper_parallel as hp
    from hyper_parallel import Replicate, Shard
    from hyper_parallel import checkpoint as ckpt
    tmesh = torch_mesh("cpu", (2,))
    mesh = hp.init_device_mesh("cpu", (2,))
    full = {"a": full_value((7, 5), 0), "b": full_value((4, 6), 1)}

    def torch_sd(fill):
        return {"a": torch_distribute(full["a"] if fill else torch.zeros(7, 5), tmesh, [TS(0)]),
                "b": torch_distribute(full["b"] if fill else torch.zeros(4, 6), tmesh, [TR()]), "step": 3 if fill else 0}

    def ours_sd(fill):
        return {"a": hp.distribute_tensor(full["a"] if fill else torch.zeros(7, 5), mesh, [Shard(1)]),
                "b": hp.distribute_tensor(full["b"] if fill else torch.zeros(4, 6), mesh, [Shard(0)]),
                "step": 3 if fill else 0}

    def check(sd):
        for k in ("a", "b"):
            assert torch.equal(sd[k].full_tensor(), full[k]), k
        assert sd["step"] == 3

    # torch DTensor, torch's DCP format -> ours (format detected from the folder)
    dcp.save(torch_sd(True), checkpoint_id=tmp_path / "t")
    got = ours_sd(False)
    ckpt.load(got, checkpoint_id=tmp_path / "t")
    check(got)
    # ours, our format -> torch's DCP load into torch's DTensor (with our storage reader)
    ckpt.save(ours_sd(True), checkpoint_id=tmp_path / "o")
    got = torch_sd(False)
    dcp.load(got, storage_reader=ckpt.FileSystemReader(tmp_path / "o"))
    check(got)
    # ours through torch's own FileSystemWriter -> torch's plain dcp.load
    ckpt.save(ours_sd(True), checkpoint_id=tmp_path / "o2", storage_writer=dcp.FileSystemWriter(tmp_path / "o2"))
    got = torch_sd(False)
    dcp.load(got, checkpoint_id=tmp_path / "o2")
    check(got)
    # torch DTensor through our writer (torch's dcp.save) -> ours
    dcp.save(torch_sd(True), storage_writer=ckpt.FileSystemWriter(tmp_path / "t2"))
    got = ours_sd(False)
    ckpt.load(got, checkpoint_id=tmp_path / "t2")
    check(got)


@multi_rank(world_size=2, timeout=180)
def test_hf_export_read_by_safetensors_and_import_into_tp(tmp_path):
    import json
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file
    import hyper_parallel as hp
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.models.llama3 import LlamaStateDictAdapter, TINY_CONFIGS, parallelize_llama
    from hyper_parallel.models.llama3.state_dict_adapter import LLAMA_RULES
    world = dist.get_world_size()
    mesh = hp.init_device_mesh("cpu", (world,))
    model = fsdp_llama(0, mesh)
    want = full_params(model)
    adapter = LlamaStateDictAdapter(TINY_CONFIGS["debug"], dtype="bfloat16")
    weight_map = ckpt.save_hf(model, tmp_path / "hf", adapter, dtype=torch.bfloat16, max_file_bytes=60_000)
    files = sorted(set(weight_map.values()))
    assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == weight_map
    expected_names = {ours for ours, _ in LLAMA_RULES if "{}" not in ours}
    expected_names |= {ours.format(i) for ours, _ in LLAMA_RULES if "{}" in ours for i in range(2)}
    assert set(weight_map) == expected_names == set(want)
    read = {}
    for f in files:
        read.update(load_file(str(tmp_path / "hf" / f)))
    assert sum(v.numel() * v.element_size() for v in read.values()) == index["metadata"]["total_size"]
    for name, value in want.items():
        assert read[name].dtype == torch.bfloat16 and torch.equal(read[name], value.bfloat16()), name
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 2
    assert LlamaStateDictAdapter.config_from_hf(config) == TINY_CONFIGS["debug"]

    # import into a tensor-parallel model in fp32: each rank reads its slices, bf16 -> fp32
    tp_mesh = hp.init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    tp = parallelize_llama(tiny_llama(1), tp_mesh)
    ckpt.load_hf(tp, tmp_path / "hf", adapter)
    got = full_params(tp)
    for name, value in want.items():
        assert got[name].dtype == torch.float32 and torch.equal(got[name], value.bfloat16().float()), name

    # full precision round trip into a plain model; tied embeddings have no lm_head.weight in the export
    ckpt.save_hf(model, tmp_path / "hf32", adapter)
    plain = tiny_llama(2)
    ckpt.load_hf(plain, tmp_path / "hf32", adapter)
    for name, value in want.items():
        assert torch.equal(plain.state_dict()[name], value), name
    tied_cfg = TINY_CONFIGS["debug"].__class__(tie_word_embeddings=True)
    tied = LlamaStateDictAdapter(tied_cfg)
    from hyper_parallel.models.llama3 import LlamaForCausalLM
    torch.manual_seed(3)
    tmodel = LlamaForCausalLM(tied_cfg)
    wm = ckpt.save_hf(tmodel, tmp_path / "tied", tied)
    assert "lm_head.weight" not in wm
    torch.manual_seed(4)
    tmodel2 = LlamaForCausalLM(tied_cfg)
    ckpt.load_hf(tmodel2, tmp_path / "tied", tied)
    assert torch.equal(tmodel2.lm_head.weight, tmodel.model.embed_tokens.weight)
    assert tmodel2.lm_head.weight is tmodel2.model.embed_tokens.weight
    with pytest.raises(ckpt.CheckpointError, match="missing keys \\['lm_head.weight'\\]"):
        ckpt.load_hf(tiny_llama(5), tmp_path / "tied", LlamaStateDictAdapter(TINY_CONFIGS["debug"]))
