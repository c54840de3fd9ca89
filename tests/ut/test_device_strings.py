# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: library code takes its device from the mesh (or the tensors, or the platform), never from a hard-coded
``"cpu"`` / ``"cuda"`` / ``"npu"``: every such string literal in ``hyper_parallel/`` outside a comparison
(``t.device.type == "cpu"`` asks, it does not decide) must be on the allowlist below with the reason it is right
there. Plus the device helpers with a device type that is not the CPU (``meta``; a GPU reported by a stand-in
``torch.cuda.is_available``): what a machine with an accelerator gets."""
import ast
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEVICE_STRINGS = {"cpu", "cuda", "npu"}

#: (file, enclosing function) -> why a device string literal is right there
ALLOWLIST = {
    ("hyper_parallel/activation/_torch/apply.py", "measure_layers"): "fallback device of a model without parameters",
    ("hyper_parallel/activation/_torch/swap.py", "_write_disk"): "swap to disk goes through host memory",
    ("hyper_parallel/checkpoint/_torch/stateful.py", "state_dict"): "the CUDA RNG state is saved by name",
    ("hyper_parallel/checkpoint/_torch/stateful.py", "load_state_dict"): "the CUDA RNG state is restored by name",
    ("hyper_parallel/checkpoint/_torch/storage.py", "_write_tensors"): "files are written from host memory",
    ("hyper_parallel/devtools/op_coverage.py", "_mesh"): "dev tool: OpInfo coverage runs on CPU ranks",
    ("hyper_parallel/devtools/composition.py", "full_parameters"): "dev tool: parameters compared on the host",
    ("hyper_parallel/devtools/op_coverage.py", "_op_samples"): "dev tool: OpInfo samples built on the CPU",
    ("hyper_parallel/testing/op_cases.py", "_opinfo_dense"): "test data: OpInfo samples built on the CPU",
    ("hyper_parallel/testing/op_parity.py", "check_op"): "test harness: parity against a CPU reference",
    ("hyper_parallel/fsdp/_mindspore/fully_shard.py", "_default_mesh"): "MindSpore backend here: CPU only",
    ("hyper_parallel/fsdp/_mindspore/replicate.py", "_default_group"): "MindSpore backend here: CPU only (the "
                                                                       "same default mesh as fully_shard)",
    ("hyper_parallel/trainer/_mindspore/backend.py", "init_distributed"): "MindSpore trainer is CPU-only "
                                                                          "(check_mindspore_config)",
    ("hyper_parallel/platform/mindspore/platform.py", "__init__"): "MindSpore device target default",
    ("hyper_parallel/platform/mindspore/platform.py", "init_process_group"): "Ascend device target by name",
    ("hyper_parallel/fsdp/_torch/fully_shard.py", "_device_of"): "a cpu mesh's device",
    ("hyper_parallel/fsdp/_torch/unit.py", "__init__"): "CPU offload keeps shards in host memory",
    ("hyper_parallel/kernels/_torch/build.py", "sources"): "source folder names csrc/cpu and csrc/cuda",
    ("hyper_parallel/models/_torch/init.py", "init_parameters"): "fallback of a model without DTensor parameters",
    ("hyper_parallel/optim/_torch/clip.py", "_total"): "gloo reduces host tensors; fallback without gradients",
    ("hyper_parallel/pipeline/_torch/stage.py", "__init__"): "PipelineStage's default when no device is given",
    ("hyper_parallel/platform/torch/collectives.py", "group_timeout_text"): "names the backends' devices",
    ("hyper_parallel/platform/torch/cross_mesh.py", "run_copy"): "a rank outside the source mesh receives on host",
    ("hyper_parallel/platform/torch/device.py", "default_device_type"): "the one place the default is decided",
    ("hyper_parallel/platform/torch/platform.py", "default_device_type"): "gloo means cpu, nccl cuda",
    ("hyper_parallel/trainer/_torch/backend.py", "__init__"): "placeholder until init_distributed reads the mesh",
}


def device_literals(path):
    """(enclosing function, line, value) of each device string literal of ``path`` outside a comparison and
    outside a dict display (tables keyed by device type)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and node.value in DEVICE_STRINGS):
            continue
        up, func = parents.get(node), None
        if isinstance(up, ast.Dict):
            continue
        while up is not None and not isinstance(up, ast.Compare):
            if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)) and func is None:
                func = up.name
            up = parents.get(up)
        if up is None:
            found.append((func or "<module>", node.lineno, node.value))
    return found


def test_no_hard_coded_device_outside_the_allowlist():
    hits, used = [], set()
    for path in sorted((ROOT / "hyper_parallel").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for func, line, value in device_literals(path):
            if (rel, func) in ALLOWLIST:
                used.add((rel, func))
            else:
                hits.append(f"{rel}:{line} ({func}): {value!r} - take the device from the mesh or the tensors")
    assert not hits, "\n".join(hits)
    assert not set(ALLOWLIST) - used, f"stale allowlist entries: {sorted(set(ALLOWLIST) - used)}"


def test_the_scan_finds_a_hard_coded_device(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f(t, mesh):\n    if t.device.type == 'cpu':\n        pass\n"
                   "    return init_device_mesh('cpu', (2,)), {'cpu': 1}\n", encoding="utf-8")
    assert device_literals(src) == [("f", 4, "cpu")]


def test_device_helpers_with_other_device_types(monkeypatch):
    import torch
    from hyper_parallel.platform.torch import device
    assert device.local_device("meta") == torch.device("meta")
    assert device.local_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("HYPER_PARALLEL_DEVICE", raising=False)
    assert device.default_device_type() == "cuda"
    monkeypatch.setenv("HYPER_PARALLEL_DEVICE", "cpu")
    assert device.default_device_type() == "cpu"
    assert os.environ["HYPER_PARALLEL_DEVICE"] == "cpu"



def test_device_check_script_without_a_gpu_says_so_and_exits_0():
    import subprocess
    import sys
    res = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_check.sh")], capture_output=True, text=True,
                         env=dict(os.environ, PYTHON=sys.executable), timeout=120, check=False)
    assert res.returncode == 0 and res.stdout.strip().splitlines() == [
        "device_check: no CUDA GPU on this machine (torch.cuda.is_available() is False); nothing to check"], res
