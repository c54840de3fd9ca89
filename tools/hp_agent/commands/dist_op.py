# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent dist-op``: the distributed-op pipeline (analyze -> confirm -> dev -> verify).

Exit codes: 0 ok (plan written, confirmed, dev green, verify clean), 1 findings (dev failed, verify found
false positives), 2 refused or bad input (unknown op, draft/stale plan, [TBD] left), 3 internal error.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional, Tuple

import click

from hp_agent.cliutil import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, err_console, internal_errors, json_option, \
    root_or_exit
from hp_agent.dist_op.interface import AnalyzeError
from hp_agent.dist_op.layout import LayoutError, load_layout
from hp_agent.dist_op.plan import PlanError, confirm_plan, git_identity, load_plan, plan_state


def _layout():
    try:
        return load_layout(root_or_exit())
    except LayoutError as exc:
        err_console.print(f"hp-agent dist-op: {exc}")
        sys.exit(EXIT_USAGE)


def _refuse(exc: Exception) -> None:
    err_console.print(f"hp-agent dist-op: {exc}")
    sys.exit(EXIT_USAGE)


def _plan_path(layout, plan: str) -> Path:
    path = Path(plan)
    return path if path.is_absolute() else (Path.cwd() / path if (Path.cwd() / path).exists() else layout.root / path)


@click.group(name="dist-op")
def cli_group() -> None:
    """Distributed ops: analyze an op into a plan, confirm it, develop and test it, verify the registry."""


@cli_group.command("analyze")
@click.argument("ops", nargs=-1)
@click.option("--force", is_flag=True, help="Overwrite a confirmed plan (it becomes a draft again).")
@click.option("--from-coverage", "coverage", type=click.Path(dir_okay=False), default=None,
              help="Batch: every op docs/op_coverage.md marks unsupported (no distributed rule).")
@click.option("--family", default=None, help="With --from-coverage: torch, nn.functional, special, linalg or fft.")
@click.option("--limit", type=int, default=None, help="With --from-coverage: at most N ops.")
@json_option
@internal_errors
def analyze_cmd(ops: Tuple[str, ...], force: bool, coverage: str, family: str, limit: int, as_json: bool) -> None:
    """Probe OPS (torch names; spellings of one op share a plan) and write plans/<op>.md, status draft."""
    from hp_agent.dist_op.analyze import analyze
    layout = _layout()
    if bool(ops) == bool(coverage):
        _refuse(ValueError("name op(s) or pass --from-coverage FILE (not both)"))
    try:
        if coverage:
            results, skipped = _analyze_batch(layout, Path(coverage), family, limit, force)
        else:
            results, skipped = analyze(list(ops), layout, force=force), []
    except (AnalyzeError, PlanError) as exc:
        _refuse(exc)
    for op, why in skipped:
        err_console.print(f"hp-agent dist-op: {op}: skipped: {why}")
    if as_json:
        click.echo(json.dumps({"ok": True, "plans": [r.to_dict() for r in results]}, indent=2))
        return
    for r in results:
        click.echo(f"{r.plan_path}: draft plan for {r.op} ({r.seconds:.1f} s), {len(r.tbd)} [TBD] item(s)")
        for item in r.tbd:
            click.echo(f"  {item}")
    click.echo("Stop here: a person reviews the plan(s), decides every [TBD], then runs "
               "`hp-agent dist-op confirm <plan>`.")


