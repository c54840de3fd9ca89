# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The autogit operations: commit, pr, status, update, squash, rebase (no terminal I/O here)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from hp_agent.autogit import copyright as copyright_years
from hp_agent.autogit.codehost import CodeHost
from hp_agent.autogit.gitcmd import AutogitRefused, Git
from hp_agent.autogit.message import draft_message, infer_type
from hp_agent.autogit.policy import check_message
from hp_agent.autogit.prbody import PrFacts, fill_template, fixes_trailers, load_gate_report, read_template
from hp_agent.autogit.safety import (Stash, UtcNow, backup_branch, prepare_rewrite_push, push, refuse_protected,
                                     refuse_upstream, repo_slug, rollback_on_error, utc_now)
from hp_agent.autogit.secrets import secret_problems
from hp_agent.autogit.staging import Change, collect_changes, stage, staged_changes
from hp_agent.config import Config
from hp_agent.repo import NotARepositoryError, repo_root

GATE_LABELS = ("pr-check-pass", "ci-pipeline-passed")


class PolicyRejected(AutogitRefused):
    """The commit-msg policy rejected the message."""

    def __init__(self, problems: list[str], policy: str) -> None:
        super().__init__(f"commit message rejected by {policy}: " + "; ".join(problems))
        self.problems = problems


@dataclasses.dataclass
class CommitPlan:
    """What ``commit`` will do: what it commits (``index``, ``paths`` or ``all``), the files, the draft."""

    branch: str
    changes: list[Change]
    drafted: str
    mode: str = "index"
    paths: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"branch": self.branch, "drafted_message": self.drafted, "mode": self.mode,
                "files": [{"path": c.path, "kind": c.kind, "from": c.orig_path} for c in self.changes]}


def plan_commit(git: Git, paths: list[str] | None = None, all_changes: bool = False) -> CommitPlan:
    """What to commit, as git does: the index by default; with ``paths`` exactly those paths (untracked ones
    included); with ``all_changes`` every change, untracked non-ignored files too."""
    if paths and all_changes:
        raise ValueError("give paths or --all, not both")
    if all_changes:
        mode, changes = "all", collect_changes(git)
    elif paths:
        mode, changes = "paths", collect_changes(git, list(paths))
        if not changes:
            raise AutogitRefused(f"nothing to commit under {' '.join(paths)}")
    else:
        mode, changes = "index", staged_changes(git)
        if not changes:
            raise AutogitRefused("nothing staged: `git add` what this commit holds, name the paths "
                                 "(`hp-agent git commit PATH...`), or pass `--all` for every change")
    return CommitPlan(branch=git.current_branch(), changes=changes, drafted=draft_message(changes),
                      mode=mode, paths=list(paths or []))


def committed_content(git: Git, plan: CommitPlan) -> dict[str, bytes]:
    """Path -> the content the commit would record, for each file it adds or changes."""
    out: dict[str, bytes] = {}
    for change in plan.changes:
        if change.kind in ("deleted", "conflict"):
            continue
        if plan.mode == "index":
            data = git.run_bytes("show", f":{change.path}")
            if data is not None:
                out[change.path] = data
        else:
            path = git.root() / change.path
            if path.is_file():
                out[change.path] = path.read_bytes()
    return out


def commit(git: Git, plan: CommitPlan, message: str, now: UtcNow = utc_now, allow_secrets: bool = False) -> dict:
    """Check the message and the files for secrets, update this project's header years, commit the plan."""
    problems, policy = check_message(message)
    if problems:
        raise PolicyRejected(problems, policy)
    conflicts = [c.path for c in plan.changes if c.kind == "conflict"]
    if conflicts:
        raise AutogitRefused(f"unresolved merge conflicts in {', '.join(conflicts)}; resolve them first")
    secrets = [] if allow_secrets else secret_problems(committed_content(git, plan))
    if secrets:
        raise AutogitRefused("refusing to commit what looks like secrets (nothing was staged or committed):\n  "
                             + "\n  ".join(secrets) + "\nRemove them (and add the files to .gitignore), or pass "
                             "--allow-secrets if they are not secrets")
    index_tree = git.out("write-tree")
    touched = [c.path for c in plan.changes if c.kind in ("modified", "renamed")
               and (plan.mode != "index" or not c.unstaged)]  # never stage a hunk the user left out
    originals = copyright_years.update_years(git.root(), touched, now().year)
    try:
        _record(git, plan, message, sorted(originals))
    except BaseException:
        git.run("read-tree", index_tree)  # the index exactly as it was before
        copyright_years.restore(git.root(), originals)
        raise
    return {"commit": git.head_sha(), "branch": plan.branch, "message": message, "policy": policy,
            "mode": plan.mode, "files": [c.path for c in plan.changes], "copyright_updated": sorted(originals)}


