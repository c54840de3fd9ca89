# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT (one process, torch): Muon against ``torch.optim.Muon``, the LR schedulers against their formulas and
torch's own schedulers, the factories' documented assignment, the chain's state dict, plain-tensor clipping."""
import copy
import math

import pytest
import torch

from hyper_parallel.optim import (ChainedOptimizer, Muon, OptimConfig, clip_grad_norm_, get_hyper_lr_scheduler,
                                  get_hyper_optimizer, get_optimizer_state_dict, lr_factor, set_optimizer_state_dict)
from hyper_parallel.optim._torch.muon import adjusted_lr, newton_schulz

SHAPES = [(8, 16), (16, 8), (8, 16), (5, 5), (32, 12), (1, 7)]


def _params(seed=0, shapes=SHAPES, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(dtype)) for s in shapes]


def _grads(step, shapes=SHAPES):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) for s in shapes]


@pytest.mark.parametrize("mode,nesterov,wd", [("match_rms_adamw", True, 0.1), ("original", True, 0.0),
                                              ("match_rms_adamw", False, 0.05)])
def test_muon_equals_torch_muon_for_5_steps(mode, nesterov, wd):
    ours, theirs = _params(), _params()
    a = Muon(ours, lr=0.02, weight_decay=wd, adjust_lr=mode, nesterov=nesterov)
    b = torch.optim.Muon(theirs, lr=0.02, weight_decay=wd, adjust_lr_fn=mode, nesterov=nesterov)
    for step in range(5):
        for p, q, g in zip(ours, theirs, _grads(step)):
            p.grad, q.grad = g.clone(), g.clone()
        a.step()
        b.step()
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(a.state[p]["momentum_buffer"], b.state[q]["momentum_buffer"], rtol=0, atol=0)
    stats = a.last_step_stats
    assert stats["matrices"] == len(SHAPES) and stats["sent_bytes"] == 0


@pytest.mark.parametrize("mode", ["spectral", None])
def test_muon_modes_torch_lacks_scale_the_oracle_update_exactly_and_match_the_closed_form_rms(mode):
    # float64 parameters: the step difference p - p0 is then exact enough to compare ratios at 1e-9
    ours, theirs = _params(dtype=torch.float64), _params(dtype=torch.float64)
    a = Muon(ours, lr=0.01, adjust_lr=mode)
    b = torch.optim.Muon(theirs, lr=0.01, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
    for step in range(5):
        before = [p.detach().clone() for p in ours]
        before_t = [q.detach().clone() for q in theirs]
        for p, q, g in zip(ours, theirs, _grads(step)):
            p.grad, q.grad = g.double(), g.double()
        a.step()
        b.step()
        for p, q, p0, q0 in zip(ours, theirs, before, before_t):
            rows, cols = p.shape
            ratio = adjusted_lr(1.0, mode, rows, cols) / adjusted_lr(1.0, "match_rms_adamw", rows, cols)
            delta, oracle = p.detach() - p0, q.detach() - q0
            torch.testing.assert_close(delta, oracle * ratio, rtol=1e-9, atol=1e-15)
            # closed form: an orthogonal rows x cols update has RMS 1/sqrt(max(rows, cols)); NS is approximate
            want = adjusted_lr(0.01, mode, rows, cols) / math.sqrt(max(rows, cols))
            rms = delta.pow(2).mean().sqrt().item()
            if min(rows, cols) > 1:
                assert abs(rms / want - 1) < 0.3, (mode, p.shape, rms, want)


def test_3d_expert_weights_equal_torch_muon_per_expert():
    g = torch.Generator().manual_seed(3)
    w = torch.nn.Parameter(torch.randn(4, 8, 12, generator=g))
    experts = [torch.nn.Parameter(w.detach()[e].clone()) for e in range(4)]
    a = Muon([w], lr=0.02, weight_decay=0.1)
    b = torch.optim.Muon(experts, lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    for step in range(5):
        grad = torch.randn(4, 8, 12, generator=g)
        w.grad = grad.clone()
        for e, p in enumerate(experts):
            p.grad = grad[e].clone()
        a.step()
        b.step()
        torch.testing.assert_close(w.detach(), torch.stack([p.detach() for p in experts]), rtol=0, atol=0)
    assert a.last_step_stats["matrices"] == 4 and a.last_step_stats["units"] == 1  # one batched call


def test_newton_schulz_batched_equals_one_by_one():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 9, 4, generator=g)
    batched = newton_schulz(x)
    for i in range(6):
        torch.testing.assert_close(batched[i], newton_schulz(x[i:i + 1])[0], rtol=0, atol=0)
    sv = torch.linalg.svdvals(batched.float())
    assert sv.min() > 0.5 and sv.max() < 1.3  # approximately orthogonal


def test_muon_bad_arguments_are_named():
    p = [torch.nn.Parameter(torch.zeros(2, 2))]
    for kwargs, match in [({"lr": -1.0}, r"Muon\(lr\)"), ({"momentum": 1.0}, r"Muon\(momentum\)"),
                          ({"ns_steps": 0}, r"Muon\(ns_steps\)"), ({"adjust_lr": "rms"}, r"Muon\(adjust_lr\)"),
                          ({"weight_decay": -0.1}, r"Muon\(weight_decay\)")]:
        with pytest.raises(ValueError, match=match):
            Muon(p, **kwargs)
    with pytest.raises(ValueError, match=r"parameter 1 of param group 0 has shape \(3,\)"):
        Muon([torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(3))])


