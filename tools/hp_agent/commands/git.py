# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hp-agent git``: commit, pr, status, update, squash, rebase under policy (see docs/agent/autogit.md)."""
from __future__ import annotations

import sys

import click

from hp_agent.autogit import backups, flows
from hp_agent.autogit.codehost import CodeHostError, make_codehost
from hp_agent.autogit.gitcmd import AutogitRefused, GitError
from hp_agent.autogit.safety import utc_now
from hp_agent.autogit.output import EXIT_FAIL, EXIT_REFUSED, CommandFailed, emit_json, guarded, is_interactive, say
from hp_agent.config import PROVIDERS, ConfigError, load_config

_REFUSED = (AutogitRefused, ConfigError, ValueError, FileNotFoundError)
_FAILED = (GitError, CodeHostError, CommandFailed)
guard = guarded(_REFUSED, _FAILED)


def _setup() -> tuple:
    git = flows.repo_git()
    return git, load_config(git.root())


def _show_plan(plan: flows.CommitPlan, message: str) -> None:
    say(f"On branch {plan.branch}; files to stage ({len(plan.changes)}):")
    for change in plan.changes:
        say(f"  {change.label()}")
    say("Commit message:")
    for line in message.splitlines():
        say(f"  | {line}")


def _confirm_message(plan: flows.CommitPlan) -> str:
    """Interactive path: show the draft, let the person accept, edit or abort."""
    _show_plan(plan, plan.drafted)
    choice = click.prompt("Commit with this message? [y]es / [e]dit / [n]o", default="n",
                          type=click.Choice(["y", "e", "n"]), show_choices=False)
    if choice == "n":
        raise AutogitRefused("commit aborted by the user; nothing was staged")
    if choice == "e":
        edited = click.edit(plan.drafted)
        if not edited or not edited.strip():
            raise AutogitRefused("empty commit message; nothing was staged")
        return edited.strip()
    return plan.drafted


@click.group("git")
def cli_group() -> None:
    """Safe commit / PR / history-rewrite flow (autogit). Nothing is ever discarded."""


@cli_group.command("commit")
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("-m", "--message", "messages", multiple=True,
              help="Commit message (already shown to and confirmed by the user); repeated, each is a paragraph.")
@click.option("-a", "--all", "all_changes", is_flag=True,
              help="Commit every change, untracked non-ignored files too (default: what is staged).")