def _record(git: Git, plan: CommitPlan, message: str, header_updated: list[str]) -> None:
    """Stage what the plan's mode says and run ``git commit``."""
    if plan.mode == "index":
        if header_updated:
            git.run("add", "--", *header_updated)
        git.run("commit", "--quiet", "--file", "-", input_text=message.rstrip("\n") + "\n")
        return
    stage(git, plan.changes)
    only = [p for c in plan.changes for p in (c.path, c.orig_path) if p] if plan.mode == "paths" else []
    git.run("commit", "--quiet", "--file", "-", *(["--only", "--", *only] if only else []),
            input_text=message.rstrip("\n") + "\n")


def branch_messages(git: Git, base: str) -> list[str]:
    """Full messages of the commits in ``base..HEAD``, oldest first."""
    raw = git.out("log", "--reverse", "--format=%B%x00", f"{base}..HEAD")
    return [m.strip() for m in raw.split("\0") if m.strip()]


def base_branch(git: Git, cfg: Config) -> str:
    """The branch PRs target: ``[git] base`` when set, else the upstream remote's HEAD (its default branch:
    the remote-tracking ``<upstream>/HEAD``, else asked with ``git ls-remote --symref``), else the first of
    ``main``/``master`` that exists locally, else ``main``. Resolved once per config."""
    if cfg.base_branch:
        return cfg.base_branch
    remote = cfg.upstream_remote
    name = None
    if remote in git.out("remote").split():
        local = git.run("symbolic-ref", "--quiet", "--short", f"refs/remotes/{remote}/HEAD", check=False)
        name = local.stdout.strip().removeprefix(f"{remote}/") if local.returncode == 0 else None
        if not name:
            listed = git.run("ls-remote", "--symref", remote, "HEAD", check=False).stdout
            first = listed.splitlines()[0] if listed.startswith("ref: ") else ""
            name = first.split()[1].removeprefix("refs/heads/") if first else None
    if not name:
        name = next((b for b in ("main", "master") if git.ok("rev-parse", "--verify", "--quiet",
                                                               f"refs/heads/{b}")), "main")
    cfg.base_branch = name
    return name


def base_ref(git: Git, cfg: Config, fetch: bool = True) -> str:
    """``<upstream>/<base>`` (fetched first) when the upstream remote exists, else the local base branch."""
    remotes = git.out("remote").split()
    base = base_branch(git, cfg)
    if cfg.upstream_remote in remotes:
        if fetch:
            git.run("fetch", "--quiet", cfg.upstream_remote, base)
        return f"{cfg.upstream_remote}/{base}"
    if git.ok("rev-parse", "--verify", "--quiet", f"refs/heads/{base}"):
        return base
    raise AutogitRefused(f"no upstream remote {cfg.upstream_remote!r} and no local branch {base!r} "
                         f"to compare against; configure [git] upstream_remote/base")


def fork_slug(git: Git, cfg: Config) -> str:
    """``owner/name`` of the fork remote; refuses when it is the upstream repository itself."""
    slug = repo_slug(git.remote_url(cfg.fork_remote))
    if slug.lower() == cfg.codehost_repo.lower():
        raise AutogitRefused(f"remote {cfg.fork_remote!r} points at the upstream repository {slug}; "
                             f"PR heads must come from your fork")
    return slug


def check_fork_owner(host: CodeHost, slug: str) -> None:
    """Refuse when the token's user is not the owner of the fork ``slug``."""
    login = host.current_user()
    owner = slug.split("/")[0]
    if login and login.lower() != owner.lower():
        raise AutogitRefused(f"the fork {slug} does not belong to the authenticated user {login!r}")


def pr_facts(git: Git, base: str, body: str | None) -> PrFacts:
    """Gather kind, what/why, ``Fixes`` trailers and the gate report for the PR body."""
    messages = branch_messages(git, base)
    if not messages:
        raise AutogitRefused(f"branch has no commits ahead of {base}; commit first (hp-agent git commit)")
    files = git.out("diff", "--name-only", f"{base}...HEAD").splitlines()
    kinds = [m.split(":")[0].split("(")[0].rstrip("!") for m in messages]
    kind = kinds[0] if len(set(kinds)) == 1 else infer_type([Change(f, "modified") for f in files])
    what = body or "\n".join(f"- {m.splitlines()[0]}" for m in messages)
    return PrFacts(kind=kind, what=what, issues=fixes_trailers(messages), gate_report=load_gate_report(git.root()))


