# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-ckpt``: inspect and convert checkpoints offline (one process, no process group).

    hp-ckpt inspect CKPT [--verify] [--json]
    hp-ckpt convert SRC DST --to hf|torch|dcp [--dtype bfloat16] [--prefix model] [--adapter MODULE:ATTR]
                                            [--max-file-bytes N] [--torch-format]

``CKPT``/``SRC`` is a hyper-parallel folder (``metadata.json``), a torch DCP folder (``.metadata``) or a
Hugging Face folder (``*.safetensors``). No resharding step exists or is needed: any layout loads any
checkpoint (``hyper_parallel.checkpoint.load`` reshards while it reads).

Exit codes: 0 ok, 1 the checkpoint is damaged (``--verify``) or cannot be converted, 2 usage error.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, Dict, List, Optional

import click
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from hyper_parallel.checkpoint.format import METADATA_FILE, CheckpointError, numel
from hyper_parallel.checkpoint.hf import INDEX_FILE, natural_key, read_index
from hyper_parallel.checkpoint.manifest import manifest_problems, read_metadata
from hyper_parallel.checkpoint.safetensors_io import read_header, read_range

__all__ = ["cli", "main", "detect_format", "summarize", "fit_adapter"]

FORMATS = ("hyper-parallel", "torch-dcp", "hf")