def _analyze_batch(layout, coverage: Path, family: str, limit: int, force: bool):
    """Analyse each unsupported op of a coverage report on its own (one op's refusal skips that op only)."""
    from hp_agent.dist_op.analyze import analyze
    from hp_agent.dist_op.batch import unsupported_ops
    results, skipped = [], []
    for op in unsupported_ops(coverage if coverage.is_absolute() else layout.root / coverage, family, limit):
        try:
            results.extend(analyze([op], layout, force=force))
        except (AnalyzeError, PlanError) as exc:
            skipped.append((op, str(exc)))
        except Exception as exc:  # pylint: disable=broad-except  # one op's crash (a torch error) skips that op
            skipped.append((op, f"analysis raised {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
    return results, skipped


@cli_group.command("review")
@click.argument("plans", nargs=-1)
@json_option
@internal_errors
def review_cmd(plans: Tuple[str, ...], as_json: bool) -> None:
    """One summary of PLANS (default: every draft plan): op, path and rule, accepted strategies, conditions,
    open [TBD] - to decide and confirm a batch in one pass."""
    from hp_agent.dist_op.batch import review_rows
    layout = _layout()
    paths = [_plan_path(layout, p) for p in plans] or [
        p for p in sorted(layout.path(layout.plans_dir).glob("*.md")) if not p.name.endswith(".report.md")]
    try:
        loaded = [load_plan(p) for p in paths]
    except PlanError as exc:
        _refuse(exc)
    rows = review_rows([p for p in loaded if plans or plan_state(p) == "draft"])
    if as_json:
        click.echo(json.dumps({"ok": True, "plans": rows}, indent=2))
        return
    _print_review(rows)


def _print_review(rows) -> None:
    for r in rows:
        click.echo(f"{r['op']} [{r['status']}] path {r['path']} {r['rule']}"
                   + ("" if r["differentiable"] else ", forward-only (no derivative)"))
        click.echo(f"  strategies: {', '.join(r['strategies']) or 'none'}")
        for c in r["conditions"]:
            click.echo(f"  generalised: {c}")
        for t in r["tbd"]:
            click.echo(f"  {t}")
    click.echo(f"{len(rows)} plan(s); decide, then `hp-agent dist-op confirm --batch FILE [--set KEY=VALUE]`.")


@cli_group.command("confirm")
@click.argument("plan", required=False)
@click.option("--by", "who", default="", help="Who confirms (default: the git user).")
@click.option("--batch", "batch", type=click.Path(dir_okay=False), default=None,
              help="Confirm every plan listed in this file (one path a line).")
@click.option("--set", "decisions", multiple=True, help="With --batch: KEY=VALUE decided for every plan first.")
@json_option
@internal_errors
def confirm_cmd(plan: str, who: str, batch: str, decisions: Tuple[str, ...], as_json: bool) -> None:
    """Record who confirmed PLAN, when, and its sha256 (refused while [TBD] remain)."""
    layout = _layout()
    if bool(plan) == bool(batch):
        _refuse(ValueError("name a plan or pass --batch FILE (not both)"))
    if batch:
        _confirm_batch(layout, Path(batch), who, decisions, as_json)
        return
    try:
        parsed = load_plan(_plan_path(layout, plan))
        record = confirm_plan(parsed, who or git_identity(layout.root))
    except PlanError as exc:
        _refuse(exc)
    parsed.save()
    if as_json:
        click.echo(json.dumps({"ok": True, "plan": str(parsed.path), **record}, indent=2))
    else:
        click.echo(f"{parsed.path}: confirmed by {record['by']} at {record['at']} (sha256 {record['sha256'][:12]})")


def _confirm_batch(layout, batch: Path, who: str, decisions: Tuple[str, ...], as_json: bool) -> None:
    from hp_agent.dist_op.batch import confirm_batch, read_batch
    try:
        records = confirm_batch(read_batch(batch), who or git_identity(layout.root), decisions)
    except PlanError as exc:
        _refuse(exc)
    ok = all(r["confirmed"] for r in records)
    if as_json:
        click.echo(json.dumps({"ok": ok, "plans": records}, indent=2))
    else:
        for r in records:
            click.echo(f"{r['plan']}: " + (f"confirmed by {r['by']} at {r['at']} (sha256 {r['sha256'][:12]})"
                                           if r["confirmed"] else f"NOT confirmed: {r['error']}"))
    sys.exit(EXIT_OK if ok else EXIT_FINDINGS)


@cli_group.command("set")
@click.argument("plan")
@click.argument("assignments", nargs=-1, required=True)
@json_option
@internal_errors
def set_cmd(plan: str, assignments: Tuple[str, ...], as_json: bool) -> None:
    """Decide front-matter fields of PLAN: KEY=VALUE (dotted keys), e.g. ``frontends.mindspore.in_scope=false``.
    The value is a string unless the field is a bool, number, list or mapping (then it must be one).
    A confirmed plan becomes stale (confirm it again)."""
    from hp_agent.dist_op.plan import set_field
    layout = _layout()
    try:
        parsed = load_plan(_plan_path(layout, plan))
        changed = [set_field(parsed, item) for item in assignments]
    except PlanError as exc:
        _refuse(exc)
    parsed.save()
    if as_json:
        click.echo(json.dumps({"ok": True, "plan": str(parsed.path), "set": changed}, indent=2))
    else:
        for key, value in changed:
            click.echo(f"{parsed.path}: {key} = {value!r}")


@cli_group.command("status")
@click.option("--not-green", "only_bad", is_flag=True, help="Only the plans that are not green.")
@json_option
@internal_errors
def status_cmd(only_bad: bool, as_json: bool) -> None:
    """Every plan under plans/: its state (draft, confirmed, stale), whether it is registered, and whether it
    is green, read from the tree (registry entry and case files as this plan renders them, sha included)."""
    from hp_agent.dist_op.green import PlanTruth, plan_truths
    rows = []
    for truth in plan_truths(_layout()):
        if isinstance(truth, PlanTruth):
            rows.append(truth.to_dict())
        else:
            rows.append({"plan": truth[0], "state": "invalid", "green": False, "reason": truth[1]})
    if only_bad:
        rows = [r for r in rows if not r["green"]]
    if as_json:
        click.echo(json.dumps({"ok": True, "plans": rows}, indent=2))
        return
    for r in rows:
        click.echo(f"{r['plan']}: {r['state']}, " + ("green" if r["green"] else f"not green: {r['reason']}"))
    green = sum(1 for r in rows if r["green"])
    click.echo(f"{len(rows)} plan(s): {green} green, {len(rows) - green} not green")


@cli_group.command("dev")
@click.argument("plan", required=False)
@click.option("--continue", "resume", is_flag=True, help="Keep the files (your fix) and re-run every step.")
@click.option("--batch", "batch", type=click.Path(dir_okay=False), default=None,
              help="Every plan listed in this file: all UT in one pytest run, all ST in one (one worker pool).")
@click.option("--commit", "do_commit", is_flag=True,
              help="When green, commit the op's files (plan, report, YAML, cases, tests) as one commit with the "
                   "plan's message, e.g. `feat(ops): distributed torch.gcd (rule, YAML, UT, ST)`.")
@json_option
@internal_errors
def dev_cmd(plan: str, resume: bool, batch: str, do_commit: bool, as_json: bool) -> None:  # noqa: PLR0913
    """From a confirmed PLAN: write rule/YAML/UT/ST, run UT, torch gloo ST and gate checks, write the report."""
    from hp_agent.dist_op.runner import dev
    layout = _layout()
    if bool(plan) == bool(batch):
        _refuse(ValueError("name a plan or pass --batch FILE (not both)"))
    if batch:
        _dev_batch(layout, Path(batch), as_json)
        return
    try:
        parsed = load_plan(_plan_path(layout, plan))
        result = dev(parsed, layout, resume=resume)
    except PlanError as exc:
        _refuse(exc)
    committed = commit_op(layout, parsed, result) if do_commit and result.green else None
    if as_json:
        click.echo(json.dumps({"ok": result.green, **result.to_dict(), "commit": committed}, indent=2))
    else:
        for r in result.runs:
            click.echo(f"{'ok  ' if r.ok else 'FAIL'} {r.name}: {r.summary}")
            if not r.ok and (r.first_failure or r.placements):
                click.echo(f"     first failure: {r.first_failure} {r.placements}".rstrip())
        click.echo(f"{result.op}: {'GREEN' if result.green else 'FAILED'} in {result.seconds:.1f} s; "
                   f"report {result.report}")
        if committed:
            click.echo(f"committed {committed['commit'][:12]}: {committed['message']}")
    sys.exit(EXIT_OK if result.green else EXIT_FINDINGS)


def op_commit_message(plan) -> str:
    """The commit of one op, from its plan: ``feat(ops): distributed torch.gcd (rule, YAML, UT, ST)``."""
    rule = plan.meta.get("rule") if isinstance(plan.meta.get("rule"), dict) else {}
    parts = (["rule"] if rule.get("file") or plan.meta.get("path") in ("B", "C") else []) + ["YAML", "UT", "ST"]
    return f"feat(ops): distributed {plan.op} ({', '.join(parts)})"


def commit_op(layout, plan, result) -> dict:
    """Commit exactly the op's files (the plan, its report and the generated files) with the plan's message."""
    from hp_agent.autogit import flows  # pylint: disable=import-outside-toplevel
    git = flows.repo_git(layout.root)
    paths = [str(plan.path.relative_to(layout.root)), str(result.report.relative_to(layout.root)), *result.files]
    existing = [p for p in dict.fromkeys(paths) if layout.path(p).exists()]
    commit_plan = flows.plan_commit(git, existing)
    return flows.commit(git, commit_plan, op_commit_message(plan))


@cli_group.command("synth")
@click.argument("ops", nargs=-1, required=True)
@click.option("--no-opinfo", is_flag=True, help="Only the pipeline's own samples (skip PyTorch's OpInfo database).")
@json_option
@internal_errors
def synth_cmd(ops: Tuple[str, ...], no_opinfo: bool, as_json: bool) -> None:
    """Synthesise OPS' sharding strategies on simulated meshes and print the registry entry that executes them."""
    from hp_agent.dist_op.plan import dump_yaml
    from hp_agent.dist_op.synth import synth_op
    results = []
    for op in ops:
        try:
            results.append(synth_op(op, use_opinfo=not no_opinfo))
        except AnalyzeError as exc:
            _refuse(exc)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in results], indent=2, default=str))
    else:
        for r in results:
            d = r.to_dict()
            click.echo(f"{r.op}: {d['samples']} sample call(s) (OpInfo {d['sources']['opinfo']}, pipeline "
                       f"{d['sources']['pipeline']}), differentiable {d['differentiable']}, {d['seconds']} s")
            for key, rows in d["table"].items():
                click.echo(f"  {key}: {', '.join(rows)}   [evidence {d['evidence'][key]}]")
            for line in r.conditions + ([f"factor rule {r.equation}"] if r.equation else []):
                click.echo(f"  generalised: {line}")
            if r.entry:
                click.echo("  registry entry:\n" + "\n".join("    " + line for line in
                                                            dump_yaml({r.op: r.entry}).splitlines()))
            for q in r.questions:
                click.echo(f"  [TBD] {q}")
    sys.exit(EXIT_OK if all(r.entry for r in results) else EXIT_FINDINGS)


