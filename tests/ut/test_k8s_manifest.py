# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: examples/k8s/pytorchjob.yaml against the Kubeflow training operator's v1 API schema, offline: the
``kubeflow-training`` SDK's models (generated from the operator's OpenAPI spec) and the ``kubernetes`` client's
(``V1PodTemplateSpec`` and below) give every object's fields and types; every key of the manifest must be a field
of its object with a value of the field's type, and the SDK's deserializer must build the typed object (its
required fields set). A cluster or ``kubectl`` is not needed (nor available here)."""
import os
import re

import yaml

from kubeflow.training import models as kf_models  # the operator's API (dev extra: kubeflow-training)
from kubernetes.client import models as k8s_models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(ROOT, "examples", "k8s", "pytorchjob.yaml")
_PRIMITIVE = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object, "datetime": str}


def _model(name):
    return getattr(kf_models, name, None) or getattr(k8s_models, name)


def schema_problems(value, type_name, where="$"):
    """Every key or value of ``value`` that the schema type ``type_name`` does not allow."""
    if type_name.startswith("list["):
        if not isinstance(value, list):
            return [f"{where}: expected a list"]
        return [p for i, v in enumerate(value) for p in schema_problems(v, type_name[5:-1], f"{where}[{i}]")]
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(value, dict):
            return [f"{where}: expected a mapping"]
        return [p for k, v in value.items() for p in schema_problems(v, m.group(1), f"{where}.{k}")]
    if type_name in _PRIMITIVE:
        ok = isinstance(value, _PRIMITIVE[type_name]) and not (type_name == "int" and isinstance(value, bool))
        return [] if ok else [f"{where}: expected {type_name}, got {value!r}"]
    return _object_problems(value, type_name, where)


def _object_problems(value, type_name, where):
    cls = _model(type_name)
    if not isinstance(value, dict):
        return [f"{where}: expected a {type_name} mapping"]
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    problems = []
    for key, sub in value.items():
        if key not in by_json:
            problems.append(f"{where}.{key}: not a field of {type_name} (fields: {sorted(by_json)})")
            continue
        problems += schema_problems(sub, cls.openapi_types[by_json[key]], f"{where}.{key}")
    return problems


def _load():
    with open(MANIFEST, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def test_manifest_matches_the_pytorchjob_schema():
    doc = _load()
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "PyTorchJob"
    assert schema_problems(doc, "KubeflowOrgV1PyTorchJob") == []
    # the typed object builds (the generated models check their required fields)
    from kubeflow.training.api_client import ApiClient  # pylint: disable=import-outside-toplevel
    job = ApiClient()._ApiClient__deserialize(doc, "KubeflowOrgV1PyTorchJob")  # pylint: disable=protected-access
    specs = job.spec.pytorch_replica_specs
    assert sorted(specs) == ["Master", "Worker"] and job.spec.elastic_policy.rdzv_backend == "c10d"
    for spec in specs.values():
        container = spec.template.spec.containers[0]
        assert container.command == ["python", "-m", "torch.distributed.run"]
        assert container.args[:2] == ["-m", "hyper_parallel.trainer.cli"]
        assert container.resources.limits["nvidia.com/gpu"] == "8"


def test_the_checker_finds_wrong_keys_and_types():
    doc = _load()
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["replica"] = 1  # misspelled
    doc["spec"]["runPolicy"]["backoffLimit"] = "three"
    doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resource"] = {}
    problems = schema_problems(doc, "KubeflowOrgV1PyTorchJob")
    assert len(problems) == 3, problems
    assert any("Worker.replica: not a field of KubeflowOrgV1ReplicaSpec" in p for p in problems)
    assert any("backoffLimit: expected int" in p for p in problems)
    assert any("containers[0].resource: not a field of V1Container" in p for p in problems)
