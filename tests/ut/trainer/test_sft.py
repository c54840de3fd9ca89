# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""SFT data (pure): the three record formats, the loss mask, truncation, packing with document ids and positions
restarting per sample, the eval split and bad records reported with file and line (skip or fail). A character
tokenizer (one id per character, ``<`` BOS 1, ``>`` EOS 2) makes every expected id readable."""
import json

import pytest

from hyper_parallel.trainer.sft import IGNORE_INDEX, SFTStats, Sample, build_sft_dataset, pack_samples
from hyper_parallel.trainer.tokenizer import TextTokenizer

KEYS = {"text": "text", "prompt": "prompt", "completion": "completion", "messages": "messages"}


def _render(messages, add_generation_prompt):
    out = "".join(f"[{m['role'][0]}]{m['content']}|" for m in messages)
    return out + ("[a]" if add_generation_prompt else "")


def _tok(chat=True):
    return TextTokenizer(encode=lambda t: [ord(c) for c in t], decode=lambda ids: "".join(map(chr, ids)),
                         vocab_size=256, bos_id=1, eos_id=2, pad_id=0, render_chat=_render if chat else None,
                         source="chars")


def _write(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


def _build(paths, fmt, seq_len=64, packing=True, bad="fail", eval_paths=(), eval_fraction=0.2, tok=None):
    return build_sft_dataset(paths, list(eval_paths), tok or _tok(), fmt=fmt, seq_len=seq_len, packing=packing,
                             bad_records=bad, eval_fraction=eval_fraction, keys=KEYS)


def _trained(row):
    """The label characters that carry loss."""
    return "".join(chr(x) if x > 2 else f"<{x}>" for x in row["labels"] if x != IGNORE_INDEX)


def test_prompt_completion_loss_only_on_completion_and_eos(tmp_path):
    path = _write(tmp_path, "pc.jsonl", [{"prompt": "Q?", "completion": "yes"}, {"prompt": "R?", "completion": "no"}])
    ds = _build([path], "prompt_completion", packing=False, eval_paths=[path])
    row = ds.sequence(0)
    assert row["input_ids"][:6] == [1, ord("Q"), ord("?"), ord("y"), ord("e"), ord("s")]
    assert _trained(row) == "yes<2>"  # the prompt and BOS carry no loss; the end token does
    assert row["labels"][:2] == [IGNORE_INDEX, IGNORE_INDEX] and row["labels"][5] == 2
    assert row["doc_ids"][:6] == [0] * 6 and row["doc_ids"][6:] == [-1] * (64 - 6)
    assert row["input_ids"][6:] == [0] * (64 - 6)  # pad id
    assert ds.stats.loss_tokens == 4 + 3 and ds.stats.rows == 2


def test_text_trains_every_token_and_messages_only_assistant_turns(tmp_path):
    path = _write(tmp_path, "t.jsonl", [{"text": "abc"}])
    ds = _build([path], "text", eval_paths=[path])
    assert _trained(ds.sequence(0)) == "abc<2>"
    conv = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "yo"}, {"role": "user", "content": "x"},
                         {"role": "assistant", "content": "z"}]}
    path = _write(tmp_path, "m.jsonl", [conv])
    row = _build([path], "messages", eval_paths=[path]).sequence(0)
    text = "".join(chr(x) for x in row["input_ids"] if x)
    assert text.startswith("[s]S|[u]hi|[a]yo|[u]x|[a]z")  # no BOS/EOS added: the template writes its own
    assert _trained(row) == "yo|z|"  # each reply through its end-of-turn marker; prompts and headers masked


def test_packing_restarts_positions_and_document_ids(tmp_path):
    path = _write(tmp_path, "t.jsonl", [{"text": "ab"}, {"text": "cde"}, {"text": "fghijklmnop"}])
    ds = _build([path], "text", seq_len=12, eval_paths=[path])
    r0, r1 = ds.sequence(0), ds.sequence(1)
    # "<ab>" gives 3 positions, "<cde>" 4: both fit in 12; "<fghijklmnop>" (12) starts a new row
    assert r0["position_ids"][:7] == [0, 1, 2, 0, 1, 2, 3] and r0["doc_ids"][:7] == [0, 0, 0, 1, 1, 1, 1]
    assert r0["doc_ids"][7:] == [-1] * 5 and r0["labels"][7:] == [IGNORE_INDEX] * 5
    assert r0["input_ids"][3] == 1 and r0["labels"][2] == 2  # the next document starts with its BOS
    assert r1["position_ids"] == list(range(12)) and r1["doc_ids"] == [0] * 12
    unpacked = _build([path], "text", seq_len=12, packing=False, eval_paths=[path])
    assert unpacked.num_train == 3 and ds.num_train == 2


def test_truncation_keeps_the_head_and_drops_samples_without_loss():
    stats = SFTStats()
    long = Sample(list(range(10, 30)), [True] * 20)
    masked = Sample(list(range(10, 30)), [False] * 15 + [True] * 5)  # its loss tokens lie beyond seq_len
    rows = pack_samples([long, masked], 8, packing=True, pad_id=0, stats=stats)
    assert len(rows) == 1 and rows[0]["input_ids"] == list(range(10, 18)) and rows[0]["labels"] == list(range(11, 19))
    assert stats.truncated == 2 and stats.dropped == 1


def test_bad_records_name_file_and_line_and_skip_or_fail(tmp_path):
    good = {"prompt": "a", "completion": "b"}
    path = _write(tmp_path, "bad.jsonl", [good, {"prompt": "a"}, "not json", {"prompt": "a", "completion": 3},
                                          {"prompt": "a", "completion": "  "}, [1, 2], good])
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: missing key 'completion' \(data\.bad_records"):
        _build([path], "prompt_completion", eval_paths=[path])
    ds = _build([path], "prompt_completion", bad="skip", eval_paths=[_write(tmp_path, "e.jsonl", [good])])
    assert ds.stats.records == 7 and ds.stats.skipped == 5 and ds.num_train == 1
    assert ds.stats.reasons[0].endswith("bad.jsonl:2: missing key 'completion'")
    assert "bad.jsonl:3: not valid JSON" in ds.stats.reasons[1]
    assert ds.stats.reasons[2].endswith("bad.jsonl:4: key 'completion': expected a string, got int")
    msgs = _write(tmp_path, "m.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(ValueError, match="m.jsonl:1: key 'messages': no assistant turn"):
        _build([msgs], "messages")
    with pytest.raises(ValueError, match="no chat template"):
        _build([_write(tmp_path, "m2.jsonl", [{"messages": [{"role": "assistant", "content": "x"}]}])], "messages",
               tok=_tok(chat=False))


def test_eval_split_and_parquet_through_datasets(tmp_path):
    import pandas as pd
    records = [{"text": f"doc {i}"} for i in range(10)]
    path = str(tmp_path / "d.parquet")
    pd.DataFrame(records).to_parquet(path)
    ds = _build([path], "text", seq_len=8, packing=False, eval_fraction=0.2)
    assert ds.num_train == 8 and ds.num_eval == 2  # the last rows are held out
    assert "".join(chr(x) for x in ds.sequence(1, "eval")["input_ids"][1:6]) == "doc 9"
    bad = str(tmp_path / "b.parquet")
    pd.DataFrame([{"text": "ok"}, {"text": ""}]).to_parquet(bad)
    with pytest.raises(ValueError, match=r"b\.parquet:row 2: key 'text' is empty"):
        _build([bad], "text")
    with pytest.raises(ValueError, match="unsupported file type '.txt'"):
        _build([_write(tmp_path, "x.txt", ["a"])], "text")
