# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``transformers.Trainer`` job for ``test_integration_transformers.py``: ``python hf_trainer_job.py OUT`` trains
the one-process reference with the plain ``transformers.Trainer``; under ``torchrun --nproc_per_node 2`` it
trains the same run with ``HyperParallelTrainer`` in several layouts (FSDP with accumulation, TP 2 with
selective recompute, HSDP-free FSDP with swap to disk, a checkpoint + resume, the LlamaFactory trainer class)
and rank 0 writes every result to ``OUT/<case>.pt`` (final full weights, per-step grad norms and losses)."""
import json
import os
import sys

import torch
import transformers

STEPS = 4
GLOBAL_BATCH = 8
ACCUM = 2
N_SAMPLES = 40


def tiny_llama(seed: int = 0):
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).float()


def dataset():
    """SFT-like samples: variable lengths, the prompt masked out of the labels."""
    g = torch.Generator().manual_seed(7)
    rows = []
    for _ in range(N_SAMPLES):
        n = int(torch.randint(6, 17, (1,), generator=g))
        ids = torch.randint(1, 64, (n,), generator=g)
        labels = ids.clone()
        labels[: n // 3] = -100
        rows.append({"input_ids": ids.tolist(), "labels": labels.tolist()})
    return rows


def collate(rows):
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = torch.tensor(r["input_ids"])
        labels[i, :n] = torch.tensor(r["labels"])
        mask[i, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def training_args(out, per_device, **kw):
    base = dict(output_dir=out, per_device_train_batch_size=per_device, gradient_accumulation_steps=ACCUM,
                max_steps=STEPS, learning_rate=1e-3, weight_decay=0.01, max_grad_norm=0.5, logging_steps=1,
                save_strategy="no", report_to=[], remove_unused_columns=False, seed=3, use_cpu=True,
                dataloader_num_workers=0, disable_tqdm=True)
    base.update(kw)
    return transformers.TrainingArguments(**base)


def history(trainer):
    logs = [h for h in trainer.state.log_history if "loss" in h]
    return [h["loss"] for h in logs], [h["grad_norm"] for h in logs]


def full_weights(model):
    from hyper_parallel.integration.transformers._torch.checkpoint import full_state_dict
    return {k: v.clone() for k, v in full_state_dict(model).items()}


def run_reference(out):
    args = training_args(os.path.join(out, "ref"), GLOBAL_BATCH // ACCUM)
    trainer = transformers.Trainer(model=tiny_llama(), args=args, train_dataset=dataset(), data_collator=collate)
    trainer.train()
    losses, norms = history(trainer)
    torch.save({"weights": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
                "losses": losses, "norms": norms}, os.path.join(out, "reference.pt"))


def _hp_trainer(cls, out, name, hp, **kw):
    from hyper_parallel.integration.transformers import HyperParallelArguments
    hp_args = HyperParallelArguments.from_dict(hp)
    dp = int(os.environ["WORLD_SIZE"]) // hp_args.tp_size
    args = training_args(os.path.join(out, name), GLOBAL_BATCH // ACCUM // dp, **kw.pop("args", {}))
    return cls(model=tiny_llama(), args=args, train_dataset=dataset(), data_collator=collate, hp_args=hp_args, **kw)


def record(trainer, out, name, extra=None):
    from hyper_parallel.integration.transformers._torch.prepare import ACTIVATION_PLAN
    losses, norms = history(trainer)
    weights = full_weights(trainer.model)
    plan = trainer.model.__dict__[ACTIVATION_PLAN]
    activation = None if plan is None else {"layers": dict(plan.layers),
                                            "swap": None if plan.manager is None else plan.manager.stats.as_dict()}
    if int(os.environ["RANK"]) == 0:
        result = {"weights": weights, "losses": losses, "norms": norms, "activation": activation,
                  "class": type(trainer.model).__name__, **(extra or {})}
        torch.save(result, os.path.join(out, f"{name}.pt"))


def case_layout(out, name, hp):
    from hyper_parallel.integration.transformers import HyperParallelTrainer
    trainer = _hp_trainer(HyperParallelTrainer, out, name, hp)
    trainer.train()
    record(trainer, out, name)


def case_resume_and_export(out):
    """Save at step 2, resume a fresh trainer from checkpoint-2 to step 4; export the result as an HF folder."""
    from hyper_parallel.integration.transformers import HyperParallelTrainer
    first = _hp_trainer(HyperParallelTrainer, out, "resume", {}, args={"save_strategy": "steps", "save_steps": 2})
    first.train()
    ckpt = os.path.join(out, "resume", "checkpoint-2")
    second = _hp_trainer(HyperParallelTrainer, out, "resume", {}, args={"save_strategy": "no"})
    second.train(resume_from_checkpoint=ckpt)
    export = os.path.join(out, "export")
    second.save_model(export)
    record(second, out, "resume", {"export": export, "ckpt_files": sorted(os.listdir(ckpt))})


def case_llamafactory_class(out):
    """The LlamaFactory trainer class with LlamaFactory's constructor keywords (its stand-in base here)."""
    from types import SimpleNamespace
    from hyper_parallel.integration.llamafactory import HyperParallelArguments, HyperParallelTrainer
    path = os.path.join(out, "hp_args.json")
    if int(os.environ["RANK"]) == 0:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"activation_mode": "full"}, fh)
    torch.distributed.barrier()
    hp_args = HyperParallelArguments.from_finetuning_args(SimpleNamespace(hyper_parallel_args=path))
    args = transformers.Seq2SeqTrainingArguments(**training_args(os.path.join(out, "lf"), 2).to_dict())
    trainer = HyperParallelTrainer(hp_args=hp_args, model=tiny_llama(), args=args, finetuning_args=SimpleNamespace(),
                                   data_collator=collate, callbacks=None, gen_kwargs={"max_new_tokens": 4},
                                   ref_model=None, compute_loss_func=None, train_dataset=dataset(), tokenizer=None,
                                   processor=None)
    trainer.train()
    record(trainer, out, "lf")