def _dev_batch(layout, batch: Path, as_json: bool) -> None:
    from hp_agent.dist_op.batch import dev_batch, read_batch
    try:
        rows = dev_batch(read_batch(batch), layout, progress=None if as_json else click.echo)
    except PlanError as exc:
        _refuse(exc)
    ok = all(r.green for r in rows)
    if as_json:
        click.echo(json.dumps({"ok": ok, "ops": [r.to_dict() for r in rows]}, indent=2))
    else:
        click.echo("| op | UT | ST | MindSpore | machine time (s) | human actions | result |")
        click.echo("|---|---|---|---|---|---|---|")
        for r in rows:
            click.echo(f"| `{r.op}` | {r.ut} | {r.st} | {r.mindspore} | {r.seconds:.1f} | {r.human_actions} | "
                       f"{'GREEN' if r.green else 'FAILED'} |")
    sys.exit(EXIT_OK if ok else EXIT_FINDINGS)


@cli_group.command("verify")
@click.argument("ops", nargs=-1)
@click.option("--all", "all_ops", is_flag=True, help="Every registered op.")
@click.option("--timeout", "timeout", type=click.FloatRange(min=0), default=None, show_default="60",
              help="Seconds one op may take (0: no limit); a timed-out op is listed with its partial counts.")
