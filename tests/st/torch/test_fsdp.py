# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: ``fully_shard`` on 2 gloo ranks against the same training on one process.

Every parity case trains 5 AdamW steps and compares the loss of every step and every parameter
(gathered with ``full_tensor``) with a single-process model trained on the whole global batch.

Tolerances: fp32 cases differ from the reference only by the order of the gradient sum (two
half-batch means averaged vs one full-batch mean), ~1e-7 relative, which AdamW's normalised update
keeps at that level: ``rtol=atol=1e-5``. The bf16 case is compared with a single-process reference
that runs the *same* bf16 compute per data-parallel slice and reduces in fp32 (what the policy
promises), so only the fp32 summation order differs: ``rtol=atol=1e-4`` on fp32 master weights and
bf16-level (``1e-2``) on the bf16 loss.
"""
import copy

import pytest

from hyper_parallel.testing import multi_rank

STEPS = 5
FP32 = dict(rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- helpers (run in the ranks)
def make_mlp(dims=(12, 7, 9, 1), seed=0):
    """An MLP whose dim-0 sizes are uneven over 2 and 4 ranks (7, 9) and smaller than them (1)."""
    import torch
    from torch import nn
    torch.manual_seed(seed)
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def batch(step, n=8, din=12, d_out=1):
    """The global batch of ``step`` (identical on every rank)."""
    import torch
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(n, din, generator=g), torch.randn(n, d_out, generator=g)


def shard_model(model, mesh, how="nested", **kwargs):
    """Apply ``fully_shard``: ``nested`` (every Linear, then the root) or ``root`` only."""
    from torch import nn
    import hyper_parallel as hp
    if how == "nested":
        for m in model:
            if isinstance(m, nn.Linear):
                hp.fully_shard(m, mesh=mesh, **kwargs)
    return hp.fully_shard(model, mesh=mesh, **kwargs)


def dp_mean(value, group=None):
    """Mean of a scalar tensor over ``group``."""
    import torch.distributed as dist
    t = value.detach().float().clone()
    dist.all_reduce(t, group=group)
    return t / dist.get_world_size(group)


def assert_params_match(model, ref, **tol):
    """Every sharded parameter, gathered, equals the reference parameter (or state dict entry) of the same name."""
    import torch
    ref_params = ref if isinstance(ref, dict) else dict(ref.named_parameters())
    names = []
    for name, p in model.named_parameters():
        full = p.full_tensor()
        torch.testing.assert_close(full, ref_params[name].detach(), **tol, msg=lambda m, n=name: f"{n}: {m}")
        names.append(name)
    assert sorted(names) == sorted(ref_params)


def train_parity(model, ref, *, dp_rank, dp_size, dp_group=None, micro=1, no_sync=True, scale=1.0, lr=1e-2,
                 tol=None, io=None):
    """5 AdamW steps of ``model`` (local slice of each global batch, ``micro`` micro-batches per step,
    the first ones without gradient sync when ``no_sync``) against ``ref`` (whole batch, loss times
    ``scale``); compares losses and parameters. Returns the optimizer."""
    import torch
    import torch.nn.functional as F
    tol = tol or FP32
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=lr)
    for step in range(STEPS):
        x, y = batch(step) if io is None else batch(step, din=io[0], d_out=io[1])
        ref_loss = F.mse_loss(ref(x), y)
        (ref_loss * scale).backward()
        ref_opt.step()
        ref_opt.zero_grad()
        xs, ys = x.chunk(dp_size)[dp_rank], y.chunk(dp_size)[dp_rank]
        total = 0.0
        for i, (xm, ym) in enumerate(zip(xs.chunk(micro), ys.chunk(micro))):
            if micro > 1 and no_sync:
                model.set_requires_gradient_sync(i == micro - 1)
            loss = F.mse_loss(model(xm), ym) / micro
            loss.backward()
            total = total + loss.detach()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(dp_mean(total, dp_group), ref_loss.detach(), **tol)
    assert_params_match(model, ref, **tol)
    ref.__dict__["_ref_opt_state"] = {n: ref_opt.state[p] for n, p in ref.named_parameters()}
    return opt


# ---------------------------------------------------------------------- parity cases
VARIANTS = {
    "root_only": dict(how="root"),
    "nested": dict(how="nested"),
    "reshard_after_forward_false": dict(how="nested", reshard_after_forward=False),
    "reshard_after_forward_int_1": dict(how="nested", reshard_after_forward=1),
    "cpu_offload": dict(how="nested", offload="cpu"),
    "explicit_prefetch": dict(how="nested", prefetch=True),
    # one bucket per parameter: even ones gather in place and reduce without packing
    "direct_buckets": dict(how="nested", dims=(12, 8, 6, 1), env={"HYPER_PARALLEL_FSDP_DIRECT_NUMEL": "1"}),
    # the reduce-scatter path (the default off gloo) instead of gloo's all-reduce + slice
    "reduce_scatter_mode": dict(how="nested", env={"HYPER_PARALLEL_FSDP_REDUCE": "reduce_scatter"}),
    "reduce_scatter_direct": dict(how="root", dims=(12, 8, 6, 1), env={"HYPER_PARALLEL_FSDP_REDUCE": "reduce_scatter",
                                                                     "HYPER_PARALLEL_FSDP_DIRECT_NUMEL": "1"}),
}


class env_vars:  # pylint: disable=invalid-name
    """Set environment variables inside a rank for the duration of a block."""

    def __init__(self, values):
        self.values = values or {}
        self.saved = {}

    def __enter__(self):
        import os
        for k, v in self.values.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = v
        return self

    def __exit__(self, *exc):
        import os
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@multi_rank(world_size=2, timeout=120)
def test_fsdp_parity(variant):
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.fsdp import FSDPModule
    cfg = dict(VARIANTS[variant])
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_mlp(cfg.get("dims", (12, 7, 9, 1)))
    model = copy.deepcopy(ref)
    kwargs = {}
    if "reshard_after_forward" in cfg:
        kwargs["reshard_after_forward"] = cfg["reshard_after_forward"]
    if cfg.get("offload") == "cpu":
        kwargs["offload_policy"] = hp.CPUOffloadPolicy()
    with env_vars(cfg.get("env")):
        shard_model(model, mesh, cfg["how"], **kwargs)
    assert isinstance(model, FSDPModule) and type(model).__name__ == "FSDPSequential"
    if "HYPER_PARALLEL_FSDP_DIRECT_NUMEL" in cfg.get("env", {}):
        units = [m.__dict__["_hp_fsdp_state"].unit for m in model.modules() if isinstance(m, FSDPModule)]
        assert all(b.direct for u in units if u is not None for b in u.buckets)
    if cfg.get("prefetch"):
        linears = [m for m in model if isinstance(m, FSDPModule)]
        for a, b in zip(linears[:-1], linears[1:]):
            a.set_modules_to_forward_prefetch([b])
            b.set_modules_to_backward_prefetch([a])
    batches = None if "dims" not in cfg else (cfg["dims"][0], cfg["dims"][-1])
    train_parity(model, ref, dp_rank=dist.get_rank(), dp_size=2, io=batches)


@multi_rank(world_size=2, timeout=120)
def test_fsdp_parameters_are_sharded_dtensors_uneven_and_empty():
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel import Shard
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    model = shard_model(make_mlp(), mesh)
    assert model.unshard() is None  # the root of nested units owns no parameters: a no-op
    sd = model.state_dict()
    assert all(isinstance(v, hp.DTensor) for v in sd.values())
    w = sd["0.weight"]
    assert tuple(w.shape) == (7, 12) and w.placements == (Shard(0),)
    assert tuple(w.to_local().shape) == ((4, 12) if rank == 0 else (3, 12))
    last = sd["4.weight"]  # dim 0 (1) smaller than the world: rank 1 holds an empty shard
    assert tuple(last.shape) == (1, 9) and tuple(last.to_local().shape) == ((1, 9) if rank == 0 else (0, 9))
    assert tuple(sd["4.bias"].to_local().shape) == ((1,) if rank == 0 else (0,))
    # one flat buffer per unit: the local shards are views of it, laid out in padded slots
    unit = model[0].__dict__["_hp_fsdp_state"].unit
    bucket = unit.buckets[0]
    assert bucket.layout.slots == (4 * 12, 4) and bucket.sharded.numel() == 52
    assert w.to_local().untyped_storage().data_ptr() == bucket.sharded.untyped_storage().data_ptr()
    # unshard() registers the gathered parameters, reshard() brings the DTensors back
    handle = model[0].unshard(async_op=True)
    handle.wait()
    assert type(model[0].weight) is torch.nn.Parameter and tuple(model[0].weight.shape) == (7, 12)
    torch.testing.assert_close(model[0].weight.detach(), w.full_tensor())
    model[0].reshard()
    assert isinstance(model[0].weight, hp.DTensor)


@multi_rank(world_size=2, timeout=120)
def test_fsdp_mixed_precision_bf16_params_fp32_reduce():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_mlp()
    model = copy.deepcopy(ref)
    inner = hp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for m in model:
        if isinstance(m, torch.nn.Linear):
            hp.fully_shard(m, mesh=mesh, mp_policy=inner)
    hp.fully_shard(model, mesh=mesh, mp_policy=hp.MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.float32))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # sharded master weights stay fp32
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for step in range(STEPS):
        x, y = batch(step)
        # reference: the same bf16 compute per data-parallel slice, fp32 average of the gradients
        low = copy.deepcopy(ref).to(torch.bfloat16)
        ref_loss = 0.0
        for p in ref.parameters():
            p.grad = torch.zeros_like(p)
        for xs, ys in zip(x.chunk(2), y.chunk(2)):
            loss = F.mse_loss(low(xs.to(torch.bfloat16)).float(), ys)
            loss.backward()
            ref_loss += loss.detach() / 2
            for p, q in zip(ref.parameters(), low.parameters()):
                p.grad += q.grad.float() / 2
                q.grad = None
        ref_opt.step()
        ref_opt.zero_grad()
        out = model(x.chunk(2)[rank])
        assert out.dtype == torch.float32  # output_dtype
        loss = F.mse_loss(out, y.chunk(2)[rank])
        loss.backward()
        assert all(p.grad.dtype == torch.float32 for p in model.parameters())
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(dp_mean(loss), ref_loss, rtol=1e-2, atol=1e-2)
    assert_params_match(model, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sync", [False, True])
@multi_rank(world_size=2, timeout=120)
def test_fsdp_gradient_accumulation(sync):
    """Two micro-batches per step, without communication in the first one (``sync=False``) or with a
    reduce-scatter after each backward accumulating into the sharded gradients (``sync=True``)."""
    import torch.distributed as dist
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_mlp()
    model = shard_model(copy.deepcopy(ref), mesh)
    if sync:
        ref2 = make_mlp(seed=3)
        _accumulate_with_sync(shard_model(copy.deepcopy(ref2), mesh), ref2)
    train_parity(model, ref, dp_rank=dist.get_rank(), dp_size=2, micro=2, no_sync=not sync)


def _accumulate_with_sync(model, ref):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    rank = dist.get_rank()
    x, y = batch(0)
    F.mse_loss(ref(x), y).backward()
    for xm, ym in zip(x.chunk(2)[rank].chunk(2), y.chunk(2)[rank].chunk(2)):
        (F.mse_loss(model(xm), ym) / 2).backward()
    ref_grads = {n: p.grad for n, p in ref.named_parameters()}
    for n, p in model.named_parameters():
        grad = hp_full(p.grad)
        torch.testing.assert_close(grad, ref_grads[n], **FP32)


def hp_full(d):
    """Gather a DTensor."""
    return d.full_tensor()


@multi_rank(world_size=2, timeout=120)
def test_fsdp_gradient_scaling_factor():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_mlp()
    model = shard_model(copy.deepcopy(ref), mesh)
    model.set_gradient_scaling_factor(0.25)
    x, y = batch(0)
    F.mse_loss(model(x.chunk(2)[dist.get_rank()]), y.chunk(2)[dist.get_rank()]).backward()
    F.mse_loss(ref(x), y).backward()
    ref_grads = {n: p.grad for n, p in ref.named_parameters()}
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad.full_tensor(), 0.25 * ref_grads[n], **FP32)
    model.zero_grad()
    ref.zero_grad()
    with pytest.raises(TypeError, match="expected a number"):
        model.set_gradient_scaling_factor("2")
    train_parity(model, ref, dp_rank=dist.get_rank(), dp_size=2, scale=0.25)


@multi_rank(world_size=2, timeout=120)
def test_fsdp_state_dict_round_trips():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.fsdp import (get_model_state_dict, get_optimizer_state_dict, set_model_state_dict,
                                     set_optimizer_state_dict)
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_mlp()
    model = shard_model(copy.deepcopy(ref), mesh)
    opt = train_parity(model, ref, dp_rank=rank, dp_size=2)
    # full model state dict equals the single-process one; with cpu_offload only rank 0 keeps it
    full = get_model_state_dict(model, full_state_dict=True)
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(full[k], v)
    rank0 = get_model_state_dict(model, full_state_dict=True, cpu_offload=True)
    assert (len(rank0) == len(full)) if rank == 0 else rank0 == {}
    sharded = get_model_state_dict(model)
    osd = get_optimizer_state_dict(model, opt)
    osd_full = get_optimizer_state_dict(model, opt, full_state_dict=True)
    assert isinstance(osd["state"]["0.weight"]["exp_avg"], hp.DTensor)
    assert tuple(osd_full["state"]["0.weight"]["exp_avg"].shape) == (7, 12)
    torch.testing.assert_close(osd_full["state"]["0.weight"]["exp_avg"],
                               ref_opt_state(ref)["0.weight"]["exp_avg"], **FP32)
    # the full dicts load into a fresh sharded model and optimizer
    other = shard_model(make_mlp(seed=5), mesh)
    set_model_state_dict(other, full)
    assert_params_match(other, full, rtol=0, atol=0)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    set_optimizer_state_dict(other, other_opt, osd_full)
    back = get_optimizer_state_dict(other, other_opt, full_state_dict=True)
    for n, st in osd_full["state"].items():
        for k, v in st.items():
            torch.testing.assert_close(back["state"][n][k], v, rtol=0, atol=0)
    # the sharded dicts too; one more step on both models gives the same parameters
    other = shard_model(make_mlp(seed=7), mesh)
    set_model_state_dict(other, sharded)
    assert_params_match(other, full, rtol=0, atol=0)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    set_optimizer_state_dict(other, other_opt, osd)
    x, y = batch(99)
    for m, o in ((model, opt), (other, other_opt)):
        F.mse_loss(m(x.chunk(2)[rank]), y.chunk(2)[rank]).backward()
        o.step()
        o.zero_grad()
    for (n, p), q in zip(model.named_parameters(), other.parameters()):
        torch.testing.assert_close(q.full_tensor(), p.full_tensor(), rtol=0, atol=0, msg=lambda m, n=n: f"{n}: {m}")
    # a plain (unsharded) model loads the full state dict directly
    plain = make_mlp(seed=11)
    plain.load_state_dict(get_model_state_dict(model, full_state_dict=True))
    with pytest.raises(ValueError, match="does not match the parameter's global shape"):
        set_model_state_dict(model, {"0.weight": torch.zeros(3, 3)}, strict=False)
    with pytest.raises(RuntimeError, match="missing keys"):
        set_model_state_dict(model, {"0.weight": full["0.weight"]})


def ref_opt_state(ref):
    """The reference optimizer's state by parameter name (kept on the model by ``train_parity``)."""
    return ref.__dict__["_ref_opt_state"]


