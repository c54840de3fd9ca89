# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-generate``: sample from a trained model on one process, greedy or top-p.

    hp-generate --model HF_FOLDER --prompt "Hello" [--chat] [--max-new-tokens 32] [--top-p 0.9 --temperature 0.8]
    hp-generate --config CFG.toml [--checkpoint STEP_DIR] --prompt "Hello"

``--model``: a Hugging Face folder (``save_pretrained``, ``hp-ckpt convert --to hf`` or ``[checkpoint] export_hf``):
the model through its adapter (``config.json``), the tokenizer from the folder. ``--config``: a trainer config:
the model its ``[model]`` section builds (``init_from``'s ``config.json``, or ``name``/``flavor`` with the
vocabulary of the checkpoint), the weights of ``--checkpoint`` (default: the latest of ``[checkpoint] folder``; any
format ``hp-ckpt`` reads, its ``model`` subtree), the tokenizer of ``[data] tokenizer`` / ``init_from``.
``--chat`` renders the prompt as a user turn with the tokenizer's chat template. Greedy by default;
``--top-p P`` samples from the smallest set of tokens whose probability reaches ``P`` (``--temperature``,
``--seed``). Generation stops at the tokenizer's end token or after ``--max-new-tokens``. Misuse exits 2 with one
line.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, List, Optional, Sequence, Tuple

__all__ = ["main", "generate", "load_model_and_tokenizer"]

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hp-generate", description="Sample from a trained model (one process).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a Hugging Face model folder")
    src.add_argument("--config", help="a trainer TOML config (with --checkpoint, or its latest checkpoint)")
    p.add_argument("--checkpoint", help="a checkpoint folder (step-N) of the run of --config")
    p.add_argument("--prompt", action="append", required=True, help="the prompt (repeat for several)")
    p.add_argument("--chat", action="store_true", help="render the prompt as a user turn (chat template)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--top-p", type=float, default=0.0, help="nucleus sampling (0: greedy)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    return p


def generate(model: Any, ids: List[int], *, max_new_tokens: int, eos_id: Optional[int] = None, top_p: float = 0.0,
             temperature: float = 1.0, generator: Any = None) -> List[int]:
    """The new token ids after ``ids`` (the full sequence recomputed each step: small models, no KV cache)."""
    import torch  # pylint: disable=import-outside-toplevel
    out: List[int] = []
    seq = list(ids)
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            window = seq[-limit:] if limit else seq
            logits = model(torch.tensor([window]))[0, -1].float()
            if top_p <= 0:
                nxt = int(logits.argmax())
            else:
                probs = torch.softmax(logits / max(temperature, 1e-6), -1)
                sorted_p, order = probs.sort(descending=True)
                keep = (sorted_p.cumsum(-1) - sorted_p) < top_p  # the smallest prefix reaching top_p
                sorted_p = sorted_p * keep
                nxt = int(order[torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=generator)])
            if eos_id is not None and nxt == eos_id:
                break
            out.append(nxt)
            seq.append(nxt)
    return out


def _from_hf(folder: str) -> Tuple[Any, Any]:
    from hyper_parallel.checkpoint import load_hf  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.hf_folder import resolve_model  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.models import model_spec  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.tokenizer import load_hf_tokenizer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer._torch.finetune import hf_model_config  # noqa  # pylint: disable=C0415
    name, _ = resolve_model(folder)
    spec = model_spec(name)
    mcfg, _ = hf_model_config(spec, folder)
    model = spec.model_cls(mcfg)
    load_hf(model, folder, spec.state_dict_adapter(mcfg))
    return model.eval(), load_hf_tokenizer(folder)


def _latest(folder: str) -> str:
    steps = sorted((n for n in os.listdir(folder) if n.startswith("step-")), key=lambda n: int(n.split("-")[1])) \
        if os.path.isdir(folder) else []
    if not steps:
        raise ValueError(f"--config: no checkpoint (step-N) in {folder}; give --checkpoint")
    return os.path.join(folder, steps[-1])


def _from_config(path: str, checkpoint: Optional[str]) -> Tuple[Any, Any]:
    from hyper_parallel.checkpoint._torch.convert import read_full, select  # noqa  # pylint: disable=C0415
    from hyper_parallel.trainer.config import load_config  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.finetune import load_text_tokenizer  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.models import build_model_config, model_spec  # noqa  # pylint: disable=C0415
    from hyper_parallel.trainer._torch.finetune import hf_model_config  # noqa  # pylint: disable=C0415
    cfg = load_config(path)
    ckpt = checkpoint or _latest(cfg.checkpoint_folder)
    weights = select(read_full(ckpt), "model")
    spec = model_spec(cfg.model.name)
    if cfg.model.init_from:
        mcfg, _ = hf_model_config(spec, cfg.model.init_from[3:])
    else:
        embed = weights.get("model.embed_tokens.weight")
        if embed is None:
            raise ValueError(f"--checkpoint {ckpt}: no model.embed_tokens.weight in its model subtree")
        mcfg = build_model_config(cfg.model.name, cfg.model.flavor, vocab_size=int(embed.shape[0]),
                                  max_position_embeddings=max(cfg.training.seq_len, 128))
    model = spec.model_cls(mcfg)
    model.load_state_dict(weights, strict=False)
    return model.eval(), load_text_tokenizer(cfg)


def load_model_and_tokenizer(model: Optional[str] = None, config: Optional[str] = None,
                             checkpoint: Optional[str] = None) -> Tuple[Any, Any]:
    """(model in eval mode, :class:`hyper_parallel.trainer.tokenizer.TextTokenizer`) of an HF folder or of a
    trainer config and checkpoint."""
    if model is not None:
        if not os.path.isdir(model):
            raise ValueError(f"--model: {model!r} is not a folder")
        return _from_hf(model)
    return _from_config(config, checkpoint)


def _prompt_ids(tok: Any, prompt: str, chat: bool) -> List[int]:
    if chat:
        text = tok.render_chat([{"role": "user", "content": prompt}], add_generation_prompt=True)
        return tok.encode(text)
    return ([tok.bos_id] if tok.bos_id is not None else []) + tok.encode(prompt)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``hp-generate``."""
    args = _parser().parse_args(argv)
    if args.checkpoint and not args.config:
        print("hp-generate: error: --checkpoint goes with --config", file=sys.stderr)
        return EXIT_USAGE
    if args.max_new_tokens < 1 or not 0 <= args.top_p <= 1 or args.temperature <= 0:
        print("hp-generate: error: expected --max-new-tokens >= 1, 0 <= --top-p <= 1, --temperature > 0",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        import torch  # pylint: disable=import-outside-toplevel
        model, tok = load_model_and_tokenizer(args.model, args.config, args.checkpoint)
        gen = torch.Generator().manual_seed(args.seed)
        for prompt in args.prompt:
            ids = _prompt_ids(tok, prompt, args.chat)
            new = generate(model, ids, max_new_tokens=args.max_new_tokens, eos_id=tok.eos_id, top_p=args.top_p,
                           temperature=args.temperature, generator=gen)
            print(f"{prompt} -> {tok.decode(new)}")
    except (ValueError, OSError) as exc:
        print(f"hp-generate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