def open_pr(git: Git, cfg: Config, host: CodeHost, options: dict) -> dict:
    """Push the branch to the fork (squashing first with ``squash``) and open a PR with the template body."""
    branch = git.current_branch()
    refuse_protected(cfg, branch, "open a PR from")
    slug = fork_slug(git, cfg)
    check_fork_owner(host, slug)
    base = base_ref(git, cfg)
    result: dict = {"branch": branch, "fork": slug}
    lease = None
    if options.get("squash"):
        lease = prepare_rewrite_push(git, cfg, branch)
        result["remote_backup"] = lease.backup
        result["squash"] = squash(git, cfg, options.get("squash_message"), push_after=False)
    messages = branch_messages(git, base)
    facts = pr_facts(git, base, options.get("body"))
    title = options.get("title") or messages[-1].splitlines()[0]
    body = fill_template(read_template(git.root(), host.provider), facts)
    result["push"] = push(git, cfg, branch, lease, rewrite=bool(options.get("squash")))
    owner = slug.split("/")[0]
    pr = host.create_pr(title, f"{owner}:{branch}", base_branch(git, cfg), body, draft=bool(options.get("draft")))
    result.update(pr=pr, title=title, body=body, linked_issues=facts.issues)
    return result


def pr_status(git: Git | None, host: CodeHost, number: int) -> dict:
    """PR state, gate labels and the last comments, plus whether the local branch matches its head."""
    pr = host.get_pr(number)
    comments = host.list_comments(number)
    status = {"pr": pr, "gate_labels": {lab: lab in pr["labels"] for lab in GATE_LABELS},
              "last_comments": comments[-5:]}
    if git is not None:
        status["local_head"] = git.head_sha()
        status["local_matches_pr"] = status["local_head"] == pr["head_sha"]
    return status


def update_pr(git: Git, cfg: Config, host: CodeHost, number: int, options: dict) -> dict:
    """Push the current branch to PR ``number`` (leased when ``force``) and refresh title/body if asked."""
    pr = host.get_pr(number)
    branch = git.current_branch()
    slug = fork_slug(git, cfg)
    if (pr["head_repo"] or "").lower() != slug.lower():
        raise AutogitRefused(f"PR #{number} head is {pr['head_repo']}:{pr['head_ref']}, not your fork {slug}; "
                             f"refusing to push to it")
    if pr["head_ref"] != branch:
        raise AutogitRefused(f"PR #{number} head branch is {pr['head_ref']!r} but {branch!r} is checked out")
    check_fork_owner(host, slug)
    result = {"pr": number, "branch": branch}
    force = bool(options.get("force"))
    lease = prepare_rewrite_push(git, cfg, branch) if force else None
    if lease is not None and lease.backup:
        result["backup"] = lease.backup  # the fork's tip that the force push replaces
    result["push"] = push(git, cfg, branch, lease, rewrite=force)
    body = options.get("body")
    if options.get("refresh_body"):
        facts = pr_facts(git, base_ref(git, cfg), body)
        body = fill_template(read_template(git.root(), host.provider), facts)
    if body is not None or options.get("title"):
        result["updated"] = host.update_pr(number, title=options.get("title"), body=body)
    return result


def squash(git: Git, cfg: Config, message: str | None, push_after: bool = False, now: UtcNow = utc_now) -> dict:
    """Squash ``base..HEAD`` into one commit after creating a backup branch; optionally leased push.

    A message given with ``-m`` keeps the branch's trailers (``Fixes #N``, human ``Co-authored-by``...).
    """
    branch = git.current_branch()
    refuse_protected(cfg, branch, "rewrite the history of")
    if push_after:
        refuse_upstream(git, cfg)
    base = base_ref(git, cfg)
    messages = branch_messages(git, base)
    if len(messages) < 2:
        raise AutogitRefused(f"nothing to squash: {len(messages)} commit(s) ahead of {base}")
    coauthors = [f"Co-authored-by: {who}" for who in other_authors(git, base)]
    if message:
        fixes = [f"Fixes #{n}" for n in fixes_trailers(messages)]
        message = with_trailers(message, [*fixes, *branch_trailers(messages), *coauthors])
    else:
        message = with_trailers(squash_message(messages), coauthors)
    problems, policy = check_message(message)
    if problems:
        raise PolicyRejected(problems, policy)
    lease = prepare_rewrite_push(git, cfg, branch, now) if push_after else None
    backup = backup_branch(git, branch, now)
    merge_base = git.out("merge-base", base, "HEAD")
    with Stash(git, f"hp-agent autogit squash {backup}") as stash:
        with rollback_on_error(git, branch) as original:
            git.run("reset", "--quiet", "--soft", merge_base)
            git.run("commit", "--quiet", "--file", "-", input_text=message.rstrip("\n") + "\n")
            if git.out("rev-parse", "HEAD^{tree}") != git.out("rev-parse", f"{original}^{{tree}}"):
                raise AutogitRefused("squash produced a different tree; rolled back")
            pushed = push(git, cfg, branch, lease, rewrite=True) if push_after else None
    return {"branch": branch, "backup": backup, "squashed": len(messages), "commit": git.head_sha(),
            "message": message, "push": pushed, "remote_backup": lease.backup if lease else None,
            "stash_note": stash.note}