@click.option("--progress/--no-progress", default=None,
              help="Progress on stderr: slow ops and every 50th (default: on with --all).")
@click.option("--markdown", "markdown", type=click.Path(dir_okay=False), default=None,
              help="Also write the table as Markdown to this file (e.g. docs/dist_op_verify.md).")
@json_option
@internal_errors
def verify_cmd(ops: Tuple[str, ...], all_ops: bool, timeout: Optional[float], progress: Optional[bool],
               markdown: str, as_json: bool) -> None:
    """Probe registered ops and compare with their rules: false positives (bugs) and false negatives."""
    from hp_agent.dist_op.verify import DEFAULT_TIMEOUT, render_markdown, verify
    if bool(ops) == all_ops:
        _refuse(ValueError("name op(s) or pass --all (not both)"))
    layout = _layout()
    show = all_ops if progress is None else progress
    limit = DEFAULT_TIMEOUT if timeout is None else timeout
    try:
        report = verify(list(ops) if ops else None, timeout=limit,
                        progress=_verify_progress(time.monotonic()) if show else None)
    except KeyError as exc:
        _refuse(ValueError(f"not registered: {exc.args[0]}"))
    if markdown:
        target = Path(markdown)
        target = target if target.is_absolute() else layout.root / target
        target.write_text(render_markdown(report), encoding="utf-8")
    ok = _verify_ok(report, named=bool(ops))
    if as_json:
        click.echo(json.dumps({"ok": ok, **report.to_dict()}, indent=2))
    else:
        for line in report.lines():
            click.echo(line)
    sys.exit(EXIT_OK if ok else EXIT_FINDINGS)


