# hyper-parallel: the two README commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hp-installed
NPROC ?= 2
export PYTHONUNBUFFERED := 1

.PHONY: demo tour test ut st agent gate bench coverage matrix matrix-inprocess matrix-pairwise matrix-mindspore install clean multinode package \
	finetune bench-finetune vl-demo llamafactory-check llamafactory-bench ms-models guard-corpus agent-hooks

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[torch,mindspore,dev]"
	@touch $(STAMP)

## install: the environment (.venv), the git hooks (commit-msg, pre-commit, pre-push; shared by every work tree
## of the clone) and the hp-agent launcher in ~/.local/bin. Idempotent; foreign git hooks are kept and chained.
install: $(STAMP)
	$(VENV)/bin/hp-agent install --launcher --quiet
	@$(PY) -m compileall -q tools/hp_agent  # fresh bytecode for the hooks even under PYTHONDONTWRITEBYTECODE

## demo: a real training run: hp-train with configs/demo.toml (debug MoE Llama, 2 CPU ranks, FSDP x EP, stdlib corpus)
demo: $(STAMP)
	$(VENV)/bin/hp-train --config configs/demo.toml

## finetune: the fine-tuning example end to end (README "Fine-tune a Hugging Face model"): a tiny Llama written by
## transformers (offline), SFT on examples/finetune/sft.jsonl on 2 ranks, export to runs/finetune/hf, reload in
## transformers (logits compared), generate
finetune: $(STAMP)
	$(PY) examples/finetune/make_tiny_llama.py runs/tiny-llama
	$(VENV)/bin/hp-train --config configs/finetune.toml
	$(PY) examples/finetune/check_export.py runs/finetune/hf
	$(VENV)/bin/hp-generate --model runs/finetune/hf --chat --prompt "What does FSDP shard?" --prompt "How do I run the demo?"

## vl-demo: VLTrainer end to end (README "Vision-language"): the generated image-caption set and a Qwen3-VL processor
## folder (examples/vl/make_vl_data.py, offline), then hp-train configs/vl_demo.toml (Qwen3-VL debug, FSDP, 2 ranks)
vl-demo: $(STAMP)
	$(PY) examples/vl/make_vl_data.py runs/vl_data
	$(VENV)/bin/hp-train --config configs/vl_demo.toml

## bench-finetune: init_from vs full load (time to first step, peak memory per rank), SFT tokens/s with/without packing
bench-finetune: $(STAMP)
	$(PY) benchmarks/finetune.py

## tour: the feature tour (redistribute, TP, FSDP, pipeline, MoE, CP, checkpoint checks; 2 CPU ranks)
tour: $(STAMP)
	$(VENV)/bin/torchrun --standalone --nproc_per_node $(NPROC) examples/demo.py

## test: the whole suite
test: $(STAMP)
	$(VENV)/bin/hp-agent gate run

## package: the `package` gate stage alone (sdist + wheel, clean venv, smoke, 2-rank hp-train; ~80 s at load 20)
package: $(STAMP)
	$(PY) -m pytest tests/package

## multinode: FSDP x TP over two torchrun "nodes" with a node killed and replaced (~3 min at load 25), the Slurm
## batch script on a two-node Slurm cluster started on this host (needs `apt-get install slurm-wlm`), msrun on
## two node ranks
multinode: $(STAMP)
	$(PY) -m pytest -s tests/multinode

ut: $(STAMP)
	$(PY) -m pytest tests/ut

st: $(STAMP)
	$(PY) -m pytest tests/st

## ms-models: hp-train on MindSpore beyond Llama 3: DeepSeek-V3 FSDP on 2 ranks vs one process, Qwen3 vs the
## torch trainer (tests/extra/test_trainer_models_mindspore.py; ~1.5 min of CPU, ~8 min wall at load 30)
ms-models: $(STAMP)
	$(PY) -m pytest tests/extra/test_trainer_models_mindspore.py

## guard-corpus: the before-shell guard's false positives / false negatives on tests/agent/data/shell_corpus.yaml
## (176 lines), each line through the hook command Claude Code, Codex, Cursor and Gemini have registered, in
## that assistant's payload (benchmarks/agent_guard.py; exit 1 on any FP/FN; ~3 min idle, 11 min at load 30)
guard-corpus: $(STAMP)
	$(PY) benchmarks/agent_guard.py

## agent-hooks: p50/p95 of every assistant hook next to `python -c pass` (benchmarks/agent_hooks.py; ~2 min)
agent-hooks: $(STAMP)
	$(PY) benchmarks/agent_hooks.py

