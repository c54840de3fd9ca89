# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the YAML op registry — validation errors name file and key; register_op; external YAML."""
import textwrap

import pytest

from hyper_parallel.core.ops import registry as reg
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.registry import Registry, RegistryError, load_yaml_file


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_builtin_registry_loads_and_every_entry_resolves():
    r = reg.get_registry()
    r.validate()
    assert len(r) >= 150
    assert "torch.add" in r and "torch.nn.functional.linear" in r
    assert r.entries["Tensor.add_"].options == {"partial": "additive", "inplace": True}


def test_default_block_merges_module_rule_and_options(tmp_path):
    path = _write(tmp_path, "ops.yaml", """
        __default__:
          module: hyper_parallel.core.ops.rules.elementwise
          rule: ElementwiseRule
          options: {partial: none}
        torch.foo: {options: {inplace: true}}
        torch.bar: {}
    """)
    entries = {e.name: e for e in load_yaml_file(path)}
    assert entries["torch.foo"].options == {"partial": "none", "inplace": True}
    assert entries["torch.bar"].rule == "ElementwiseRule"
    assert isinstance(entries["torch.bar"].rule_instance(), ElementwiseRule)


@pytest.mark.parametrize("text, message", [
    ("torch.x: {rule: ElementwiseRule, module: m, colour: red}\n", r"ops.yaml: torch.x: unknown field\(s\) \['colour'\]"),
    ("torch.x: [1, 2]\n", r"ops.yaml: torch.x: expected a mapping with 'rule'"),
    ("torch.x: {rule: ElementwiseRule}\n", r"ops.yaml: torch.x: needs 'rule' and 'module'"),
    ("- a\n- b\n", r"ops.yaml: expected a mapping of op names"),
    ("torch.x: {rule: [unclosed\n", r"ops.yaml: invalid YAML"),
    ("__default__: {nope: 1}\n", r"ops.yaml: __default__: unknown field"),
])
def test_broken_files_are_clear_errors(tmp_path, text, message):
    path = _write(tmp_path, "ops.yaml", text)
    with pytest.raises(RegistryError, match=message):
        load_yaml_file(path)


def test_missing_module_class_and_duplicates(tmp_path):
    bad_mod = _write(tmp_path, "a.yaml", "torch.x: {rule: R, module: no.such.module}\n")
    r = Registry()
    r.load_paths([bad_mod])
    with pytest.raises(RegistryError, match=r"a.yaml: torch.x: module 'no.such.module' cannot be imported"):
        r.validate()
    bad_cls = _write(tmp_path, "b.yaml",
                     "torch.y: {rule: Nope, module: hyper_parallel.core.ops.rules.elementwise}\n")
    r = Registry()
    r.load_paths([bad_cls])
    with pytest.raises(RegistryError, match=r"b.yaml: torch.y: hyper_parallel.core.ops.rules.elementwise.Nope "
                                            r"is not an OpRule class"):
        r.validate()
    d1 = _write(tmp_path, "d1.yaml", "torch.z: {rule: ElementwiseRule, module: hyper_parallel.core.ops.rules.elementwise}\n")
    d2 = _write(tmp_path, "d2.yaml", "torch.z: {rule: ElementwiseRule, module: hyper_parallel.core.ops.rules.elementwise}\n")
    r = Registry()
    with pytest.raises(RegistryError, match=r"d2.yaml: torch.z: already registered in .*d1.yaml"):
        r.load_paths([d1, d2])
    with pytest.raises(RegistryError, match="registry path does not exist"):
        Registry().load_paths([tmp_path / "missing.yaml"])


def test_bad_rule_options_are_rejected():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['colour'\] for ElementwiseRule"):
        ElementwiseRule("torch.add", colour="red")
    with pytest.raises(ValueError, match="option partial='sometimes'"):
        ElementwiseRule("torch.add", partial="sometimes")


def test_register_op_and_environment_yaml(tmp_path, monkeypatch):
    extra = _write(tmp_path, "extra.yaml", """
        __default__: {module: hyper_parallel.core.ops.rules.elementwise, rule: ElementwiseRule}
        torch.special.expit: {}
    """)
    monkeypatch.setenv(reg.ENV_VAR, str(extra))
    monkeypatch.setattr(reg, "_REGISTRY", None)
    monkeypatch.setattr(reg, "_PENDING", [])
    entry = reg.register_op("torch.special.psi", ElementwiseRule)
    assert entry.module == "hyper_parallel.core.ops.rules.elementwise"
    r = reg.get_registry()
    assert "torch.special.expit" in r and "torch.special.psi" in r
    with pytest.raises(RegistryError, match="already registered"):
        reg.register_op("torch.special.psi", ElementwiseRule)
    reg.register_op("torch.special.psi", ElementwiseRule, options={"partial": "none"}, replace=True)
    with pytest.raises(RegistryError, match="is not an OpRule subclass"):
        reg.register_op("torch.special.exp2", dict)
    with pytest.raises(RegistryError, match="pass a rule class, or a class name with module="):
        reg.register_op("torch.special.exp2", "ElementwiseRule")
