# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""ST: activation checkpointing and swap on torch.

* every policy: loss and every gradient bit-identical (fp32, torch.equal) to no checkpointing, over
  two training steps (the second one runs with what the first recompute taught the trim memo), on
  the plain tiny Llama (one process), under TP+SP and under FSDP (2 gloo ranks; the uncheckpointed
  distributed runs are also compared with one process);
* a dispatch-mode counter proves what the op policy recomputes: matmuls, attention and every
  collective run exactly as often as without checkpointing, norms and activations once more;
* swap to disk: values identical, the saved activations' bytes held in process memory (tracked
  allocations) drop by >= 90 %, files gone after the step and after an exception, prefetch order =
  backward order (also across microbatches of a manual pipeline schedule), fusion = one transfer;
* auto policy within its budget; bad configs name the key.
"""
import copy
import functools
import os
from collections import Counter

import pytest

from hyper_parallel.testing import multi_rank

SWAP = {"min_bytes": 1024, "fusion_bytes": 16384}
POLICIES = {
    "full": {"mode": "full"},
    "full-keep-collectives": {"mode": "full", "recompute_collectives": False},
    "selective-op": {"mode": "selective-op"},
    "every-2": {"mode": "every-k", "every_k": 2},
    "every-2-op": {"mode": "every-k", "every_k": 2, "every_k_policy": "selective-op"},
    "swap": {"mode": "swap", "swap": SWAP},
    "selective-op+swap": {"mode": "selective-op", "swap_ops": ["aten.mm", "aten.addmm"], "swap": SWAP},
    "mixed": {"mode": "selective-op", "overrides": {"model.layers.0": "swap", "model.layers.1": "full"},
              "swap": SWAP},
}


# ---------------------------------------------------------------------- helpers
def llama(config="debug", layers=None):
    import torch
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS
    cfg = TINY_CONFIGS[config]
    if layers is not None:
        import dataclasses
        cfg = dataclasses.replace(cfg, num_hidden_layers=layers)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def tokens(vocab, step, b=2, s=16):
    import torch
    g = torch.Generator().manual_seed(100 + step)
    ids = torch.randint(0, vocab, (b, s), generator=g)
    return ids, torch.roll(ids, -1, 1)


def loss_of(model, ids, labels):
    from hyper_parallel.models.llama3 import LlamaForCausalLM
    return LlamaForCausalLM.loss(model(ids), labels)


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def train(model, steps=2, batch=None, **kw):
    """Losses and (local) gradients of ``steps`` SGD steps; returns [(loss, {name: grad})]."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for step in range(steps):
        ids, labels = batch(step) if batch else tokens(model.config.vocab_size, step, **kw)
        loss = loss_of(model, ids, labels)
        loss.backward()
        out.append((loss.detach().clone(), {n: local(p.grad).clone() for n, p in model.named_parameters()}))
        opt.step()
        opt.zero_grad()
    return out


def assert_bit_identical(got, want, what):
    import torch
    for step, ((la, ga), (lb, gb)) in enumerate(zip(got, want)):
        assert torch.equal(la, lb), f"{what}: loss of step {step} differs: {la.item()} vs {lb.item()}"
        assert sorted(ga) == sorted(gb)
        for name in ga:
            assert torch.equal(ga[name], gb[name]), f"{what}: step {step} gradient of {name} differs " \
                                                    f"(max {(ga[name] - gb[name]).abs().max().item()})"


def with_policy(model, name, tmp=None):
    import hyper_parallel.activation as act
    cfg = copy.deepcopy(POLICIES[name])
    if "swap" in cfg and tmp is not None:
        cfg["swap"]["dir"] = str(tmp)
    return act.apply_activation_policy(model, cfg)


# ---------------------------------------------------------------------- plain modules (one process)
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_bit_identical_on_plain_llama(name, tmp_path):
    ref = llama()
    want = train(copy.deepcopy(ref))
    model = copy.deepcopy(ref)
    plan = with_policy(model, name, tmp_path)
    assert_bit_identical(train(model), want, name)
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in ref.named_parameters()]
    if plan.manager is not None:
        assert plan.manager.stats.bytes_out > 0 and plan.manager.stats.bytes_in == plan.manager.stats.bytes_out
        assert plan.manager.live_files() == [] and os.listdir(tmp_path) == []
        plan.manager.close()


