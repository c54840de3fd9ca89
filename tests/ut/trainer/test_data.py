# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Data pipeline: stdlib corpus, cached BPE tokenizer, packing, the same global batches for any DP layout,
resumable position, user files."""
import json
import os

import pytest

from hyper_parallel.trainer.data import (EOS, DistributedBatchLoader, TokenDataset, prepare_dataset, read_documents,
                                         stdlib_files)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("cache"))
    ds = prepare_dataset("stdlib", [], text_key="text", tokenizer="bpe", vocab_size=300, max_corpus_mb=0.15,
                         cache_dir=cache, seq_len=16, eval_fraction=0.1)
    return ds, cache


def test_stdlib_corpus_is_real_code_in_fixed_order():
    files = stdlib_files(200_000)
    assert files == stdlib_files(200_000) and len(files) > 3
    assert all(f.endswith(".py") and "site-packages" not in f for f in files)
    assert sum(os.path.getsize(f) for f in files[:-1]) <= 200_000


def test_tokenizer_trained_once_and_cached(dataset):
    ds, cache = dataset
    names = sorted(os.listdir(cache))
    assert any(n.startswith("bpe-300-") for n in names) and any(n.startswith("tokens-") for n in names)
    assert ds.vocab_size == 300
    mtimes = {n: os.path.getmtime(os.path.join(cache, n)) for n in names}
    again = prepare_dataset("stdlib", [], text_key="text", tokenizer="bpe", vocab_size=300, max_corpus_mb=0.15,
                            cache_dir=cache, seq_len=16, eval_fraction=0.1)
    assert {n: os.path.getmtime(os.path.join(cache, n)) for n in os.listdir(cache)} == mtimes
    assert again.tokens == ds.tokens
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(cache, next(n for n in names if n.startswith("bpe-"))))
    text = "def f(x):\n    return x + 1\n"
    assert tok.decode(tok.encode(text).ids) == text
    assert len(tok.encode(text).ids) < len(text)  # merges learnt: fewer tokens than bytes
    assert tok.token_to_id(EOS) in set(ds.tokens)


def test_packing(dataset):
    ds, _ = dataset
    s0, s1 = ds.sequence(0), ds.sequence(1)
    assert len(s0) == 17 and s0[-1] == s1[0]  # inputs + shifted labels share the boundary token
    assert ds.num_train + ds.num_eval == (len(ds.tokens) - 1) // 16
    assert ds.sequence(0, "eval") == list(ds.tokens[ds.num_train * 16:ds.num_train * 16 + 17])


def test_same_global_batch_for_any_dp_layout(dataset):
    ds, _ = dataset
    single = DistributedBatchLoader(ds, 8, seed=3)
    loaders = [DistributedBatchLoader(ds, 8, dp_rank=r, dp_size=4, seed=3) for r in range(4)]
    two = [DistributedBatchLoader(ds, 8, dp_rank=r, dp_size=2, seed=3) for r in range(2)]
    for _ in range(5):
        whole = single.next_batch()
        assert sum((ld.next_batch() for ld in loaders), []) == whole
        assert sum((ld.next_batch() for ld in two), []) == whole
    other_seed = DistributedBatchLoader(ds, 8, seed=4)
    assert other_seed.global_indices(0) != DistributedBatchLoader(ds, 8, seed=3).global_indices(0)


def test_micro_batches_are_the_same_global_slices_on_every_dp_layout(dataset):
    """With n micro-batches, global micro-batch i is the i-th contiguous slice of the global batch on any
    data-parallel layout (rank r's i-th group of rows is its share of it), as in one process with grad_accum n."""
    ds, _ = dataset
    whole = DistributedBatchLoader(ds, 8, seed=3).next_batch()
    for dp, n in ((2, 2), (2, 4), (4, 2), (1, 4)):
        rows = [DistributedBatchLoader(ds, 8, dp_rank=r, dp_size=dp, seed=3, micro_batches=n).next_batch()
                for r in range(dp)]
        m = 8 // (dp * n)
        for i in range(n):
            union = sum((part[i * m:(i + 1) * m] for part in rows), [])
            assert union == whole[i * 8 // n:(i + 1) * 8 // n], (dp, n, i)
    plain = [DistributedBatchLoader(ds, 8, dp_rank=r, dp_size=2, seed=3).next_batch() for r in range(2)]
    split = [DistributedBatchLoader(ds, 8, dp_rank=r, dp_size=2, seed=3, micro_batches=2).next_batch()
             for r in range(2)]
    assert plain[0] == whole[:4] and split[0] == whole[:2] + whole[4:6]  # the assignment really changes
    for bad in (0, 3, True):
        with pytest.raises(ValueError, match="micro_batches"):
            DistributedBatchLoader(ds, 8, dp_size=2, micro_batches=bad)


def test_epochs_cover_every_sequence_once(dataset):
    ds, _ = dataset
    loader = DistributedBatchLoader(ds, 1, seed=0)
    n = len(ds)
    def epoch():
        out = []
        for _ in range(n):
            out.append(loader.global_indices()[0])
            loader.next_batch()
        return out
    first = epoch()
    assert sorted(first) == list(range(n))
    second = epoch()
    assert sorted(second) == list(range(n)) and second != first


def test_resume_position(dataset):
    ds, _ = dataset
    a = DistributedBatchLoader(ds, 4, dp_rank=1, dp_size=2, seed=0)
    for _ in range(3):
        a.next_batch()
    state = json.loads(json.dumps(a.state_dict()))
    b = DistributedBatchLoader(ds, 4, dp_rank=1, dp_size=2, seed=0)
    b.load_state_dict(state)
    assert [b.next_batch() for _ in range(3)] == [a.next_batch() for _ in range(3)]
    with pytest.raises(ValueError, match="global_batch=4 does not match this run's 8"):
        DistributedBatchLoader(ds, 8, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="not divisible by the data-parallel degree 3"):
        DistributedBatchLoader(ds, 4, dp_size=3)


def test_user_files(tmp_path):
    (tmp_path / "a.txt").write_text("hello world " * 50)
    with open(tmp_path / "b.jsonl", "w", encoding="utf-8") as fh:
        for i in range(20):
            fh.write(json.dumps({"body": f"line {i} " * 20}) + "\n")
    docs = read_documents("files", [str(tmp_path)], text_key="body")
    assert docs[0].startswith("hello") and len(docs) == 21
    with pytest.raises(ValueError, match=r"b.jsonl:1: expected an object with a string field 'text'"):
        read_documents("files", [str(tmp_path / "b.jsonl")])
    with pytest.raises(ValueError, match="does not exist"):
        read_documents("files", [str(tmp_path / "nope")])
    (tmp_path / "c.xyz").write_text("x")
    with pytest.raises(ValueError, match="unsupported file type 'xyz'"):
        read_documents("files", [str(tmp_path / "c.xyz")])
    ds = prepare_dataset("files", [str(tmp_path / "b.jsonl")], text_key="body", tokenizer="bpe", vocab_size=280,
                         max_corpus_mb=1, cache_dir=str(tmp_path / "cache"), seq_len=8, eval_fraction=0.1)
    assert ds.vocab_size <= 280 and len(ds) > 4
    with pytest.raises(ValueError, match="too few for sequences"):
        TokenDataset(ds.tokens[:10], 8, 0.1, 280)
