# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: trainer and checkpoint robustness — the MFU formula, the intra-op thread setting, the safetensors header
checksum (one flipped byte found by ``load`` and ``hp-ckpt inspect --verify``), resuming past a damaged latest
checkpoint, and a pinned damaged checkpoint stopping ``hp-train`` with exit 2 and one line before any rank."""
import os
import struct
import subprocess
import sys
import textwrap

import pytest

from hyper_parallel.trainer.config import intra_op_threads
from hyper_parallel.trainer.mfu import flops_per_token, mfu, peak_from_single_thread

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_flops_per_token_formula():
    """6 N_matmul + 12 L H S by hand: the input embedding and the experts a token is not routed to do no matmul."""
    # dense, untied: N = 1000 of which 200 embedding; 2 layers, hidden 8, seq 16 -> 6*800 + 12*2*8*16
    assert flops_per_token(1000, 2, 8, 16, n_embedding=200) == 6 * 800 + 3072
    # tied embedding (counted as the output projection): nothing subtracted
    assert flops_per_token(1000, 2, 8, 16) == 6 * 1000 + 3072
    # MoE: 600 routed-expert parameters over 8 experts, top-2 -> 3/4 of them idle (450)
    assert flops_per_token(1000, 2, 8, 16, n_embedding=200, n_routed_experts=600, top_k=2, num_experts=8) == \
        6 * (1000 - 200 - 450) + 3072
    with pytest.raises(ValueError, match="top_k"):
        flops_per_token(1000, 2, 8, 16, n_routed_experts=600, top_k=0, num_experts=8)
    with pytest.raises(ValueError, match="exceed"):
        flops_per_token(100, 2, 8, 16, n_embedding=200)


def test_mfu_formula():
    """A step that did exactly the ranks' peak work in its time is 1.0; more ranks or more time lower it; the
    peak scales with the threads."""
    per_token, tokens, peak = 1e6, 512, 1e9
    seconds = per_token * tokens / peak  # one rank at its peak
    assert mfu(per_token, tokens, seconds, 1, peak) == pytest.approx(1.0)
    assert mfu(per_token, tokens, seconds, 2, peak) == pytest.approx(0.5)  # the same work spread over 2 ranks' time
    assert mfu(per_token, tokens, 2 * seconds, 1, peak) == pytest.approx(0.5)
    assert mfu(per_token, tokens, seconds, 1, 0.0) == 0.0 and mfu(per_token, tokens, 0.0, 1, peak) == 0.0
    assert peak_from_single_thread(5e9, 4) == 2e10 and peak_from_single_thread(5e9, 0) == 5e9


def test_measured_peak_is_single_thread_times_threads():
    """The backend's peak is measured on one thread (a multi-threaded measurement on a shared CPU is what read
    590 %) and restores the caller's thread count."""
    import torch
    from hyper_parallel.trainer._torch.backend import measure_peak_flops
    torch.set_num_threads(2)
    seen = []
    real = torch.mm

    def spy(a, b):
        seen.append(torch.get_num_threads())
        return real(a, b)
    try:
        torch.mm = spy
        one = measure_peak_flops(size=128, repeat=4, threads=3)
    finally:
        torch.mm = real
    assert seen == [1] * 5 and torch.get_num_threads() == 2, seen  # warm-up + 4 timed runs, all on one thread
    assert one > 3 * 1e8  # any CPU of the last 20 years does 0.1 GFLOP/s per thread


def test_intra_op_threads_setting_env_and_default():
    assert intra_op_threads(3, {"OMP_NUM_THREADS": "1"}, 8, 2) == 3          # job.threads wins
    assert intra_op_threads(0, {"OMP_NUM_THREADS": "1"}, 8, 2) == 1          # then the environment
    assert intra_op_threads(0, {"OMP_NUM_THREADS": " 6 "}, 8, 2) == 6
    assert intra_op_threads(0, {"OMP_NUM_THREADS": "x"}, 8, 2) == 4          # ignored when not a count
    assert intra_op_threads(0, {}, 8, 2) == 4 and intra_op_threads(0, {}, 1, 4) == 1 and intra_op_threads(0, {}, None, 1) == 1


def _save_three(folder):
    import torch
    from hyper_parallel.checkpoint import CheckpointManager
    state = {"w": torch.zeros(4, 3), "b": torch.zeros(5)}
    mgr = CheckpointManager(folder, interval=1, keep_latest_k=0, states=state)
    for step in (1, 2, 3):
        state["w"].fill_(step)
        state["b"].fill_(-step)
        mgr.save(step)
    mgr.wait()
    return mgr, state