@click.option("--allow-secrets", is_flag=True, help="Commit files that look like secrets (.env*, keys, tokens).")
@click.option("--yes", is_flag=True, help="Use the drafted message (the user confirmed it).")
@click.option("--dry-run", is_flag=True, help="Only show the files and the drafted message.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@guard
def commit_cmd(paths: tuple[str, ...], messages: tuple[str, ...], all_changes: bool,  # noqa: PLR0913
               allow_secrets: bool, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Commit what is staged (as git does), or exactly PATHS, or with --all every change, with a Conventional
    message; files that look like secrets are refused unless --allow-secrets."""
    git, _cfg = _setup()
    message = "\n\n".join(m.strip("\n") for m in messages) if messages else None
    plan = flows.plan_commit(git, list(paths), all_changes)
    if dry_run:
        _ = emit_json(plan.to_dict()) if as_json else _show_plan(plan, message or plan.drafted)
        return
    if message is None and not yes:
        if not is_interactive():
            _ = emit_json(plan.to_dict()) if as_json else _show_plan(plan, plan.drafted)
            say("refused: no terminal to confirm the commit message. Show the files and the message above to "
                "the user first, then rerun with `-m \"<message>\"` (or `--yes` to take the draft).", err=True)
            sys.exit(EXIT_REFUSED)
        message = _confirm_message(plan)
    elif not as_json:
        _show_plan(plan, message or plan.drafted)
    result = flows.commit(git, plan, message or plan.drafted, allow_secrets=allow_secrets)
    if as_json:
        emit_json(result)
    else:
        say(f"committed {result['commit'][:12]} on {result['branch']} ({result['policy']})")
        if result["copyright_updated"]:
            say(f"copyright year updated in: {', '.join(result['copyright_updated'])}")


@cli_group.command("pr")
@click.option("--provider", type=click.Choice(PROVIDERS), help="Code host (default from config).")
@click.option("--title", help="PR title (default: the last commit's header).")
@click.option("--body", help="The 'what and why' section (default: the commit headers).")
@click.option("--draft", is_flag=True, help="Open as a draft PR.")
@click.option("--squash", is_flag=True, help="Squash the branch first (backup branch, leased push).")
@click.option("--squash-message", help="Message for --squash (default: derived from the commits).")
@click.option("--dry-run", is_flag=True, help="Print the PR body that would be used; push nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@guard
def pr_cmd(provider: str | None, title: str | None, body: str | None, draft: bool, squash: bool,  # noqa: PLR0913
           squash_message: str | None, dry_run: bool, as_json: bool) -> None:
    """Push the branch to your fork and open a PR with the filled template body."""
    git, cfg = _setup()
    host = make_codehost(cfg, provider)
    if dry_run:
        base = flows.base_ref(git, cfg)
        facts = flows.pr_facts(git, base, body)
        text = flows.fill_template(flows.read_template(git.root(), host.provider), facts)
        _ = emit_json({"body": text, "linked_issues": facts.issues}) if as_json else say(text)
        return
    result = flows.open_pr(git, cfg, host, {"title": title, "body": body, "draft": draft, "squash": squash,
                                             "squash_message": squash_message})
    if as_json:
        emit_json(result)
    else:
        say(f"pushed {result['branch']} to {result['fork']}: {result['push']}")
        say(f"opened PR #{result['pr']['number']}: {result['pr']['html_url']}")


@cli_group.command("status")
@click.argument("number", type=int)
@click.option("--provider", type=click.Choice(PROVIDERS))
@click.option("--json", "as_json", is_flag=True)
@guard
def status_cmd(number: int, provider: str | None, as_json: bool) -> None:
    """Show PR NUMBER: state, gate labels, head vs local HEAD, last comments."""
    git, cfg = _setup()
    status = flows.pr_status(git, make_codehost(cfg, provider), number)
    if as_json:
        emit_json(status)
        return
    pr = status["pr"]
    say(f"PR #{pr['number']} [{pr['state']}] {pr['title']}")
    say(f"  head {pr['head_repo']}:{pr['head_ref']} @ {str(pr['head_sha'])[:12]}"
        f" ({'matches' if status['local_matches_pr'] else 'differs from'} local HEAD)")
    say("  gate labels: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in status["gate_labels"].items()))
    for comment in status["last_comments"]:
        first = comment["body"].splitlines()[0] if comment["body"] else ""
        say(f"  [{comment['created_at']}] {comment['user']}: {first}")


@cli_group.command("update")
@click.argument("number", type=int)
@click.option("--provider", type=click.Choice(PROVIDERS))
@click.option("--title")
@click.option("--body", help="New PR body (or the 'what and why' text with --refresh-body).")
@click.option("--refresh-body", is_flag=True, help="Rebuild the body from the template and the gate report.")
@click.option("--force", is_flag=True, help="History was rewritten: backup + --force-with-lease push.")
@click.option("--json", "as_json", is_flag=True)
@guard
def update_cmd(number: int, provider: str | None, title: str | None, body: str | None,  # noqa: PLR0913
               refresh_body: bool, force: bool, as_json: bool) -> None:
    """Push the current branch to PR NUMBER (your fork only) and optionally refresh title/body."""
    git, cfg = _setup()
    result = flows.update_pr(git, cfg, make_codehost(cfg, provider), number,
                             {"title": title, "body": body, "refresh_body": refresh_body, "force": force})
    _ = emit_json(result) if as_json else say(f"updated PR #{number}: {result['push']}")


@cli_group.command("squash")
@click.option("-m", "--message", help="Message of the squashed commit (default: derived).")
@click.option("--push", "push_after", is_flag=True, help="Push with --force-with-lease afterwards.")
@click.option("--json", "as_json", is_flag=True)
@guard
def squash_cmd(message: str | None, push_after: bool, as_json: bool) -> None:
    """Squash the branch's commits into one (backup branch first)."""
    git, cfg = _setup()
    result = flows.squash(git, cfg, message, push_after=push_after)
    _report_rewrite(result, as_json, f"squashed {result['squashed']} commits")


@cli_group.command("rebase")
@click.option("--push", "push_after", is_flag=True, help="Push with --force-with-lease afterwards.")
@click.option("--json", "as_json", is_flag=True)
@guard
def rebase_cmd(push_after: bool, as_json: bool) -> None:
    """Rebase the branch onto the upstream base (backup branch first, full roll-back on conflict)."""
    git, cfg = _setup()
    result = flows.rebase(git, cfg, push_after=push_after)
    _report_rewrite(result, as_json, f"rebased onto {result['onto']}")


def _report_rewrite(result: dict, as_json: bool, what: str) -> None:
    if as_json:
        emit_json(result)
    else:
        say(f"{what}; backup branch {result['backup']}; HEAD {result['commit'][:12]}")
        if result.get("push"):
            say(f"pushed: {result['push']}")
    if result.get("stash_note"):
        say(f"warning: {result['stash_note']}", err=True)
        sys.exit(EXIT_FAIL)


@cli_group.command("backups")
@click.option("--prune", "do_prune", is_flag=True, help="Delete the backups the policy drops (printed with "
                                                         "their commit: `git branch NAME SHA` brings one back).")
@click.option("--keep", type=click.IntRange(min=0), default=backups.DEFAULT_KEEP, show_default=True,
              help="Newest backups kept per group.")
@click.option("--max-age-days", type=click.FloatRange(min=0), default=backups.DEFAULT_MAX_AGE_DAYS,
              show_default=True, help="Older backups are dropped (the newest of each group always stays).")
@click.option("--json", "as_json", is_flag=True)
@guard
def backups_cmd(do_prune: bool, keep: int, max_age_days: float, as_json: bool) -> None:
    """List the backup/... branches autogit and the shell guard wrote; --prune applies the keep/age policy."""
    git, _cfg = _setup()
    now = utc_now()
    listed = backups.list_backups(git)
    dropped = backups.prune(git, now, keep, max_age_days) if do_prune else \
        backups.to_prune(listed, now, keep, max_age_days)
    if as_json:
        emit_json({"backups": [b.to_dict(now) for b in listed], "pruned" if do_prune else "would_prune":
                   [b.to_dict(now) for b in dropped]})
        return
    gone = {b.name for b in dropped}
    for backup in listed:
        age = backup.age_days(now)
        mark = ("pruned" if do_prune else "would prune") if backup.name in gone else ""
        say(f"{backup.name}  {backup.sha[:12]}  {'?' if age is None else f'{age:.1f}d'}  {mark}".rstrip())
    say(f"{len(listed)} backup branch(es); {len(dropped)} {'pruned' if do_prune else 'past the policy'} "
        f"(keep {keep} per group, {max_age_days:g} days)")
