# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The optimizer check that runs inside the MindSpore launch of ``checks.run_ops_tp_suite``.

A TP MLP (fc1 Colwise: weight ``Shard(0)``, fc2 Rowwise: weight ``Shard(1)``) and a one-process copy
get ``get_hyper_optimizer`` chains (Muon for the two weights, AdamW for the biases) and the WSD-less
linear schedule; 3 steps with the same full gradients (seeded; each rank gets its shards). The sharded
parameters, gathered, must equal the one-process ones (Newton–Schulz sees identical float32 inputs on
the owner), the one-process Muon must follow a float64 NumPy Muon to 1e-4, and each rank must have
orthogonalised exactly one of the two matrices.
"""
import numpy as np

NS = (3.4445, -4.7750, 2.0315)


def _np_muon(w, grads, lr_of, momentum=0.95, wd=0.1):
    """Muon (Nesterov, match_rms_adamw) in float64 NumPy over a list of gradients."""
    a, b, c = NS
    buf = np.zeros_like(w)
    for step, g in enumerate(grads):
        buf = buf + (1 - momentum) * (g - buf)
        u = g + momentum * (buf - g)
        x = u.T if u.shape[0] > u.shape[1] else u
        x = x / max(np.linalg.norm(x), 1e-7)
        for _ in range(5):
            gram = x @ x.T
            x = a * x + (b * gram + c * gram @ gram) @ x
        o = x.T if u.shape[0] > u.shape[1] else x
        lr = lr_of(step)
        w = w * (1 - lr * wd) - lr * 0.2 * np.sqrt(max(w.shape)) * o
    return w


def optim_check(mesh):
    """AdamW + Muon (a get_hyper_optimizer chain) on MindSpore TP parameters vs one process and NumPy."""
    import mindspore as ms
    from hyper_parallel.optim import lr_factor
    from hyper_parallel.optim.api import get_hyper_lr_scheduler, get_hyper_optimizer
    from hyper_parallel.optim._mindspore.optimizers import AdamW, Muon, parameter_specs
    from hyper_parallel.platform.mindspore.dtensor import DTensor
    from hyper_parallel.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    from tests.st.mindspore.checks import _close, _local_of, _mlp
    ref, tp = _mlp(), _mlp()
    start = {p.name: p.value().asnumpy().astype(np.float64) for p in ref.trainable_params()}
    parallelize_module(tp, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    specs = parameter_specs(tp)
    assert sorted(specs) == ["fc1.bias", "fc1.weight", "fc2.weight"], sorted(specs)
    cfg = {"name": "muon", "lr": 0.01, "weight_decay": 0.1, "warmup_steps": 1, "decay": "linear", "total_steps": 4}
    chains = {"tp": get_hyper_optimizer(tp, cfg), "ref": get_hyper_optimizer(ref, cfg)}
    scheds = {k: get_hyper_lr_scheduler(v, cfg) for k, v in chains.items()}
    for chain in chains.values():
        assert [type(o) for o in chain.optimizers] == [Muon, AdamW], chain.optimizers
        assert [p.name for p in chain.optimizers[0].parameters] == ["fc1.weight", "fc2.weight"]
    rng = np.random.default_rng(21)
    shapes = {p.name: tuple(p.shape) for p in ref.trainable_params()}
    history = {n: [] for n in shapes}
    for step in range(3):
        full = {n: rng.standard_normal(s).astype(np.float32) for n, s in sorted(shapes.items())}
        for n, g in full.items():
            history[n].append(g.astype(np.float64))
        for label, chain in chains.items():
            grads = []
            for p in chain.parameters:
                g = ms.Tensor(full[p.name])
                spec = specs.get(p.name) if label == "tp" else None
                grads.append(_local_of(g, spec, mesh.get_coordinate()) if spec is not None else g)
            chain.step(grads)
            scheds[label].step()
    muon = chains["tp"].optimizers[0]
    assert muon.last_step_stats["matrices"] == 1, muon.last_step_stats  # one of the two matrices per rank
    ref_params = {p.name: p for p in ref.trainable_params()}
    for p in tp.trainable_params():
        got = DTensor(p.value(), specs[p.name]).full_tensor() if p.name in specs else p.value()
        _close(got, ref_params[p.name].value(), f"{p.name} after 3 chained steps (sharded vs one process)")
    for name in ("fc1.weight", "fc2.weight"):
        want = _np_muon(start[name], history[name], lambda s: 0.01 * lr_factor(s, warmup_steps=1, decay="linear",
                                                                                 total_steps=4))
        np.testing.assert_allclose(ref_params[name].value().asnumpy(), want, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{name}: MindSpore Muon vs float64 NumPy Muon")