def _torch_style_policy(ctx, op, *args, **kwargs):  # written for torch.utils.checkpoint: runs unchanged
    import torch
    from torch.utils.checkpoint import CheckpointPolicy
    if op in (torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def test_functional_checkpoint_with_save_ops_and_torch_policy_fn():
    import hyper_parallel.activation as act
    ref = llama()
    want = train(copy.deepcopy(ref), steps=1)
    for policy in (act.save_ops(["aten.mm", "attention"]), _torch_style_policy, ["aten.addmm", "aten.mm"]):
        model = copy.deepcopy(ref)
        for layer in model.model.layers:
            layer.forward = functools.partial(act.checkpoint, layer.forward, policy=policy)
        assert_bit_identical(train(model, steps=1), want, repr(policy))


class OpCounter:
    """A dispatch mode that counts every op that really executes (modes pushed later see ops first:
    an op the checkpoint replays from its cache never reaches this counter)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        counts = self.counts = Counter()

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counts[str(func)] += 1
                return func(*args, **(kwargs or {}))
        self.mode = _Mode()


def _count_step(model, ids, labels, layers=None):
    """(op counts of forward + backward, op counts of the forward inside ``layers``)."""
    counter, inside = OpCounter(), OpCounter()
    handles = []
    for layer in layers or ():
        handles.append(layer.register_forward_pre_hook(lambda *_: (inside.mode.__enter__(), None)[1]))
        handles.append(layer.register_forward_hook(lambda *_: inside.mode.__exit__(None, None, None) and None))
    with counter.mode:
        loss = loss_of(model, ids, labels)
        loss.backward()
    for h in handles:
        h.remove()
    return counter.counts, inside.counts


def test_dispatch_counter_proves_the_op_policy_recompute_set():
    import hyper_parallel.activation as act
    ref = llama()
    ids, labels = tokens(ref.config.vocab_size, 0)
    base = copy.deepcopy(ref)
    none, in_layers = _count_step(base, ids, labels, base.model.layers)
    model = copy.deepcopy(ref)
    act.apply_activation_policy(model, {"mode": "selective-op"})
    ckpt, _ = _count_step(model, ids, labels)
    kept = [op for op in in_layers if op.startswith(("aten.mm.", "aten._scaled_dot_product"))]
    assert kept, in_layers
    for op in kept:  # kept: never recomputed
        assert ckpt[op] == none[op], (op, ckpt[op], none[op])
    # rotary runs as the fused kernel op when the C++ extension is built, else as aten ops (neg in rotate_half)
    rotary = "hyper_parallel.rotary.default" if "hyper_parallel.rotary.default" in in_layers else "aten.neg.default"
    for op in ("aten.silu.default", "aten.rsqrt.default", rotary):  # recomputed: once more per forward
        assert in_layers[op] > 0 and ckpt[op] == none[op] + in_layers[op], (op, ckpt[op], none[op], in_layers[op])
    full = copy.deepcopy(ref)
    act.apply_activation_policy(full, {"mode": "full"})
    full_counts, _ = _count_step(full, ids, labels)
    assert full_counts["aten.mm.default"] > none["aten.mm.default"]  # full recompute runs the matmuls again


def test_layer_saved_bytes_match_the_formula():
    """The bytes autograd saves in one layer (distinct storages, counted by saved_tensors_hooks) equal
    llama_layer_saved_bytes, for two shapes of the tiny Llama."""
    from hyper_parallel.activation._torch.apply import _saved_bytes, find_layers
    from hyper_parallel.activation.memory import llama_layer_saved_bytes
    for config, b, s in (("debug", 2, 16), ("small", 3, 40)):
        model = llama(config, layers=2)
        cfg = model.config
        ids, labels = tokens(cfg.vocab_size, 0, b=b, s=s)
        own = _saved_bytes(model, find_layers(model, None), (ids,), None)
        want = llama_layer_saved_bytes(b, s, cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim,
                                       cfg.intermediate_size, cfg.num_attention_heads, cfg.head_dim)
        assert set(own.values()) == {want}, (config, own, want)


def forward_loss(model, ids, labels):
    return loss_of(model, ids, labels)


def test_swap_to_disk_drops_held_bytes_by_90_percent(tmp_path):
    import torch
    import hyper_parallel.activation as act
    from hyper_parallel.testing.memory import AllocationTracker
    ref = llama("small", layers=2)
    ids, labels = tokens(ref.config.vocab_size, 0, b=2, s=64)
    held, grads = {}, {}
    manager = act.SwapManager("disk", str(tmp_path), min_bytes=4096)
    for mode in ("none", "swap"):
        model = copy.deepcopy(ref)
        with AllocationTracker() as tracker:
            tracker.mark("before")
            if mode == "swap":
                loss = act.swap(forward_loss, model, ids, labels, manager=manager, group="model")
                manager.wait()  # the writes finished: what is still held is what swap kept
                assert len(manager.live_files()) == 1
            else:
                loss = forward_loss(model, ids, labels)
            tracker.mark("after_forward")
            loss.backward()
        held[mode] = tracker.live("after_forward") - tracker.live("before")
        grads[mode] = [(loss.detach(), {n: p.grad for n, p in model.named_parameters()})]
    assert_bit_identical(grads["swap"], grads["none"], "swap")
    assert held["none"] > 2 ** 20, held
    assert held["swap"] <= 0.1 * held["none"], f"held {held['swap']} B with swap vs {held['none']} B without"
    assert manager.live_files() == [] and os.listdir(tmp_path) == []
    st = manager.stats
    assert st.bytes_out == st.bytes_in > 0.9 * held["none"] and st.files_created == st.files_removed == 1
    manager.close()


def test_swap_files_removed_after_an_exception(tmp_path):
    import torch
    import hyper_parallel.activation as act
    model = llama()
    manager = act.SwapManager("disk", str(tmp_path), min_bytes=1024, io="mmap")  # the memory-mapped I/O path
    act.apply_activation_policy(model, {"mode": "swap", "swap": {"dir": str(tmp_path)}}, manager=manager)
    ids, labels = tokens(model.config.vocab_size, 0)
    with pytest.raises(RuntimeError, match="loss exploded"):
        with manager.step():
            loss = loss_of(model, ids, labels)
            manager.wait()
            assert len(os.listdir(tmp_path)) == 2  # one file per layer
            raise RuntimeError("loss exploded")
    assert os.listdir(tmp_path) == [] and manager.live_files() == []
    with pytest.raises(act.SwapError, match="after it was consumed or cleared"):
        loss.backward()  # the activations are gone: a clear error, not garbage

    def boom(*_):
        raise ValueError("layer 1 failed")
    handle = model.model.layers[1].mlp.register_forward_hook(boom)
    with pytest.raises(ValueError, match="layer 1 failed"):
        loss_of(model, ids, labels)  # no step() context: the failing layer drops its own record
    handle.remove()
    manager.wait()
    assert len(manager.live_files()) == 1  # layer 0 finished its forward; its graph is still referenced
    manager.clear()
    assert os.listdir(tmp_path) == []
    manager.close()


def test_prefetch_order_is_backward_order_and_links_are_followed(tmp_path):
    import hyper_parallel.activation as act
    ref = llama(layers=4)
    want = train(copy.deepcopy(ref), steps=1)
    model = copy.deepcopy(ref)
    plan = act.apply_activation_policy(model, {"mode": "swap", "swap": dict(SWAP, dir=str(tmp_path))})
    assert_bit_identical(train(model, steps=1), want, "swap")
    m = plan.manager
    order = [(f"model.layers.{i}", 0) for i in (3, 2, 1, 0)]
    assert m.backward_log == order and m.prefetch_log == order[1:]
    m.schedule.reset_logs()
    m.set_forward_prefetch_layer("model.layers.3", "model.layers.1")
    model = copy.deepcopy(ref)
    act.apply_activation_policy(model, {"mode": "swap"}, manager=m)
    assert_bit_identical(train(model, steps=1), want, "swap with links")
    assert m.prefetch_log[0] == ("model.layers.1", 0) and m.backward_log == order
    m.close()


def test_swap_under_a_manual_pipeline_schedule(tmp_path):
    """One pipeline stage running 1F1B-like F0 F1 F2 B0 F3 B1 B2 B3: activations of the microbatches
    waiting for backward are on disk, brought back in schedule order; gradients bit-identical."""
    import torch
    import hyper_parallel.activation as act
    ref = llama()
    mbs = [tokens(ref.config.vocab_size, i, b=1) for i in range(4)]
    schedule = ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"]

    def run(model, manager=None):
        losses, pending = [], {}
        for action in schedule:
            mb = int(action[1])
            if action[0] == "F":
                ctx = manager.microbatch(mb) if manager else torch.autograd.graph.saved_tensors_hooks(
                    lambda t: t, lambda t: t)
                with ctx:
                    pending[mb] = loss_of(model, *mbs[mb]) / 4
            else:
                loss = pending.pop(mb)
                loss.backward()
                losses.append(loss.detach())
        return [(torch.stack(losses), {n: p.grad.clone() for n, p in model.named_parameters()})]

    want = run(copy.deepcopy(ref))
    model = copy.deepcopy(ref)
    manager = act.SwapManager("disk", str(tmp_path), min_bytes=1024, fusion_bytes=16384)
    act.apply_activation_policy(model, {"mode": "swap"}, manager=manager)
    assert_bit_identical(run(model, manager), want, "pipeline swap")
    expected = [(f"model.layers.{i}", mb) for mb in range(4) for i in (1, 0)]
    assert manager.backward_log == expected
    assert manager.prefetch_log == expected[1:]
    assert os.listdir(tmp_path) == []
    manager.close()


def test_swap_fusion_is_one_transfer_per_layer(tmp_path):
    import hyper_parallel.activation as act
    ref = llama()
    want = train(copy.deepcopy(ref), steps=1)
    stats = {}
    for fusion in (0, 1 << 30):
        model = copy.deepcopy(ref)
        manager = act.SwapManager("disk", str(tmp_path), min_bytes=256, fusion_bytes=fusion)
        act.apply_activation_policy(model, {"mode": "swap"}, manager=manager)
        assert_bit_identical(train(model, steps=1), want, f"fusion_bytes={fusion}")
        stats[fusion] = manager.stats
        manager.close()
    layers = ref.config.num_hidden_layers
    assert stats[1 << 30].transfers_out == stats[1 << 30].transfers_in == layers
    assert stats[1 << 30].fused_tensors == stats[0].swapped_tensors - (stats[0].swapped_tensors -
                                                                       stats[1 << 30].fused_tensors)
    assert stats[0].transfers_out > 5 * layers and stats[0].fused_tensors == 0
    assert stats[0].bytes_out == stats[1 << 30].bytes_out


def test_swap_tensor_wrapper_keeps_identity(tmp_path):
    import torch
    import hyper_parallel.activation as act
    manager = act.SwapManager("disk", str(tmp_path))
    t = torch.randn(64, 1000)
    view = t[3]
    copy_ = t.clone()
    handle = act.swap_tensor_wrapper(t, manager, "held")
    handle.swap_out().wait()
    assert t.untyped_storage().nbytes() == 0 and len(os.listdir(tmp_path)) == 1 and handle.state == "out"
    handle.swap_in().wait()
    assert handle.tensor is t and torch.equal(t, copy_) and torch.equal(view, copy_[3])
    assert os.listdir(tmp_path) == [] and handle.state == "resident"
    with pytest.raises(ValueError, match="parameters are not swapped"):
        act.swap_tensor_wrapper(torch.nn.Parameter(torch.ones(3)), manager)
    manager.close()


def test_auto_policy_stays_within_budget(tmp_path):
    import hyper_parallel.activation as act
    from hyper_parallel.testing.memory import AllocationTracker
    ref = llama("debug", layers=3)
    ids, labels = tokens(ref.config.vocab_size, 0, b=4, s=64)

    def held(model, manager=None):
        with AllocationTracker() as tracker:
            tracker.mark("before")
            loss = loss_of(model, ids, labels)
            if manager is not None:
                manager.wait()
            tracker.mark("after")
            loss.backward()
        return tracker.live("after") - tracker.live("before")

    none = held(copy.deepcopy(ref))
    budget = int(0.45 * none)
    model = copy.deepcopy(ref)
    cfg = {"mode": "auto", "auto": {"budget_bytes": budget, "modes": ["none", "selective-op", "full"]}}
    plan = act.apply_activation_policy(model, cfg, example_inputs=(ids,),
                                       loss_fn=functools.partial(_next_token_loss, labels=labels))
    assert plan.auto.predicted_bytes <= budget
    assert set(plan.layers.values()) <= {"none", "selective-op", "full"} and len(plan.layers) == 3
    assert set(plan.layers.values()) != {"none"}
    measured = held(model)
    assert measured <= budget, f"auto plan {plan.layers} holds {measured} B > budget {budget} B\n{plan.report()}"
    assert "budget" in plan.report() and "predicted" in plan.report()
    with pytest.raises(act.AutoBudgetError, match="too small"):
        act.apply_activation_policy(copy.deepcopy(ref), {"mode": "auto", "auto": {"budget_bytes": 1024}},
                                    example_inputs=(ids,))


def _next_token_loss(logits, labels):
    from hyper_parallel.models.llama3 import LlamaForCausalLM
    return LlamaForCausalLM.loss(logits, labels)


def test_wrappers_keep_names_refuse_double_wrapping_and_explain_errors(tmp_path):
    import torch
    import hyper_parallel.activation as act
    model = llama()
    names = [n for n, _ in model.named_parameters()]
    act.checkpoint_wrapper(model.model.layers[0], "op")
    with pytest.raises(ValueError, match="already checkpointed"):
        act.checkpoint_wrapper(model.model.layers[0])
    act.swap_wrapper(model.model.layers[1], act.SwapManager("disk", str(tmp_path)))
    with pytest.raises(ValueError, match="already swapped"):
        act.swap_wrapper(model.model.layers[1])
    assert [n for n, _ in model.named_parameters()] == names
    with pytest.raises(act.ActivationConfigError, match="activation.layers: 'decoder.*' matches no module"):
        act.apply_activation_policy(llama(), {"mode": "full", "layers": "decoder.*"})
    with pytest.raises(act.ActivationConfigError, match="activation.mode"):
        act.apply_activation_policy(llama(), {"mode": "fastest"})
    with pytest.raises(act.SwapError, match="target='host'.*CPU tensors"):
        act.swap(torch.exp, torch.ones(100000, requires_grad=True), manager=act.SwapManager("host"))
    with pytest.raises(TypeError, match="cannot tell the framework"):
        act.checkpoint(lambda x: x, 3)


def test_shared_modules_are_left_alone():
    import hyper_parallel.activation as act
    model = llama(layers=3)
    model.model.layers[2] = model.model.layers[0]  # one block used twice
    plan = act.apply_activation_policy(model, {"mode": "full"})
    assert plan.excluded == ("model.layers.0", "model.layers.2")
    assert plan.layers == {"model.layers.1": "full"} and "shared modules left alone" in plan.report()


# ---------------------------------------------------------------------- TP and FSDP (2 ranks)
DIST_POLICIES = ["selective-op", "full", "full-keep-collectives", "every-2-op", "swap", "selective-op+swap"]


@multi_rank(world_size=2, timeout=240)
def test_tp_policies_bit_identical_and_collectives_run_once():
    import torch
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import parallelize_llama
    mesh = hp.init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))
    ref = llama()
    single = train(copy.deepcopy(ref))

    def build():
        return parallelize_llama(copy.deepcopy(ref), mesh, sequence_parallel=True)

    want = train(build())
    for (la, _), (lb, _) in zip(want, single):  # the distributed baseline is the single-process computation
        torch.testing.assert_close(la, lb, rtol=1e-5, atol=1e-5)
    for name in DIST_POLICIES:
        model = build()
        plan = with_policy(model, name)
        assert_bit_identical(train(model), want, f"TP {name}")
        if plan.manager is not None:
            plan.manager.close()
    ids, labels = tokens(ref.config.vocab_size, 0)
    base, _ = _count_step(build(), ids, labels)
    model = build()
    with_policy(model, "selective-op")
    counts, _ = _count_step(model, ids, labels)
    comm = [op for op in base if op.startswith("c10d.")]
    assert {op.split(".")[1] for op in comm} >= {"allreduce_", "_allgather_base_", "_reduce_scatter_base_"}
    for op in comm + ["aten.mm.default", "aten._scaled_dot_product_flash_attention_for_cpu.default"]:
        assert counts[op] == base[op], (op, counts[op], base[op])
    assert counts["aten.silu.default"] > base["aten.silu.default"]


@multi_rank(world_size=2, timeout=240)
def test_fsdp_policies_bit_identical():
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = llama()
    rank = dist.get_rank()

    def batch(step):
        ids, labels = tokens(ref.config.vocab_size, step, b=4)
        return ids.chunk(2)[rank], labels.chunk(2)[rank]

    def build(name=None):
        model = copy.deepcopy(ref)
        plan = with_policy(model, name) if name else None
        for layer in model.model.layers:
            hp.fully_shard(layer, mesh=mesh)
        hp.fully_shard(model, mesh=mesh)
        return model, plan

    want = train(build()[0], batch=batch)
    single = train(copy.deepcopy(ref), batch=lambda s: tokens(ref.config.vocab_size, s, b=4))
    mean = want[0][0].clone()
    dist.all_reduce(mean)
    torch.testing.assert_close(mean / 2, single[0][0], rtol=1e-5, atol=1e-5)
    for name in DIST_POLICIES:
        model, plan = build(name)
        assert_bit_identical(train(model, batch=batch), want, f"FSDP {name}")
        assert all(isinstance(p, hp.DTensor) for p in model.parameters())
        if plan.manager is not None:
            assert plan.manager.live_files() == []
            plan.manager.close()


@multi_rank(world_size=2, timeout=240)
def test_moe_all_to_all_is_never_recomputed():
    """Expert parallel over 2 ranks (debug_moe): every policy bit-identical, and under the op policy the
    dispatch/combine all-to-alls run exactly as often as without checkpointing."""
    import torch
    import torch.distributed as dist
    import hyper_parallel as hp
    from hyper_parallel.models.llama3 import parallelize_llama_moe
    mesh = hp.init_device_mesh("cpu", (2,))
    ref = llama("debug_moe")
    rank = dist.get_rank()

    def batch(step):
        ids, labels = tokens(ref.config.vocab_size, step, b=4)
        return ids.chunk(2)[rank], labels.chunk(2)[rank]

    def build(name=None):
        model = parallelize_llama_moe(copy.deepcopy(ref), mesh, ep=2)
        return model, (with_policy(model, name) if name else None)

    want = train(build()[0], batch=batch)
    for name in ("selective-op", "full", "swap"):
        model, plan = build(name)
        assert_bit_identical(train(model, batch=batch), want, f"MoE {name}")
        if plan.manager is not None:
            plan.manager.close()
    ids, labels = batch(0)
    base, _ = _count_step(build()[0], ids, labels)
    model, _ = build("selective-op")
    counts, _ = _count_step(model, ids, labels)
    assert base["c10d.alltoall_base_.default"] > 0
    for op in [op for op in base if op.startswith("c10d.")] + ["aten.topk.default"]:
        assert counts[op] == base[op], (op, counts[op], base[op])
    assert counts["aten.silu.default"] > base["aten.silu.default"]


@multi_rank(world_size=2, timeout=240)
def test_pipeline_swap_follows_the_schedule():
    """pipeline_llama 1F1B, 2 stages, 4 microbatches: each stage swaps the activations of the
    microbatches waiting for backward; gradients bit-identical to the same pipeline without swap;
    prefetches issued in the order the schedule runs the backwards."""
    import tempfile
    import torch
    import torch.distributed as dist
    import hyper_parallel.activation as act
    from hyper_parallel.activation._torch.pipeline import backward_order
    from hyper_parallel.models.llama3 import LlamaConfig, LlamaForCausalLM, pipeline_llama
    rank = dist.get_rank()
    torch.manual_seed(0)
    ref = LlamaForCausalLM(LlamaConfig(num_hidden_layers=4))
    g = torch.Generator().manual_seed(3)
    ids, labels = torch.randint(0, 256, (4, 16), generator=g), torch.randint(0, 256, (4, 16), generator=g)

    def run(swap_dir=None):
        sched, parts = pipeline_llama(copy.deepcopy(ref), schedule="1F1B", n_microbatches=4, first_stage_less=0,
                                      last_stage_less=0)
        manager = None
        if swap_dir is not None:
            manager = act.SwapManager("disk", swap_dir, min_bytes=1024, fusion_bytes=1 << 20)
            for part in parts:
                act.apply_activation_policy(part, {"mode": "swap"}, manager=manager)
            act.swap_pipeline_schedule(sched, manager)
        losses = []
        sched.step(ids if rank == 0 else None, target=labels if rank == 1 else None, losses=losses)
        grads = {n: p.grad.clone() for part in parts for n, p in part.named_parameters()}
        return [(torch.stack(losses) if losses else torch.zeros(1), grads)], manager, sched

    want, _, _ = run()
    with tempfile.TemporaryDirectory() as tmp:
        got, manager, sched = run(tmp)
        assert_bit_identical(got, want, f"pipeline swap rank {rank}")
        order = backward_order(sched.pipeline_order[rank])
        layers = [n for part in sched._stages for n in (f"model.layers.{i}" for i in range(4))
                  if n + ".input_layernorm.weight" in dict(part.submod.named_parameters())]
        expected = [(layer, key) for key in order for layer in reversed(layers)]
        assert manager.backward_log == expected, (manager.backward_log, expected)
        assert manager.prefetch_log == expected, (manager.prefetch_log, expected)
        assert manager.stats.bytes_out > 0 and os.listdir(tmp) == []
        manager.close()