def _torch_equivalent(opt, kind, w, t, r):
    from torch.optim import lr_scheduler as L
    warm = L.LinearLR(opt, start_factor=1 / (w + 1), end_factor=1.0, total_iters=w)
    if kind == "cosine":
        decay = L.CosineAnnealingLR(opt, T_max=t - w, eta_min=r * 0.1)
    elif kind == "linear":
        decay = L.LinearLR(opt, start_factor=1.0, end_factor=r, total_iters=t - w)
    else:
        decay = L.ConstantLR(opt, factor=1.0, total_iters=0)
    return L.SequentialLR(opt, [warm, decay], milestones=[w])


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant"])
def test_scheduler_equals_formula_and_torch_equivalent(kind):
    w, t, r = 3, 13, 0.1
    cfg = {"lr": 0.1, "warmup_steps": w, "decay": kind, "total_steps": t, "min_lr_ratio": r}
    ours_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    torch_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    ours, theirs = get_hyper_lr_scheduler(ours_opt, cfg), _torch_equivalent(torch_opt, kind, w, t, r)
    for step in range(t + 3):
        got, want = ours_opt.param_groups[0]["lr"], torch_opt.param_groups[0]["lr"]
        formula = 0.1 * lr_factor(step, **OptimConfig.parse(cfg).scheduler_settings())
        assert got == pytest.approx(formula, rel=1e-12, abs=1e-15)
        if step <= t:  # torch's CosineAnnealingLR is periodic past T_max; ours holds the minimum
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (step, got, want)
        ours_opt.step()
        torch_opt.step()
        ours.step()
        theirs.step()


def test_wsd_scheduler_over_a_chain_scales_each_groups_own_lr():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=True))
    chain = get_hyper_optimizer(model, {"name": "muon", "lr": 1e-3, "muon_lr": 0.02})
    sched = get_hyper_lr_scheduler(chain, {"warmup_steps": 2, "decay": "wsd", "total_steps": 12,
                                           "decay_ratio": 0.5})
    seen = []
    for _ in range(13):
        seen.append([g["lr"] for g in chain.param_groups])
        chain.step()
        sched.step()
    f = [lr_factor(s, warmup_steps=2, decay="wsd", total_steps=12, decay_ratio=0.5) for s in range(13)]
    assert seen == [pytest.approx([0.02 * x, 1e-3 * x]) for x in f]
    assert [type(o).__name__ for o in chain.optimizers] == ["Muon", "AdamW"]


def test_factory_assignment_on_the_tiny_llama_lists_every_parameter():
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS
    model = LlamaForCausalLM(TINY_CONFIGS["debug"])
    chain = get_hyper_optimizer(model, {"name": "muon", "lr": 1e-3})
    names = chain.param_names
    muon = sorted(names[id(p)] for g in chain.optimizers[0].param_groups for p in g["params"])
    adamw = sorted(names[id(p)] for g in chain.optimizers[1].param_groups for p in g["params"])
    per_layer = ["mlp.down_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "self_attn.k_proj.weight",
                 "self_attn.o_proj.weight", "self_attn.q_proj.weight", "self_attn.v_proj.weight"]
    assert muon == [f"model.layers.{i}.{n}" for i in range(2) for n in per_layer]
    assert adamw == sorted(["lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"] +
                           [f"model.layers.{i}.{n}.weight" for i in range(2)
                            for n in ("input_layernorm", "post_attention_layernorm")])
    assert len(muon) + len(adamw) == len(list(model.parameters()))


