# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""UT: the backend-free parts of ``hyper_parallel.checkpoint`` (format, safetensors streaming, objects,
retention, crash-safe publication, resharding by overlap, Hugging Face layout, FQNs) — no processes."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hyper_parallel.checkpoint import fqn, hf, objects, publish, reshard, retention
from hyper_parallel.checkpoint.format import (CheckpointCorruptError, CheckpointError, CheckpointMetadata, ChunkEntry,
                                              ObjectEntry, TensorEntry)
from hyper_parallel.checkpoint.safetensors_io import read_header, read_range, write_safetensors
from hyper_parallel.core.mesh_topology import MeshTopology
from hyper_parallel.core.placement import Replicate, Shard
from hyper_parallel.core.spec import DTensorSpec


def test_import_checkpoint_imports_no_framework():
    code = ("import sys, hyper_parallel.checkpoint as c, hyper_parallel.checkpoint.cli; "
            "assert 'torch' not in sys.modules and 'mindspore' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------- format
def _md():
    md = CheckpointMetadata(world_size=2, created_by="test")
    md.tensors["w"] = TensorEntry("float32", (3, 2), [ChunkEntry((0, 0), (2, 2), "__0_0.safetensors", "w", 80, 16, 7),
                                                      ChunkEntry((2, 0), (1, 2), "__1_0.safetensors", "w", 80, 8, 9)])
    md.objects["step"] = ObjectEntry("json", 5)
    md.objects["big"] = ObjectEntry("pickle", None, "__0_0.objects", 0, 12, 3)
    md.files = {"__0_0.safetensors": 96, "__1_0.safetensors": 88, "__0_0.objects": 12}
    md.paths = {"w": ["model", "w"]}
    return md


def test_metadata_round_trip_and_validation():
    md = _md()
    back = CheckpointMetadata.loads(md.dumps())
    assert back.to_json() == md.to_json()
    assert back.total_bytes == 24
    back.validate()


@pytest.mark.parametrize("edit,problem", [
    (lambda t: t[: len(t) // 2], "not valid JSON"),
    (lambda t: t.replace('"world_size": 2', '"world_size": 3'), "checksum mismatch"),
    (lambda t: t.replace("hyper-parallel-checkpoint", "other"), "not a hyper-parallel-checkpoint"),
])
def test_damaged_metadata_names_the_file(edit, problem):
    with pytest.raises(CheckpointCorruptError, match=problem) as info:
        CheckpointMetadata.loads(edit(_md().dumps()), "/x/metadata.json")
    assert info.value.path == "/x/metadata.json"


@pytest.mark.parametrize("chunks,problem", [
    ([((0, 0), (2, 2)), ((1, 0), (2, 2))], "exactly once"),        # overlap
    ([((0, 0), (2, 2))], "exactly once"),                         # uncovered row
    ([((0, 0), (2, 2)), ((2, 0), (2, 2))], "exceeds the shape"),  # out of bounds
])
def test_validate_rejects_bad_chunk_sets(chunks, problem):
    md = CheckpointMetadata()
    md.tensors["t"] = TensorEntry("float32", (3, 2), [ChunkEntry(o, s, "f", "t", 0, 4 * s[0] * s[1], 0)
                                                      for o, s in chunks])
    with pytest.raises(CheckpointError, match=problem):
        md.validate()


# ---------------------------------------------------------------------- safetensors streaming
def test_streamed_safetensors_reads_back_with_the_library(tmp_path):
    from safetensors.numpy import load_file
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.array([True, False, True])
    c = np.zeros((0, 5), dtype=np.int64)
    d = (np.arange(4) + 1j).astype(np.complex128)  # no safetensors dtype: stored as raw bytes
    path = str(tmp_path / "x.safetensors")
    placed = write_safetensors(path, [("a", "float32", a.shape, a), ("b", "bool", b.shape, b),
                                      ("c", "int64", c.shape, c), ("d", "complex128", d.shape, d)],
                               metadata={"format": "np"})
    loaded = load_file(path)
    assert np.array_equal(loaded["a"], a) and np.array_equal(loaded["b"], b) and loaded["c"].shape == (0, 5)
    assert loaded["d"].tobytes() == d.tobytes()
    header, start = read_header(path)
    assert header["__metadata__"] == {"format": "np"} and start % 8 == 0
    off, nbytes, crc = placed[0]
    assert bytes(read_range(path, off, nbytes, crc, "a")) == a.tobytes()
    raw = bytearray(open(path, "rb").read())
    raw[off + 3] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    with pytest.raises(CheckpointCorruptError, match="checksum mismatch for a") as info:
        read_range(path, off, nbytes, crc, "a")
    assert info.value.path == path
    with pytest.raises(CheckpointCorruptError, match="truncated"):
        read_range(path, len(raw) - 4, 16, None)
    with pytest.raises(CheckpointCorruptError, match="missing"):
        read_range(str(tmp_path / "nope"), 0, 1)


# ---------------------------------------------------------------------- objects
@pytest.mark.parametrize("value,encoding", [(5, "json"), ({"a": [1, 2.5, None, "x"]}, "json"), ((1, 2), "pickle"),
                                            ({1: "int key"}, "pickle"), (float("nan"), "pickle"), (b"raw", "pickle")])
def test_objects_round_trip(value, encoding):
    enc, payload = objects.encode_object(value)
    assert enc == encoding
    back = objects.decode_object(enc, payload)
    assert back == value or (value != value and back != back)  # NaN
    assert type(back) is type(value)


def test_objects_errors():
    with pytest.raises(TypeError, match="can be neither JSON-encoded nor pickled"):
        objects.encode_object(lambda: 0)
    with pytest.raises(ValueError, match="unknown object encoding 'zip'"):
        objects.decode_object("zip", b"")


# ---------------------------------------------------------------------- retention and publication
def test_step_names_and_should_save():
    assert retention.step_dir_name(42) == "step-00000042"
    assert retention.parse_step_dir("step-00000042") == 42
    assert retention.parse_step_dir(".step-00000042.tmp-ab12") is None
    assert retention.is_staging_name(".step-00000042.tmp-ab12") and not retention.is_staging_name("step-00000042")
    assert [s for s in range(10) if retention.should_save(s, 3)] == [3, 6, 9]
    assert retention.should_save(7, 3, last_step=True)
    with pytest.raises(ValueError, match="non-negative int"):
        retention.step_dir_name(-1)


@pytest.mark.parametrize("steps,k,protect,deleted", [
    ([1, 2, 3, 4], 2, (), [1, 2]),
    ([1, 2, 3, 4], 0, (), []),
    ([5], 1, (), []),                 # the only complete checkpoint survives
    ([1, 2, 3], 1, (2,), [1]),        # latest protected even when older than the newest
    ([], 3, (7,), []),
])
def test_plan_retention(steps, k, protect, deleted):
    assert retention.plan_retention(steps, k, protect) == deleted


@given(st.lists(st.integers(0, 50), max_size=12), st.integers(0, 5))
def test_plan_retention_never_deletes_the_newest(steps, k):
    gone = retention.plan_retention(steps, k)
    if steps:
        assert max(steps) not in gone
        assert len(set(steps) - set(gone)) >= min(len(set(steps)), max(k, 1)) if k else not gone


def test_publish_dir_latest_and_staging_cleanup(tmp_path):
    final = tmp_path / "step-00000001"
    staging = publish.staging_path(str(final), publish.new_save_id())
    os.mkdir(staging)
    (tmp_path / os.path.basename(staging) / "metadata.json").write_text("{}")
    with pytest.raises(CheckpointError, match="not a published checkpoint"):
        publish.write_latest(str(tmp_path), "step-00000001")
    publish.publish_dir(staging, str(final))
    assert publish.is_published(str(final)) and not os.path.exists(staging)
    publish.write_latest(str(tmp_path), "step-00000001")
    assert publish.read_latest(str(tmp_path)) == "step-00000001"
    # saving again to the same place replaces it
    staging2 = publish.staging_path(str(final), publish.new_save_id())
    os.mkdir(staging2)
    (tmp_path / os.path.basename(staging2) / "metadata.json").write_text('{"v": 2}')
    publish.publish_dir(staging2, str(final))
    assert (final / "metadata.json").read_text() == '{"v": 2}'
    # an interrupted save leaves only hidden staging folders; they are removed, published ones stay
    os.mkdir(publish.staging_path(str(tmp_path / "step-00000002"), "dead"))
    assert publish.list_published_steps(str(tmp_path)) == [1]
    assert publish.remove_staging(str(tmp_path)) == [".step-00000002.tmp-dead"]
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-00000001"]
    (tmp_path / "latest").write_text("../evil\n")
    assert publish.read_latest(str(tmp_path)) is None


# ---------------------------------------------------------------------- resharding by overlap
def _chunks_of(shape, mesh_shape, placements):
    spec = DTensorSpec(MeshTopology(mesh_shape), placements, shape)
    seen, chunks = set(), []
    for coord in np.ndindex(*mesh_shape):
        sizes, offs = spec.local_shape_and_offset(coord)
        if (offs, sizes) not in seen:
            seen.add((offs, sizes))
            chunks.append((offs, sizes))
    return spec, chunks


_PLACEMENT = st.sampled_from(["R", "S0", "S1"])


@settings(max_examples=60, deadline=None)
@given(st.tuples(st.integers(1, 9), st.integers(0, 7)), st.sampled_from([(2,), (3,), (4,), (2, 2), (2, 3)]),
       st.data())
def test_region_reads_reassemble_any_layout(shape, mesh_shape, data):
    def pl():
        return [Replicate() if n == "R" else Shard(int(n[1])) for n in data.draw(st.lists(
            _PLACEMENT, min_size=len(mesh_shape), max_size=len(mesh_shape)))]
    full = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    _, saved = _chunks_of(shape, mesh_shape, pl())
    entry = TensorEntry("int64", shape, [ChunkEntry(o, s, "f", f"k{i}", 0, 8 * int(np.prod(s)), 0)
                                         for i, (o, s) in enumerate(saved)])
    entry_md = CheckpointMetadata(tensors={"t": entry})
    entry_md.validate()
    spec2, _ = _chunks_of(shape, mesh_shape[::-1], pl())
    for coord in np.ndindex(*mesh_shape[::-1]):
        sizes, offs = spec2.local_shape_and_offset(coord)
        out = np.full(sizes, -1, dtype=np.int64)
        for piece in reshard.plan_region_reads("t", entry, offs, sizes):
            c = piece.chunk
            stored = full[tuple(slice(o, o + s) for o, s in zip(c.offsets, c.sizes))]
            src = stored[tuple(slice(a, a + n) for a, n in piece.src)]
            out[tuple(slice(a, a + n) for a, n in piece.dst)] = src
        assert np.array_equal(out, full[tuple(slice(o, o + s) for o, s in zip(offs, sizes))])


def test_region_reads_errors():
    entry = TensorEntry("float32", (4,), [ChunkEntry((0,), (2,), "f", "k", 0, 8, 0)])
    with pytest.raises(CheckpointError, match="cover 1 of the 2 wanted"):
        reshard.plan_region_reads("t", entry, (1,), (2,))
    with pytest.raises(CheckpointError, match="outside its stored shape"):
        reshard.plan_region_reads("t", entry, (3,), (2,))


# ---------------------------------------------------------------------- Hugging Face layout, FQNs
def test_key_map_adapter_round_trip_and_errors():
    ad = hf.KeyMapAdapter([("layers.{}.attention.wq.weight", "model.layers.{}.self_attn.q_proj.weight"),
                           ("tok_embeddings.weight", "model.embed_tokens.weight")], config={"a": 1})
    ours = {"layers.0.attention.wq.weight": 1, "layers.11.attention.wq.weight": 2, "tok_embeddings.weight": 3}
    theirs = ad.to_hf(ours)
    assert theirs == {"model.layers.0.self_attn.q_proj.weight": 1, "model.layers.11.self_attn.q_proj.weight": 2,
                      "model.embed_tokens.weight": 3}
    assert ad.from_hf(theirs) == ours and ad.hf_config() == {"a": 1}
    assert isinstance(ad, hf.StateDictAdapter)
    with pytest.raises(KeyError, match="'norm.weight' matches no rule"):
        ad.to_hf({"norm.weight": 0})
    with pytest.raises(ValueError, match="same number of"):
        hf.KeyMapAdapter([("a.{}", "b")])
    with pytest.raises(KeyError, match="collide"):
        hf.KeyMapAdapter([("a", "x"), ("b", "x")]).to_hf({"a": 0, "b": 1})
    assert hf.IdentityAdapter().to_hf({"q": 1}) == {"q": 1}


def test_assign_files_index_and_read(tmp_path):
    sizes = {"layers.10.w": 40, "layers.2.w": 40, "layers.2.b": 10, "embed": 100}
    mapping = hf.assign_files(sizes, 85)
    assert mapping == {"embed": 1, "layers.2.b": 2, "layers.2.w": 2, "layers.10.w": 3}
    n = max(mapping.values())
    weight_map = {k: hf.hf_file_name(i, n) for k, i in mapping.items()}
    assert weight_map["embed"] == "model-00001-of-00003.safetensors"
    doc = hf.build_index(weight_map, 190)
    assert list(doc["weight_map"]) == ["embed", "layers.2.b", "layers.2.w", "layers.10.w"]
    (tmp_path / hf.INDEX_FILE).write_text(json.dumps(doc))
    with pytest.raises(CheckpointCorruptError, match="names files that do not exist"):
        hf.read_index(str(tmp_path))
    for f in set(weight_map.values()):
        (tmp_path / f).write_bytes(b"")
    assert hf.read_index(str(tmp_path)) == weight_map
    with pytest.raises(CheckpointError, match="not a Hugging Face checkpoint"):
        hf.read_index(str(tmp_path / "nothing"))
    with pytest.raises(CheckpointError, match="missing keys \\['b'\\], unexpected keys \\['c'\\]"):
        hf.check_keys(["a", "b"], ["a", "c"], "load_hf")


def test_canonical_fqns():
    assert fqn.canonical_fqn("layers.0._checkpoint_wrapped_module.mlp.w") == "layers.0.mlp.w"
    assert fqn.canonical_fqn("_orig_mod.w") == "w" and fqn.canonical_fqn("w") == "w"
    assert fqn.canonical_map(["_orig_mod.a", "b"]) == {"a": "_orig_mod.a", "b": "b"}
    with pytest.raises(ValueError, match="same canonical name"):
        fqn.canonical_map(["_orig_mod.a", "a"])


def test_backend_is_chosen_by_the_values():
    from hyper_parallel.checkpoint.api import backend_of

    class Loader:
        def state_dict(self):
            return {}

        def load_state_dict(self, sd):
            self.sd = sd

    assert backend_of({"data": Loader(), "step": 3}) == "torch"  # the default
    from hyper_parallel.checkpoint import Stateful
    assert isinstance(Loader(), Stateful)


def test_flattened_optimizer_state_merges_stages_and_regroups():
    full = {"state": {"a": {"exp_avg": 1, "step": 2}, "b": {"exp_avg": 3, "step": 2}, "c": {"m": 5}},
            "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "params": ["a", "b"]}, {"lr": 0.5, "params": ["c"]}]}
    flat = fqn.flatten_optimizer_state(full)
    assert flat["state.a.exp_avg"] == 1 and flat["param_groups.b.betas"] == (0.9, 0.95) and flat["param_groups.c.lr"] == 0.5
    # two pipeline stages' dicts merge without collisions, and each stage regroups its own parameters
    stage0 = fqn.flatten_optimizer_state({"state": {"a": full["state"]["a"]},
                                          "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "params": ["a"]}]})
    stage1 = fqn.flatten_optimizer_state({"state": {"b": full["state"]["b"], "c": full["state"]["c"]},
                                          "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "params": ["b"]},
                                                           {"lr": 0.5, "params": ["c"]}]})
    assert not set(stage0) & set(stage1) and {**stage0, **stage1} == flat
    assert fqn.unflatten_optimizer_state(flat, [["a", "b"], ["c"]]) == full
    assert fqn.unflatten_optimizer_state(flat, [["c"]]) == {"state": {"c": {"m": 5}},
                                                            "param_groups": [{"lr": 0.5, "params": ["c"]}]}
    with pytest.raises(KeyError, match="no param-group settings stored for parameter 'z'"):
        fqn.unflatten_optimizer_state(flat, [["z"]])
    with pytest.raises(KeyError, match="unexpected key 'other.x'"):
        fqn.unflatten_optimizer_state({"other.x": 1}, [["a"]])