def _data_file(step_dir):
    name, = [n for n in os.listdir(step_dir) if n.endswith(".safetensors")]
    return os.path.join(step_dir, name)


def _flip(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x01]))


def test_flipped_header_byte_is_found_by_load_and_verify(tmp_path):
    """One flipped byte inside a shard's JSON header (the ``safetensors`` library can no longer read the file):
    ``load`` raises ``CheckpointCorruptError`` naming the file and the header; ``hp-ckpt inspect --verify``
    reports it and exits non-zero (before: every checksum matched)."""
    import safetensors
    import torch
    from click.testing import CliRunner
    from hyper_parallel import checkpoint as ckpt
    from hyper_parallel.checkpoint.cli import cli
    from hyper_parallel.checkpoint.format import CheckpointCorruptError
    mgr, _ = _save_three(str(tmp_path / "ck"))
    step3 = mgr.checkpoint_path(3)
    ok = CliRunner().invoke(cli, ["inspect", step3, "--verify"], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    path = _data_file(step3)
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        header = fh.read(n)
    _flip(path, 8 + header.index(b'"shape"') + 1)  # "shape" -> "rhape": valid JSON, no longer safetensors
    with pytest.raises(Exception):
        with safetensors.safe_open(path, framework="pt") as fh:
            [fh.get_tensor(k) for k in fh.keys()]  # pylint: disable=expression-not-assigned
    target = {"w": torch.empty(4, 3), "b": torch.empty(5)}
    with pytest.raises(CheckpointCorruptError, match="header checksum mismatch") as err:
        ckpt.load(target, checkpoint_id=step3)
    assert err.value.path == path
    bad = CliRunner().invoke(cli, ["inspect", step3, "--verify"], catch_exceptions=False)
    assert bad.exit_code != 0 and "header checksum mismatch" in bad.output, bad.output


@pytest.mark.parametrize("where", ["header", "data"])
def test_resume_skips_a_damaged_latest_checkpoint(tmp_path, where):
    """``CheckpointManager.load()`` with step 3 damaged (a header byte, or a tensor byte caught by its chunk
    checksum) loads step 2 with one warning and lists what it skipped; pinned ``load(step=3)`` raises."""
    import torch
    from hyper_parallel.checkpoint import CheckpointManager
    from hyper_parallel.checkpoint.format import CheckpointCorruptError
    folder = str(tmp_path / "ck")
    mgr, _ = _save_three(folder)
    path = _data_file(mgr.checkpoint_path(3))
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
    _flip(path, 8 + n // 2 if where == "header" else os.path.getsize(path) - 3)
    state = {"w": torch.empty(4, 3), "b": torch.empty(5)}
    again = CheckpointManager(folder, interval=1, states=state)
    with pytest.warns(RuntimeWarning, match="skipping the damaged checkpoint of step 3") as caught:
        assert again.load() == 2
    assert len([w for w in caught if "skipping" in str(w.message)]) == 1
    assert torch.equal(state["w"], torch.full((4, 3), 2.0)) and torch.equal(state["b"], torch.full((5,), -2.0))
    assert [s for s, _ in again.skipped] == [3] and path in again.skipped[0][1]
    with pytest.raises(CheckpointCorruptError):
        again.load(step=3)


def test_hp_train_pinned_damaged_checkpoint_exits_2_with_one_line(tmp_path):
    """``hp-train --checkpoint.load_step 3`` on a damaged step 3: exit 2, one line naming the key and the file,
    before torchrun starts; with the latest damaged and nothing pinned, one warning line (then the launch)."""
    mgr, _ = _save_three(str(tmp_path / "ck"))
    path = _data_file(mgr.checkpoint_path(3))
    _flip(path, 12)
    cfg = tmp_path / "c.toml"
    cfg.write_text(textwrap.dedent(f"""
        [job]
        out_dir = "{tmp_path / 'run'}"
        [checkpoint]
        enable = true
        folder = "{tmp_path / 'ck'}"
        resume = true
        load_step = 3
    """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    res = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", str(cfg)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    lines = [ln for ln in (res.stdout + res.stderr).splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stdout + res.stderr
    assert lines[0].startswith("hp-train: error:") and "checkpoint.load_step = 3" in lines[0] and path in lines[0]
    res = subprocess.run([sys.executable, "-m", "hyper_parallel.trainer.cli", "--config", str(cfg),
                          "--checkpoint.load_step", "7"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 2 and "no complete checkpoint of that step" in res.stderr, res.stderr
    assert "[1, 2, 3]" in res.stderr