def other_authors(git: Git, base: str) -> list[str]:
    """``Name <email>`` of every author of ``base..HEAD`` other than you (the squashed commit's author), in the
    order they first appear: a squash folds their commits in, so each becomes a ``Co-authored-by`` trailer."""
    ident = git.out("var", "GIT_AUTHOR_IDENT")
    me = ident[:ident.rfind(">") + 1].strip() if ">" in ident else ident
    names = git.out("log", "--reverse", "--format=%an <%ae>", f"{base}..HEAD").splitlines()
    return [who for who in dict.fromkeys(names) if who and who.lower() != me.lower()]


_TRAILER_LINE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(?:: \S| #\d)")


def branch_trailers(messages: list[str]) -> list[str]:
    """The trailer lines (``Key: value``, ``Fixes #N``) of each message's last paragraph, in order, unique.

    A last paragraph counts as trailers when every line of it is one (the header alone never does).
    """
    out: list[str] = []
    for message in messages:
        paragraphs = message.strip().split("\n\n")
        lines = paragraphs[-1].splitlines() if len(paragraphs) > 1 else []
        if lines and all(_TRAILER_LINE.match(line) for line in lines):
            out.extend(line for line in lines if line not in out)
    return out


def with_trailers(message: str, trailers: list[str]) -> str:
    """``message`` with the ``trailers`` it does not carry yet appended as its trailer block."""
    text = message.rstrip("\n")
    missing = list(dict.fromkeys(t for t in trailers if t.lower() not in text.lower()))
    if not missing:
        return text
    paragraphs = text.split("\n\n")
    last = paragraphs[-1].splitlines()
    is_block = len(paragraphs) > 1 and all(_TRAILER_LINE.match(line) for line in last)
    return text + ("\n" if is_block else "\n\n") + "\n".join(missing)


def squash_message(messages: list[str]) -> str:
    """First commit's header, the other headers as bullet points, and every ``Fixes #N`` trailer."""
    header = messages[0].splitlines()[0]
    bullets = [f"- {m.splitlines()[0]}" for m in messages[1:]]
    trailers = [f"Fixes #{n}" for n in fixes_trailers(messages)]
    parts = [header, "\n".join(bullets)]
    if trailers:
        parts.append("\n".join(trailers))
    return "\n\n".join(parts)


def rebase(git: Git, cfg: Config, push_after: bool = False, now: UtcNow = utc_now) -> dict:
    """Rebase the branch onto the fetched upstream base after a backup; on conflict, roll back fully."""
    branch = git.current_branch()
    refuse_protected(cfg, branch, "rewrite the history of")
    base = base_ref(git, cfg)
    lease = prepare_rewrite_push(git, cfg, branch, now) if push_after else None
    backup = backup_branch(git, branch, now)
    with Stash(git, f"hp-agent autogit rebase {backup}") as stash:
        with rollback_on_error(git, branch) as original:
            proc = git.run("rebase", "--quiet", base, check=False)
            if proc.returncode != 0:
                raise AutogitRefused(f"rebase onto {base} stopped with conflicts; the branch is back at "
                                     f"{original[:12]} and backup {backup} holds it too. Resolve manually: "
                                     f"`git rebase {base}`")
            pushed = push(git, cfg, branch, lease, rewrite=True) if push_after else None
    return {"branch": branch, "backup": backup, "onto": base, "before": original, "commit": git.head_sha(),
            "push": pushed, "remote_backup": lease.backup if lease else None, "stash_note": stash.note}


def repo_git(path: Path | None = None) -> Git:
    """A :class:`Git` at the repository root (:func:`hp_agent.repo.repo_root`; honours ``HP_AGENT_REPO``)."""
    try:
        return Git(repo_root(path))
    except NotARepositoryError as exc:
        raise AutogitRefused(str(exc)) from None