def test_chained_optimizer_state_dict_round_trip_continues_bit_identically():
    from hyper_parallel.models.llama3 import LlamaForCausalLM, TINY_CONFIGS
    torch.manual_seed(0)
    cfg = {"name": "muon", "lr": 1e-3, "warmup_steps": 2, "decay": "cosine", "total_steps": 8}
    model = LlamaForCausalLM(TINY_CONFIGS["debug"])

    def train(m, opt, sched, steps, start):
        for s in range(start, start + steps):
            g = torch.Generator().manual_seed(s)
            ids, labels = torch.randint(0, 256, (2, 8), generator=g), torch.randint(0, 256, (2, 8), generator=g)
            m.loss(m(ids), labels).backward()
            opt.step()
            opt.zero_grad()
            sched.step()

    opt = get_hyper_optimizer(model, cfg)
    sched = get_hyper_lr_scheduler(opt, cfg)
    train(model, opt, sched, 2, 0)
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    named = get_optimizer_state_dict(model, opt)
    saved_sched = sched.state_dict()
    other = LlamaForCausalLM(TINY_CONFIGS["debug"])
    other.load_state_dict(saved_model)
    other_opt = get_hyper_optimizer(other, cfg)
    other_sched = get_hyper_lr_scheduler(other_opt, cfg)
    other_opt.load_state_dict(saved_opt)
    other_sched.load_state_dict(saved_sched)
    third = LlamaForCausalLM(TINY_CONFIGS["debug"])
    third.load_state_dict(saved_model)
    third_opt = get_hyper_optimizer(third, cfg)
    third_sched = get_hyper_lr_scheduler(third_opt, cfg)
    set_optimizer_state_dict(third, third_opt, copy.deepcopy(named))
    third_sched.load_state_dict(saved_sched)
    train(model, opt, sched, 2, 2)
    train(other, other_opt, other_sched, 2, 2)
    train(third, third_opt, third_sched, 2, 2)
    for (n, p), q, r in zip(model.named_parameters(), other.parameters(), third.parameters()):
        torch.testing.assert_close(q, p, rtol=0, atol=0, msg=lambda m, n=n: f"{n}: {m}")
        torch.testing.assert_close(r, p, rtol=0, atol=0, msg=lambda m, n=n: f"{n}: {m}")
    assert "model.layers.0.self_attn.q_proj.weight" in named["state"]
    assert set(named["state"]["model.layers.0.self_attn.q_proj.weight"]) == {"momentum_buffer"}
    assert set(named["state"]["lm_head.weight"]) == {"step", "exp_avg", "exp_avg_sq"}
    # torch's format, one index space: Muon's parameters first, then AdamW's
    n_muon = len(opt.optimizers[0].param_groups[0]["params"])
    assert set(saved_opt["state"]) == set(range(len(list(model.parameters()))))
    assert set(saved_opt["state"][0]) == {"momentum_buffer"} and set(saved_opt["state"][n_muon]) >= {"exp_avg"}
    with pytest.raises(ValueError, match="holds 1 param groups, this chain has 2"):
        other_opt.load_state_dict({"state": {}, "param_groups": saved_opt["param_groups"][:1]})


def test_chained_optimizer_validation_and_views():
    a = torch.nn.Parameter(torch.zeros(2, 2))
    b = torch.nn.Parameter(torch.zeros(2))
    sgd = torch.optim.SGD([a], lr=0.1)
    with pytest.raises(ValueError, match=r"belongs to optimizers\[0\] and optimizers\[1\]"):
        ChainedOptimizer([sgd, torch.optim.SGD([a], lr=0.1)])
    with pytest.raises(ValueError, match="at least one"):
        ChainedOptimizer([])
    with pytest.raises(TypeError, match=r"optimizers\[1\]"):
        ChainedOptimizer([sgd, "adam"])
    chain = ChainedOptimizer([sgd, torch.optim.AdamW([b], lr=0.01)])
    chain.param_groups[1]["lr"] = 0.5
    assert chain.optimizers[1].param_groups[0]["lr"] == 0.5
    a.grad, b.grad = torch.ones(2, 2), torch.ones(2)
    chain.step()
    assert torch.equal(a.detach(), torch.full((2, 2), -0.1)) and set(chain.state[b]) == {"step", "exp_avg",
                                                                                         "exp_avg_sq"}
    chain.zero_grad()
    assert a.grad is None and b.grad is None


def test_clip_grad_norm_plain_tensors_equals_torch_and_checks_inputs():
    for norm_type in (2.0, 1.0, float("inf")):
        for foreach in (None, False):
            ps, qs = _params(1), _params(1)
            for p, q, g in zip(ps, qs, _grads(0)):
                p.grad, q.grad = g * 3, g * 3
            want = torch.nn.utils.clip_grad_norm_(qs, 0.7, norm_type=norm_type)
            got = clip_grad_norm_(ps, 0.7, norm_type=norm_type, foreach=foreach)
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
            for p, q in zip(ps, qs):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([1.0, float("nan"), 0.0])
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm_([p], 1.0, norm_type=0)
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm_([p], -1.0)


def test_front_doors_pick_the_backend_and_name_bad_inputs():
    from hyper_parallel import optim
    assert optim.AdamW is torch.optim.AdamW and optim.Muon is Muon and optim.ChainedOptimizer is ChainedOptimizer
    with pytest.raises(TypeError, match=r"get_hyper_optimizer\(model\): expected a torch or mindspore"):
        get_hyper_optimizer(object(), {"name": "adamw"})
    with pytest.raises(ValueError, match=r"optimizer config 'name'"):
        get_hyper_optimizer(torch.nn.Linear(2, 2), {"name": "lion"})
