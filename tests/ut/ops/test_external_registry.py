# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: a user's own registry outside the package keeps working across the op-system moves.

A throw-away package ``hp_user_ext`` (its own rule module, its own YAML) is reached the three public
ways — ``$HYPER_PARALLEL_OP_YAML``, the ``hyper_parallel.ops`` entry-point group (a ``.dist-info`` on
``sys.path``) and :func:`hyper_parallel.register_op` — and each of its ops then runs on a DTensor in a
fresh interpreter (one-rank gloo group), through the user's rule, with the single-process result."""
import json
import subprocess
import sys
import textwrap

RULES = '''
from hyper_parallel.core.ops.rule import Decision, OpRule

CALLS = []


class SameLayoutRule(OpRule):
    """Element-wise: the output keeps the input's layout."""

    def infer(self, call):
        CALLS.append(call.op)
        t = call.tensors[0]
        return Decision(inputs=[None], outputs=(t.placements, t.shape))
'''

SCRIPT = '''
import json, os, sys
import torch
import hyper_parallel as hp
from hyper_parallel.core.ops.registry import get_registry
import hp_user_ext.rules as user_rules

hp.register_op("torch.special.exp2", user_rules.SameLayoutRule)
hp.init_process_group("gloo", rank=0, world_size=1, init_method="file://" + sys.argv[1])
mesh = hp.init_device_mesh("cpu", (1,))
x = torch.linspace(0.5, 1.5, 8).reshape(2, 4)  # inside psi and gammaln domain
dx = hp.distribute_tensor(x, mesh, [hp.Shard(0)])
out = {}
for name, fn in (("torch.special.psi", torch.special.psi), ("torch.special.gammaln", torch.special.gammaln),
                 ("torch.special.exp2", torch.special.exp2)):
    y = fn(dx)
    out[name] = {"source": get_registry().entries[name].source, "type": type(y).__name__,
                 "placements": [str(p) for p in y.placements],
                 "equal": bool(torch.allclose(y.full_tensor(), fn(x)))}
out["calls"] = sorted(set(user_rules.CALLS))
hp.destroy_process_group()
print(json.dumps(out))
'''


def _user_package(root):
    pkg = root / "hp_user_ext"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\n\n\ndef registry_yaml():\n    return Path(__file__).with_name('ep.yaml')\n")
    (pkg / "rules.py").write_text(textwrap.dedent(RULES))
    (pkg / "ep.yaml").write_text("torch.special.gammaln: {module: hp_user_ext.rules, rule: SameLayoutRule}\n")
    info = root / "hp_user_ext-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hp-user-ext\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hyper_parallel.ops]\nuser = hp_user_ext:registry_yaml\n")
    env_yaml = root / "env_ops.yaml"
    env_yaml.write_text("__default__: {module: hp_user_ext.rules}\ntorch.special.psi: {rule: SameLayoutRule}\n")
    return env_yaml


def test_environment_entry_point_and_register_op_rules_outside_the_package(tmp_path):
    env_yaml = _user_package(tmp_path)
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {"PYTHONPATH": str(tmp_path), "HYPER_PARALLEL_OP_YAML": str(env_yaml), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=180, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["torch.special.psi"]["source"] == str(env_yaml)
    assert out["torch.special.gammaln"]["source"].endswith("hp_user_ext/ep.yaml")
    assert out["torch.special.exp2"]["source"] == "<register_op>"
    for name in ("torch.special.psi", "torch.special.gammaln", "torch.special.exp2"):
        assert out[name] == {"source": out[name]["source"], "type": "DTensor", "placements": ["Shard(dim=0)"],
                             "equal": True}, (name, out[name])
    assert out["calls"] == ["torch.special.exp2", "torch.special.gammaln", "torch.special.psi"]