def _verify_ok(report, named: bool) -> bool:
    """No false positive, and: named ops each probed in full; ``--all`` probed something (ops without a sample
    and timed-out ops are listed, with how to fix them, without failing the run)."""
    if report.false_positives:
        return False
    if named:
        return not report.unprobed and not report.timed_out
    return any(o.status == "probed" and o.checked for o in report.ops)


SLOW_OP_S = 10.0


def _verify_progress(start: float):
    """``verify``'s progress callback: a stderr line for a slow or timed-out op and for every 50th op."""
    def report(i: int, total: int, res) -> None:
        elapsed = time.monotonic() - start
        if res.seconds >= SLOW_OP_S or res.timed_out:
            err_console.print(f"  [{i}/{total}] {res.op}: {res.seconds:.1f} s"
                              + (" (timed out, partial)" if res.timed_out else ""), markup=False)
        if i % 50 == 0 or i == total:
            left = elapsed / i * (total - i)
            err_console.print(f"verify: {i}/{total} ops in {elapsed:.0f} s (about {left:.0f} s left)", markup=False)
    return report


@cli_group.command("resynth")
@click.argument("ops", nargs=-1)
@click.option("--from-verify", "from_verify", is_flag=True,
              help="Every op `verify --all` lists with false negatives (runs verify first).")
@click.option("--write/--no-write", default=True, show_default=True,
              help="Write plan updates to <plans_dir>/updates/<op>.yaml.")
@click.option("--all-partials", is_flag=True, help="Also propose P(avg|max|min) inputs (verify and ST check P(sum)).")
@click.option("--conditional", is_flag=True,
              help="Also derive conditional strategies ('S(0)->S(0) when even', 'value@2 == 0': argument values "
                   "and mesh sizes swept).")
@json_option
@internal_errors
def resynth_cmd(ops: Tuple[str, ...], from_verify: bool, write: bool, all_partials: bool, conditional: bool,
                as_json: bool) -> None:
    """Re-derive registered OPS through the synthesis, diff against their rules, propose missing strategies."""
    from hyper_parallel.core.ops.registry import get_registry
    from hp_agent.dist_op.resynth import rederive, write_update
    if bool(ops) == from_verify:
        _refuse(ValueError("name op(s) or pass --from-verify (not both)"))
    layout = _layout()
    reg = get_registry()
    if from_verify:
        from hp_agent.dist_op.verify import verify
        ops = tuple(sorted({f.op for f in verify().false_negatives}))
    missing = [op for op in ops if op not in reg.entries]
    if missing:
        _refuse(ValueError(f"not registered: {', '.join(missing)}"))
    partials = ("sum", "avg", "max", "min") if all_partials else ("sum",)
    rows = []
    for i, op in enumerate(ops, 1):
        diff = rederive(op, reg.entries[op], partials, conditional=conditional)
        path = write_update(layout.path(layout.plans_dir) / "updates", diff, reg.entries[op]) if write else None
        rows.append({**diff.to_dict(), "update": str(path.relative_to(layout.root)) if path else None})
        if not as_json:
            _echo_diff(f"[{i}/{len(ops)}]", diff, rows[-1]["update"])
    if as_json:
        click.echo(json.dumps({"ops": rows}, indent=2, default=str))
    sys.exit(EXIT_FINDINGS if any(r["error"] for r in rows) else EXIT_OK)