@multi_rank(world_size=2, timeout=120)
def test_fsdp_clip_grad_norm():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel.fsdp import clip_grad_norm_
    rank = dist.get_rank()
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_mlp()
    model = shard_model(copy.deepcopy(ref), mesh)
    x, y = batch(0)
    F.mse_loss(ref(x) * 10, y).backward()
    F.mse_loss(model(x.chunk(2)[rank]) * 10, y.chunk(2)[rank]).backward()
    for norm_type in (2.0, float("inf")):  # the second clips the already clipped gradients again
        want = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5, norm_type=norm_type)
        got = clip_grad_norm_(model.parameters(), 0.5, norm_type=norm_type)
        torch.testing.assert_close(got.float(), want, **FP32)
        grads = {n: p.grad for n, p in ref.named_parameters()}
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.grad.full_tensor(), grads[n], **FP32)
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm_(model.parameters(), 1.0, norm_type=-1)


@multi_rank(world_size=2, timeout=120)
def test_fsdp_optimizer_step_sees_plain_local_shards():
    """The optimizer step runs on plain local tensors (no DTensor dispatch) and leaves DTensors behind."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    model = shard_model(make_mlp(), mesh)
    seen = []

    class Probe(torch.optim.SGD):
        """Records the parameter types the step sees."""

        def step(self, closure=None):  # pylint: disable=arguments-differ
            seen.extend((type(p), type(p.grad)) for g in self.param_groups for p in g["params"])
            return super().step(closure)

    opt = Probe(model.parameters(), lr=0.1)
    x, y = batch(0)
    F.mse_loss(model(x.chunk(2)[dist.get_rank()]), y.chunk(2)[dist.get_rank()]).backward()
    before = [p.to_local().clone() for p in model.parameters()]
    opt.step()
    assert seen and all(t is torch.Tensor and g is torch.Tensor for t, g in seen)
    assert all(type(p) is hp.DTensor and type(p.grad) is hp.DTensor for p in model.parameters())
    for b, p in zip(before, model.parameters()):
        torch.testing.assert_close(p.to_local(), b - 0.1 * p.grad.to_local())

    class Boom(torch.optim.SGD):
        """A step that fails after the pre-hook ran (the post-hook never runs)."""

        def step(self, closure=None):  # pylint: disable=arguments-differ
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        Boom(model.parameters(), lr=0.1).step()
    assert all(type(p) is torch.Tensor for p in model.parameters())  # left as plain local shards
    model(x.chunk(2)[dist.get_rank()])  # the root's pre-forward restores them
    assert all(type(p) is hp.DTensor and type(p.grad) is hp.DTensor for p in model.parameters())


@multi_rank(world_size=2, timeout=120)
def test_fsdp_bad_inputs():
    import torch
    from torch import nn
    import hyper_parallel as hp
    default = hp.fully_shard(make_mlp())  # no mesh: a 1-D mesh over the world
    assert default[0].weight.device_mesh.shape == (2,)
    assert hp.fully_shard(make_mlp())[0].weight.device_mesh is default[0].weight.device_mesh
    mesh = hp.init_device_mesh("cpu", (2,))
    with pytest.raises(ValueError, match="must be a divisor of the shard group size 2"):
        hp.fully_shard(make_mlp(), mesh=mesh, reshard_after_forward=3)
    with pytest.raises(TypeError, match="expected True, False or an int"):
        hp.fully_shard(make_mlp(), mesh=mesh, reshard_after_forward="yes")
    with pytest.raises(TypeError, match="expected an nn.Module"):
        hp.fully_shard(torch.zeros(3), mesh=mesh)
    with pytest.raises(TypeError, match="expected a MixedPrecisionPolicy"):
        hp.fully_shard(make_mlp(), mesh=mesh, mp_policy=torch.bfloat16)
    done = hp.fully_shard(make_mlp(), mesh=mesh)
    with pytest.raises(ValueError, match="already fully sharded"):
        hp.fully_shard(done, mesh=mesh)
    scalar = nn.Module()
    scalar.s = nn.Parameter(torch.tensor(1.0))
    with pytest.raises(ValueError, match="0-dimensional parameter"):
        hp.fully_shard(scalar, mesh=mesh)
    with pytest.raises(ValueError, match="is not a fully_shard module"):
        done.set_modules_to_forward_prefetch([nn.Linear(2, 2)])


def make_checkpointed(seed=0):
    """Three Linear+Tanh blocks run under non-reentrant activation checkpointing, then a head."""
    import torch
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        """Blocks recomputed in backward (the recomputation stops early, before post-forward)."""

        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(12, 12), nn.Tanh()) for _ in range(3))
            self.head = nn.Linear(12, 1)

        def forward(self, x):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False)
            return self.head(x)

    torch.manual_seed(seed)
    return Checkpointed()


@multi_rank(world_size=2, timeout=120)
def test_fsdp_with_activation_checkpointing():
    import torch.distributed as dist
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = make_checkpointed()
    model = copy.deepcopy(ref)
    for block in model.blocks:
        hp.fully_shard(block, mesh=mesh)
    hp.fully_shard(model, mesh=mesh)
    train_parity(model, ref, dp_rank=dist.get_rank(), dp_size=2)
    assert all(isinstance(p, hp.DTensor) for p in model.parameters())


# ---------------------------------------------------------------------- several forwards in flight
SCHEDULES = ("FBFBFB", "FFBFBB", "FFFBBB")  # gradient accumulation, 1F1B (two in flight), GPipe


def run_schedule(model, schedule, micro_batches, loss_fn):
    """Run ``schedule`` ("F": forward of the next micro-batch, "B": backward of the oldest one in flight)."""
    in_flight, todo = [], iter(micro_batches)
    for op in schedule:
        if op == "F":
            x, y = next(todo)
            in_flight.append(loss_fn(model(x), y))
        else:
            in_flight.pop(0).backward()
    assert not in_flight


def make_tp_block(seed=0):
    """A block whose ``up``/``down`` pair takes tensor + sequence parallelism and whose ``gate`` is a
    ``fully_shard`` unit (a MoE router / shared expert) under a parent that is not one."""
    import torch
    from torch import nn

    class Block(nn.Module):  # pylint: disable=missing-class-docstring
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(8, 12)
            self.down = nn.Linear(12, 8)
            self.gate = nn.Linear(8, 8)

        def forward(self, x):  # pylint: disable=missing-function-docstring
            y = self.down(torch.tanh(self.up(x)))
            return y + torch.tanh(self.gate(y))

    torch.manual_seed(seed)
    return Block()


def _micro_batches(step, n=3):
    import torch
    g = torch.Generator().manual_seed(500 + step)
    return [(torch.randn(2, 4, 8, generator=g), torch.randn(2, 4, 8, generator=g)) for _ in range(n)]


def _assert_grads(model, ref, case):
    import torch
    ref_grads = {n: p.grad for n, p in ref.named_parameters()}
    for name, p in model.named_parameters():
        assert p.grad is not None, (case, name)
        torch.testing.assert_close(p.grad.full_tensor(), ref_grads[name], **FP32,
                                   msg=lambda m, n=name: f"{case} {n}: {m}")


@multi_rank(world_size=2, timeout=120)
def test_fsdp_forwards_in_flight_reduce_per_backward():
    """Issue 33: micro-batches whose forwards run before the earlier backwards (1F1B, GPipe), every unit
    reducing its gradient in its own post-backward (no deferral), equal one process. Two models on the same 2
    ranks: a TP + SP block whose ``gate`` is a ``fully_shard`` unit under a plain parent (the ``llama3_moe tp=2
    pp=2`` stage), and the nested FSDP MLP over data parallel. Two iterations each (no gradient of the first may
    leak into the second). Before the fix the second backward's gradients stayed unreduced on the unsharded
    parameters: missing from this step's gradients, added to the next one's."""
    import torch.distributed as dist
    import torch.nn.functional as F
    import hyper_parallel as hp
    from hyper_parallel import Shard
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = hp.init_device_mesh("cpu", (2,))
    rank = dist.get_rank()

    def sum_loss(out, y):
        return F.mse_loss(out, y, reduction="sum")

    for schedule in SCHEDULES:
        ref = make_tp_block()
        tp_model = copy.deepcopy(ref)
        parallelize_module(tp_model, mesh, {"up": ColwiseParallel(input_layouts=Shard(1)),
                                            "down": RowwiseParallel(output_layouts=Shard(1))})
        hp.fully_shard(tp_model.gate, mesh=mesh)
        tp_model.gate.set_gradient_scaling_factor(2.0)  # the two ranks hold sequence slices of one loss
        mlp_ref = make_mlp()
        mlp = shard_model(copy.deepcopy(mlp_ref), mesh)
        for step in range(2):
            micro = _micro_batches(step)
            mlp_micro = [batch(10 * step + i, n=2) for i in range(len(micro))]
            for (x, y), (xm, ym) in zip(micro, mlp_micro):
                sum_loss(ref(x), y).backward()
                F.mse_loss(mlp_ref(xm), ym).backward()
            run_schedule(tp_model, schedule, [(x.chunk(2, dim=1)[rank], y.chunk(2, dim=1)[rank]) for x, y in micro],
                         sum_loss)
            run_schedule(mlp, schedule, [(x[rank:rank + 1], y[rank:rank + 1]) for x, y in mlp_micro], F.mse_loss)
            _assert_grads(tp_model, ref, f"tp+sp {schedule} step {step}")
            _assert_grads(mlp, mlp_ref, f"nested {schedule} step {step}")
            for m in (ref, tp_model, mlp_ref, mlp):
                m.zero_grad()