def detect_format(path: str) -> str:
    """``hyper-parallel``, ``torch-dcp`` or ``hf`` for a checkpoint folder (clear error otherwise)."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: no such checkpoint folder")
    if os.path.isfile(os.path.join(path, METADATA_FILE)):
        return "hyper-parallel"
    if os.path.isfile(os.path.join(path, ".metadata")):
        return "torch-dcp"
    if os.path.isfile(os.path.join(path, INDEX_FILE)) or any(n.endswith(".safetensors") for n in os.listdir(path)):
        return "hf"
    raise CheckpointError(f"{path}: not a checkpoint (no {METADATA_FILE}, .metadata or *.safetensors)")


def _torch_impl(name: str) -> Any:
    return getattr(importlib.import_module("hyper_parallel.checkpoint._torch.convert"), name)


def _read_ours(path: str):
    return read_metadata(path, check_files=False)


def summarize(path: str) -> Dict[str, Any]:
    """``{format, tensors: {name: {dtype, shape, shards, bytes}}, objects: {name: value or encoding},
    total_bytes, files}`` of a checkpoint folder."""
    fmt = detect_format(path)
    out: Dict[str, Any] = {"format": fmt, "path": os.path.abspath(path), "tensors": {}, "objects": {}}
    if fmt == "hyper-parallel":
        md = _read_ours(path)
        for name, t in md.tensors.items():
            out["tensors"][name] = {"dtype": t.dtype, "shape": list(t.shape), "shards": len(t.chunks),
                                    "bytes": t.nbytes}
        for name, o in md.objects.items():
            out["objects"][name] = o.value if o.file is None else f"<{o.encoding}, {o.length} bytes>"
        out["world_size"] = md.world_size
        out["files"] = dict(md.files)
    elif fmt == "torch-dcp":
        summary = _torch_impl("torch_dcp_summary")(path)
        from hyper_parallel.checkpoint.format import dtype_itemsize
        for name, t in summary["tensors"].items():
            out["tensors"][name] = {"dtype": t["dtype"], "shape": t["shape"], "shards": t["chunks"],
                                    "bytes": numel(t["shape"]) * dtype_itemsize(t["dtype"])}
        out["objects"] = {name: "<torch.save>" for name in summary["objects"]}
    else:
        _summarize_hf(path, out)
    out["total_bytes"] = sum(t["bytes"] for t in out["tensors"].values())
    return out


def _summarize_hf(path: str, out: Dict[str, Any]) -> None:
    from hyper_parallel.checkpoint.format import SAFETENSORS_TO_DTYPE, dtype_itemsize
    weight_map = read_index(path)
    headers = {f: read_header(os.path.join(path, f))[0] for f in sorted(set(weight_map.values()))}
    for name, f in weight_map.items():
        entry = headers[f].get(name)
        if entry is None:
            raise CheckpointError(f"{os.path.join(path, f)}: the index names {name!r}, the file does not hold it")
        dtype = SAFETENSORS_TO_DTYPE.get(entry["dtype"], entry["dtype"])
        out["tensors"][name] = {"dtype": dtype, "shape": entry["shape"], "shards": 1, "file": f,
                                "bytes": numel(entry["shape"]) * dtype_itemsize(dtype)}
    out["files"] = {f: os.path.getsize(os.path.join(path, f)) for f in headers}


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=console, transient=False)


def verify(path: str, console: Console) -> List[str]:
    """Verify the checksum of every chunk and object of a hyper-parallel checkpoint; returns the problems found."""
    md = _read_ours(path)
    problems = [str(p) for p in manifest_problems(path, md)]
    total = sum(c.nbytes for t in md.tensors.values() for c in t.chunks)
    with _progress(console) as prog:
        task = prog.add_task("verify", total=total)
        for name, t in md.tensors.items():
            for c in t.chunks:
                try:
                    read_range(os.path.join(path, c.file), c.data_offset, c.nbytes, c.checksum, f"tensor {name!r}",
                               md.checksum_algorithm)
                except CheckpointError as exc:
                    problems.append(str(exc))
                prog.advance(task, c.nbytes)
        for name, o in md.objects.items():
            if o.file is not None:
                try:
                    read_range(os.path.join(path, o.file), o.offset, o.length, o.checksum, f"object {name!r}",
                               md.checksum_algorithm)
                except CheckpointError as exc:
                    problems.append(str(exc))
    try:
        md.validate()
    except CheckpointError as exc:
        problems.append(str(exc))
    return problems


def _print_summary(s: Dict[str, Any], console: Console) -> None:
    table = Table(title=f"{s['path']} ({s['format']})")
    for col in ("tensor", "dtype", "shape", "shards", "bytes"):
        table.add_column(col, justify="right" if col in ("shards", "bytes") else "left")
    for name in sorted(s["tensors"], key=natural_key):
        t = s["tensors"][name]
        table.add_row(name, t["dtype"], str(tuple(t["shape"])), str(t["shards"]), f"{t['bytes']:,}")
    console.print(table)
    for name in sorted(s["objects"], key=natural_key):
        console.print(f"object {name} = {s['objects'][name]!r}")
    files = s.get("files", {})
    console.print(f"{len(s['tensors'])} tensors, {len(s['objects'])} objects, {s['total_bytes']:,} bytes of tensors"
                  + (f", {len(files)} files ({sum(files.values()):,} bytes)" if files else "")
                  + (f", saved by {s['world_size']} ranks" if "world_size" in s else ""))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """hp-ckpt: inspect and convert checkpoints (hyper-parallel, torch DCP, Hugging Face) offline.

    \b
    Any layout loads any checkpoint: there is no reshard command (load reshards while it reads).
    Exit codes: 0 ok, 1 damaged or not convertible, 2 usage error.
    """


@cli.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--verify", "do_verify", is_flag=True, help="read every chunk and verify its checksum")
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def inspect(path: str, do_verify: bool, as_json: bool) -> None:
    """List tensors (dtype, shape, shards, bytes), objects and the total size of a checkpoint."""
    console = Console(stderr=as_json)
    try:
        s = summarize(path)
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(s, indent=1, sort_keys=True, default=str))
    else:
        _print_summary(s, console)
    if do_verify:
        if s["format"] != "hyper-parallel":
            raise click.UsageError(f"--verify checks hyper-parallel checkpoints (a checksum per chunk); {path} is "
                                   f"{s['format']}")
        problems = verify(path, console)
        for p in problems:
            console.print(f"[red]{p}[/red]", soft_wrap=True)
        if problems:
            sys.exit(1)
        console.print("[green]every chunk and object matches its checksum[/green]")


def _load_adapter(spec: Optional[str]) -> Any:
    if not spec:
        return None
    module, _, attr = spec.partition(":")
    if not attr:
        raise click.BadParameter(f"{spec!r}: expected MODULE:ATTR (an adapter, or a callable returning one)",
                                 param_hint="--adapter")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise click.BadParameter(f"{spec!r}: {exc}", param_hint="--adapter") from exc
    adapter = obj() if callable(obj) and not hasattr(obj, "to_hf") else obj
    if not hasattr(adapter, "to_hf") or not hasattr(adapter, "from_hf"):
        raise click.BadParameter(f"{spec!r} is not a StateDictAdapter (needs to_hf/from_hf)", param_hint="--adapter")
    return adapter


@cli.command()
@click.argument("src", type=click.Path(exists=True, file_okay=False))
@click.argument("dst", type=click.Path())
@click.option("--to", "to", type=click.Choice(["hf", "torch", "dcp"]), required=True, help="destination format")
@click.option("--dtype", default=None, help="convert floating tensors (hf only), e.g. bfloat16")
@click.option("--prefix", default=None, help="subtree to export to hf (default: 'model' if present, else all)")
@click.option("--adapter", default=None, help="MODULE:ATTR of the model's StateDictAdapter (hf keys)")
@click.option("--max-file-bytes", type=int, default=5 * 1024 ** 3, show_default=True, help="size of each hf file")
@click.option("--torch-format", is_flag=True, help="with --to dcp: torch's own DCP format instead of ours")
@click.option("--tokenizer", "tokenizer", default=None, type=click.Path(exists=True, file_okay=False),
              help="with --to hf: copy the tokenizer files (and generation_config.json) of this HF folder")
def convert(src: str, dst: str, to: str, dtype: Optional[str], prefix: Optional[str], adapter: Optional[str],
            max_file_bytes: int, torch_format: bool, tokenizer: Optional[str]) -> None:  # noqa  # pylint: disable=R0913,R0917
    """Convert SRC (hyper-parallel / torch DCP / Hugging Face) to DST: hf folder, one torch file, or a DCP folder.

    \b
    --to hf: config.json comes from the adapter, sized to the tensors (the vocabulary of the embedding);
    generation_config.json is written (or copied with --tokenizer). --to dcp from an hf folder nests the
    model's keys under "model", as the trainer's checkpoints hold them."""
    console = Console(stderr=True)
    ad = _load_adapter(adapter)
    if dtype is not None and to != "hf":
        raise click.UsageError("--dtype applies to --to hf")
    try:
        fmt = detect_format(src)
        with _progress(console) as prog:
            task = prog.add_task(f"read {fmt}", total=summarize(src)["total_bytes"] or 1)
            sd = _torch_impl("read_full")(src, lambda n: prog.advance(task, n))
            if to == "hf":
                _convert_to_hf(sd, dst, fmt, ad, dtype, prefix, max_file_bytes, prog)
                _hf_side_files(dst, tokenizer)
            elif to == "torch":
                _torch_impl("write_torch")(sd, dst)
            else:
                if fmt == "hf":  # the trainer's layout: {"model": {model key: tensor}}
                    sd = {"model": ad.from_hf(sd) if ad is not None else sd}
                _torch_impl("write_dcp")(sd, dst, torch_format=torch_format)
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(f"[green]{src} ({fmt}) -> {dst} ({to}{', torch format' if torch_format else ''})[/green]")


def fit_adapter(ad: Any, tensors: Dict[str, Any]) -> Any:
    """``ad`` with its model config sized to the tensors: the vocabulary is the embedding's row count (a trainer
    sizes it from its tokenizer, not from the flavor); other disagreeing sizes are an error naming them."""
    import dataclasses  # pylint: disable=import-outside-toplevel
    config = getattr(ad, "model_config", None)
    embed = tensors.get("model.embed_tokens.weight")
    if config is None or embed is None or not dataclasses.is_dataclass(config):
        return ad
    changes = {}
    if tuple(embed.shape) != (config.vocab_size, config.hidden_size):
        if embed.shape[1] != config.hidden_size:
            raise CheckpointError(f"--adapter: the adapter's hidden_size {config.hidden_size} does not match the "
                                  f"checkpoint's embedding {tuple(embed.shape)}")
        changes["vocab_size"] = int(embed.shape[0])
    layers = {int(k.split(".")[2]) for k in tensors if k.startswith("model.layers.")}
    if layers and len(layers) != config.num_hidden_layers:
        raise CheckpointError(f"--adapter: the adapter's num_hidden_layers {config.num_hidden_layers} does not match "
                              f"the checkpoint's {len(layers)} layers")
    if not changes:
        return ad
    kwargs = {"head_dim": 0} if getattr(config, "head_dim_derived", False) else {}
    return type(ad)(dataclasses.replace(config, **changes, **kwargs))


def _hf_side_files(dst: str, tokenizer: Optional[str]) -> None:
    """Tokenizer files and generation_config.json next to an exported HF folder."""
    import shutil  # pylint: disable=import-outside-toplevel
    from hyper_parallel.trainer.hf_folder import TOKENIZER_FILES  # pylint: disable=import-outside-toplevel
    copied = []
    for name in (TOKENIZER_FILES + ("generation_config.json",)) if tokenizer else ():
        if os.path.isfile(os.path.join(tokenizer, name)):
            shutil.copyfile(os.path.join(tokenizer, name), os.path.join(dst, name))
            copied.append(name)
    if "generation_config.json" not in copied:
        doc: Dict[str, Any] = {"_from_model_config": True}
        config_path = os.path.join(dst, "config.json")
        if os.path.isfile(config_path):
            with open(config_path, encoding="utf-8") as fh:
                config = json.load(fh)
            doc.update({k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config})
        with open(os.path.join(dst, "generation_config.json"), "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2)


def _convert_to_hf(sd, dst, fmt, ad, dtype, prefix, max_file_bytes, prog) -> None:  # pylint: disable=too-many-arguments
    tensors = _torch_impl("select")(sd, prefix)
    if fmt == "hf" and ad is not None:
        tensors = ad.from_hf(tensors)
    if ad is not None:
        ad = fit_adapter(ad, tensors)
    task = prog.add_task("write hf", total=sum(v.numel() * v.element_size() for v in tensors.values()) or 1)
    _torch_impl("write_hf")(tensors, dst, adapter=ad, dtype=dtype, max_file_bytes=max_file_bytes,
                            progress=lambda n: prog.advance(task, n))


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``hp-ckpt``; returns the exit code."""
    try:
        cli.main(args=argv, prog_name="hp-ckpt", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