def _echo_diff(prefix: str, diff, update) -> None:
    click.echo(f"{prefix} {diff.op} ({diff.rule}): {diff.covered} covered, {len(diff.missing)} missing, "
               f"{len(diff.coincidences)} coincidence(s), {len(diff.rule_only)} rule-only (kept), "
               f"{diff.seconds:.1f} s{' ERROR ' + diff.error if diff.error else ''}"
               + (f" -> {update}" if update else ""))
    for m in diff.missing[:6]:
        click.echo(f"    missing {m.signature}: {m.strategy} (rule {m.rule_does}) [evidence {m.evidence}]")


@cli_group.command("apply-updates")
@click.argument("updates", nargs=-1, required=True)
@click.option("--by", "who", default="", help="Who confirms (default: the git user).")
@json_option
@internal_errors
def apply_updates_cmd(updates: Tuple[str, ...], who: str, as_json: bool) -> None:
    """Confirm plan UPDATES (written by resynth) and apply them to the registry YAML (records who/when/sha256)."""
    from hp_agent.dist_op.resynth import UpdateError, apply_update
    layout = _layout()
    try:
        who = who or git_identity(layout.root)
        records = [apply_update(_plan_path(layout, u), layout.root, who, plans_dir=layout.plans_dir) for u in updates]
    except (UpdateError, PlanError) as exc:
        _refuse(exc)
    if as_json:
        click.echo(json.dumps({"applied": records}, indent=2))
    else:
        for r in records:
            click.echo(f"{r['op']}: {r['field']} updated in {r['registry']} (confirmed by {r['by']} at {r['at']})")
    sys.exit(EXIT_OK)


@cli_group.command("ms-sweep")
@click.argument("ops", nargs=-1)
@click.option("--markdown", default="", help="Write the measured table to this Markdown file.")
@click.option("--batch", "batch_out", default="",
              help="Write the plans whose counterparts pass to this batch file, their names recorded in the plans.")
@json_option
@internal_errors
def ms_sweep_cmd(ops: Tuple[str, ...], markdown: str, batch_out: str, as_json: bool) -> None:
    """Kernel-check the mindspore.mint counterparts of every pipeline op (or OPS) against torch in as few
    MindSpore processes as possible: CPU kernel, values, gradients, MindSpore's error. With --batch, the
    passing names go into the plans (stale until `confirm --batch FILE --set frontends.mindspore.in_scope=true`)."""
    from hp_agent.dist_op import mindspore_frontend as msf
    layout = _layout()
    plans = [p for p in msf.pipeline_plans(layout) if not ops or p.op in ops]
    if ops and len(plans) != len(set(ops)):
        _refuse(ValueError(f"not pipeline ops (no generated.yaml entry with a plan): "
                           f"{sorted(set(ops) - {p.op for p in plans})}"))

    def progress(row):
        if "does not exist here" not in row.get("error", ""):
            err_console.print(f"{row['op']} {row['mint']}: {'ok' if row['ok'] else row['detail']}")
    result = msf.sweep(layout, plans, progress=progress)
    if markdown:
        Path(markdown).write_text(msf.sweep_markdown(result), encoding="utf-8")
    if batch_out:
        changed = msf.record_sweep(result, plans)
        Path(batch_out).write_text("# MindSpore frontends: plans whose mint counterparts pass the kernel check "
                                   "(hp-agent dist-op ms-sweep)\n" + "".join(
                                       f"{p.path.relative_to(layout.root)}\n" for p in changed), encoding="utf-8")
    counts = msf.sweep_counts(result)
    if as_json:
        click.echo(json.dumps({**counts, "seconds": result["seconds"], "processes": result["processes"],
                               "error": result["error"], "rows": result["rows"]}, indent=2, default=str))
    else:
        click.echo(" ".join(f"{k}={v}" for k, v in counts.items())
                   + f" processes={result['processes']} seconds={result['seconds']}")
    sys.exit(EXIT_FINDINGS if result["error"] else EXIT_OK)