bench: $(STAMP)
	$(VENV)/bin/torchrun --standalone --nproc_per_node 2 benchmarks/redistribute.py

## coverage: PyTorch OpInfo samples through our DTensor and torch DTensor on 2 ranks -> docs/op_coverage.md
coverage: $(STAMP)
	$(PY) -m hyper_parallel.devtools.op_coverage --out docs/op_coverage.md --impl both --quiet

## matrix: every combination of hyper_parallel/trainer/composition.yaml through hp-train vs one process, then
## docs/parallelism.md (slow: ~50 min under load; make test runs the pairwise subset in tests/st/torch/test_composition.py)
MATRIX_JOBS ?= 3
matrix: $(STAMP)
	$(PY) -m hyper_parallel.devtools.composition run --jobs $(MATRIX_JOBS) --timeout 600
	$(PY) -m hyper_parallel.devtools.composition doc

## matrix-inprocess: the same table trained in reused gloo worker pools (LLMTrainer, no torchrun launch per layout;
## one intra-op thread per rank), then the doc (~15 min under load 30-45 instead of hours)
matrix-inprocess: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m hyper_parallel.devtools.composition run --in-process --timeout 600

## matrix-pairwise: the CI subset (the pairwise cover of the passing rows) through hp-train, one torchrun launch
## each, merged into docs/parallelism_results.json (rows it verified show `✓ hp`; exit 1 if a row's verdict differs
## from its in-process one), then the doc (106 combinations: ~55 min at load 30 with 2 jobs)
matrix-pairwise: $(STAMP)
	nice -n 10 $(PY) -m hyper_parallel.devtools.composition run --pairwise --jobs 2 --timeout 600 \
		--out runs/matrix/pairwise.json
	$(PY) -m hyper_parallel.devtools.composition merge runs/matrix/pairwise.json
	$(PY) -m hyper_parallel.devtools.composition doc

## matrix-mindspore: the composition matrix's MindSpore column (the *_mindspore rows: Llama 3 FSDP, DDP, TP, TP x FSDP,
## PP GPipe/1F1B/Interleaved1F1B, PP x FSDP, CP ring/allgather/Ulysses, FSDP x CP; Qwen3, Qwen3-MoE and DeepSeek-V3
## TP, EP, CP, PP, FSDP) vs one MindSpore process, merged into docs/parallelism_results.json, then
## docs/parallelism.md (~45 min at load 10-30; MATRIX_MS_JOBS=2 runs two at once; the 4-rank rows dominate)
MATRIX_MS_JOBS ?= 1
matrix-mindspore: $(STAMP)
	$(PY) -m hyper_parallel.devtools.composition run -k 'llama3_mindspore*' -k 'qwen3_mindspore*' \
		-k 'qwen3_moe_mindspore*' -k 'deepseek_v3_mindspore*' --jobs $(MATRIX_MS_JOBS) --timeout 900
	$(PY) -m hyper_parallel.devtools.composition doc

## llamafactory-check: LlamaFactory 0.9.5 itself (its own venv, .venv-llamafactory, built once) runs
## `llamafactory-cli train` with use_hyper_parallel on 2 (HSDP: 4) CPU ranks against its one-process run
## (examples/llamafactory/check.py; ~8-15 min on 2 busy cores, the venv build ~5 min more the first time)
LF_VENV ?= .venv-llamafactory
LF_STAMP := $(LF_VENV)/.hp-llamafactory-installed
LF_WORK ?= runs/llamafactory-check

$(LF_STAMP): pyproject.toml
	@test -x $(LF_VENV)/bin/python || $(PYTHON) -m venv $(LF_VENV)
	$(LF_VENV)/bin/python -m pip install -q --upgrade pip
	$(LF_VENV)/bin/python -m pip install -q torch==2.13.0 llamafactory==0.9.5
	@# the torchvision / torchaudio it pulls are CUDA builds that do not load against the CPU torch
	$(LF_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio
	$(LF_VENV)/bin/python -m pip install -q -e .
	@touch $(LF_STAMP)

llamafactory-check: $(LF_STAMP)
	$(LF_VENV)/bin/python examples/llamafactory/check.py $(LF_WORK)

## llamafactory-bench: LlamaFactory SFT tokens/s, use_hyper_parallel vs its own FSDP2 (accelerate) path, 2 ranks
llamafactory-bench: $(LF_STAMP)
	$(LF_VENV)/bin/python benchmarks/integration_llamafactory.py $(LF_WORK)-bench

clean:
	rm -rf $(VENV) $(LF_VENV) build *.egg-info .pytest_cache