def _manual_steps(model, opt, n):
    """``n`` plain-loop steps (LlamaFactory main's trainer drives the model this way) on the first samples."""
    from hyper_parallel.integration.llamafactory import clip_grad_norm_, hsdp_sync_stream
    rows = dataset()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    for step in range(n):
        batch = collate(rows[step * 2 * world + 2 * rank: step * 2 * world + 2 * rank + 2])
        model(**batch).loss.backward()
        hsdp_sync_stream()
        clip_grad_norm_(list(model.parameters()), 0.5)
        opt.step()
        opt.zero_grad()


def case_main_branch_names(out):
    """The names LlamaFactory's main branch imports, called with its call shapes: prepare through
    fsdp2_prepare_model, two steps, save_hsdp_checkpoint, then a fresh model + optimizer loaded with
    load_hsdp_model / load_hsdp_optimizer_and_scheduler (the model found from the optimizer) continue
    identically; export_to_hf_format; the context_parallel rank helpers at cp_size 1."""
    from hyper_parallel.integration.llamafactory import (HSDPModule, HyperParallelArguments, export_to_hf_format,
                                                         fsdp2_prepare_model, load_hsdp_model,
                                                         load_hsdp_optimizer_and_scheduler, save_hsdp_checkpoint,
                                                         wrap_optimizer_with_skip_dtensor_dispatch)
    from hyper_parallel.integration.llamafactory import context_parallel as cp
    from hyper_parallel.platform import get_platform
    hp_args = HyperParallelArguments()
    folder = os.path.join(out, "main_names")

    def fresh():
        model = fsdp2_prepare_model(None, tiny_llama(), hp_args)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        wrap_optimizer_with_skip_dtensor_dispatch(opt)
        return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))

    model, opt, sched = fresh()
    _manual_steps(model, opt, 2)
    sched.step()
    save_hsdp_checkpoint(model=model, optimizer=opt, lr_scheduler=sched, output_dir=folder, should_save_scheduler=True)
    _manual_steps(model, opt, 1)
    model2, opt2, sched2 = fresh()
    loaded = load_hsdp_model(model2, folder)
    load_hsdp_optimizer_and_scheduler(opt2, sched2, folder)
    _manual_steps(model2, opt2, 1)
    wa, wb = full_weights(model), full_weights(model2)  # collectives: every rank; the values land on rank 0
    diff = max((float((wa[k] - wb[k]).abs().max()) for k in wa), default=0.0)
    export_to_hf_format(model2, None, os.path.join(out, "main_export"))
    result = {"is_hsdp_module": isinstance(model, HSDPModule), "loaded": loaded,
              "missing_loads": load_hsdp_model(model2, os.path.join(out, "nowhere")), "resume_diff": diff,
              "sched": sched2.state_dict()["last_epoch"], "ranks": (cp.get_cp_rank(hp_args), cp.get_dp_rank(hp_args),
                                                                    cp.get_cp_group_ranks(hp_args), get_platform().get_rank())}
    if int(os.environ["RANK"]) == 0:
        torch.save(result, os.path.join(out, "main_names.pt"))


def main(out):
    if "RANK" not in os.environ:
        run_reference(out)
        return
    case_layout(out, "fsdp", {})
    case_layout(out, "tp2_selective", {"tp_size": 2, "activation_mode": "selective-op"})
    case_layout(out, "fsdp_swap", {"activation_mode": "swap", "activation": {"swap": {"target": "disk",
                                                                                        "dir": out, "min_bytes": 1}}})
    case_resume_and_export(out)
    case_llamafactory_class(out)
    case_main_branch_names(out)


if __name__ == "__main__":
    main(sys.argv[1])
