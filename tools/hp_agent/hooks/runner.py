# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The hook runner: ``hp-agent hook <event>`` for assistants (after-write, before-shell, after-turn) and git.

Guard hooks fail closed: a payload we cannot read or an internal error blocks with a message that names
the problem, rather than letting the action through unchecked. The assistant hooks import only the
standard library (and what they check lazily), so they answer fast and work in a clone whose
environment is not set up yet (``HP_AGENT_BOOTSTRAP=1``, set by ``.agent/bin/hp-agent``): then only
what they guard is refused, with the one command that sets the environment up.
"""
from __future__ import annotations

import json
import os


from hp_agent.shared.protocol import CANONICAL_EVENTS, HookAnswer, HookEvent, PayloadError

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

BOOTSTRAP_ENV = "HP_AGENT_BOOTSTRAP"
SETUP = "`make install`"


def bootstrapping() -> bool:
    """True when the shim runs us without the repository's environment (system python, stdlib only)."""
    return os.environ.get(BOOTSTRAP_ENV) == "1"


def _setup_note() -> str:
    return (f"\n(the repository's environment is not set up yet: run {SETUP} once; until then hp-agent checks "
            "only what it can with the standard library)") if bootstrapping() else ""


def _after_write(ev: HookEvent, assistant) -> HookAnswer:
    from pathlib import Path  # pylint: disable=import-outside-toplevel

    from hp_agent.checks.difflines import changed_lines  # pylint: disable=import-outside-toplevel
    from hp_agent.checks.style import style_file  # pylint: disable=import-outside-toplevel
    from hp_agent.repo import relative_to_repo  # pylint: disable=import-outside-toplevel

    base = Path(ev.cwd) if ev.cwd else Path.cwd()
    problems, fixed, registry_roots = [], [], {}
    for name in ev.files:
        path = Path(name) if Path(name).is_absolute() else base / name
        if not path.is_file():
            continue  # deleted or moved by the tool; nothing to check
        root = _work_tree_of(path)
        if root is None:
            continue  # outside any repository: not ours to police
        rel = relative_to_repo(path, root)
        res = style_file(path, rel, fix=True, lines=changed_lines(root, rel))
        if res.fixed:
            fixed.append(f"{rel}: fixed {', '.join(res.fixed)}")
        problems.extend(str(f) for f in res.findings)
        if _is_registry_path(rel):
            registry_roots.setdefault(root, []).append(rel)
    problems.extend(_registry_problems(registry_roots))
    note = "hp-agent style: " + "; ".join(fixed) + " (re-read the file before editing it again)" if fixed else ""
    if problems:
        text = ("hp-agent after-write found problems on the lines you changed; fix them:\n"
                + "\n".join(f"  {p}" for p in problems))
        return assistant.findings(ev, text + (f"\n{note}" if note else ""))
    return assistant.allow(ev, note)


def _work_tree_of(path: "Path") -> "Path | None":
    """The work tree holding ``path``: the nearest parent with a ``.git`` entry (no git call on the hook path)."""
    for parent in path.resolve().parents:
        if (parent / ".git").exists():
            return parent
    return None


def _is_registry_path(rel: str) -> bool:
    from hp_agent.checks.op_registry import is_registry_path  # pylint: disable=import-outside-toplevel
    return is_registry_path(rel)


def _registry_problems(roots: "set | dict") -> list[str]:
    """The op-registry pairing check: in full for a set of roots (pre-commit), incrementally for a mapping
    root -> the registry files and rule modules just edited (after-write: only what those files touch;
    the full check stays in the gate and in pre-commit)."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    from hp_agent.checks.op_registry import (check_registry,  # pylint: disable=import-outside-toplevel
                                             check_registry_changed)

    if not roots:
        return []
    _with_site_packages()
    if importlib.util.find_spec("yaml") is None:  # bootstrap: no PyYAML yet
        return [f"op-registry pairing not checked (PyYAML is missing): run {SETUP}, then "
                "`hp-agent check op-registry`"]
    if isinstance(roots, dict):
        return [str(f) for root in sorted(roots) for f in check_registry_changed(root, roots[root])[0]]
    return [str(f) for root in sorted(roots) for f in check_registry(root)[0]]


def _with_site_packages() -> None:
    """The shim runs hooks with ``python -S`` (no site-packages: ~25 ms less per call); the rare check that
    needs a third-party package (PyYAML for the op registry) adds the environment's site-packages first."""
    import sys  # pylint: disable=import-outside-toplevel

    if sys.flags.no_site and not bootstrapping():
        import site  # pylint: disable=import-outside-toplevel
        site.main()


def _before_shell(ev: HookEvent, assistant) -> HookAnswer:
    from hp_agent.checks.shell_guard import evaluate  # pylint: disable=import-outside-toplevel

    if ev.command is None:
        return assistant.block(ev, "hp-agent before-shell: the payload has no command; blocking (fail closed)")
    verdict = evaluate(ev.command, ev.cwd, bootstrap=bootstrapping())
    if verdict.blocks:
        return assistant.block(ev, "hp-agent blocked this command:\n" + "\n".join(f"  - {p}" for p in verdict.blocks)
                               + _setup_note())
    if verdict.asks:
        return assistant.ask(ev, "hp-agent: this command needs the user's approval:\n"
                             + "\n".join(f"  - {p}" for p in verdict.asks))
    return assistant.allow(ev, "; ".join(verdict.notes))


def _dispatch(event: str, ev: HookEvent, assistant) -> HookAnswer:
    if ev.event is None:
        return assistant.allow(ev)  # an event this hook does not handle
    if ev.event != event:
        return assistant.block(ev, f"hp-agent hook {event} received a {ev.raw_event} payload from {ev.assistant}: "
                                   "the hook is registered for the wrong event (run `hp-agent sync`)")
    if not assistant.handles_tool(ev):
        return assistant.allow(ev)
    if event == "after-write":
        return _after_write(ev, assistant)
    if event == "before-shell":
        return _before_shell(ev, assistant)
    return assistant.turn_end(ev)


def run_assistant_hook(event: str, stdin_text: str, assistant: str | None = None) -> HookAnswer:
    """Run the ``event`` hook (after-write | before-shell | after-turn) on an assistant payload; never raises."""
    from hp_agent import assistants  # pylint: disable=import-outside-toplevel

    who, ev = None, None
    try:
        who = assistants.get(assistant) if assistant else None
        fallback = who or assistants.get("claude")
        if event not in CANONICAL_EVENTS:
            return fallback.block(None, f"hp-agent hook: unknown event {event!r}; expected {CANONICAL_EVENTS}")
        try:
            payload = json.loads(stdin_text) if stdin_text.strip() else None
        except json.JSONDecodeError as exc:
            return fallback.block(None, f"hp-agent hook {event}: stdin is not JSON ({exc}); blocking (fail closed)")
        if payload is None:
            return fallback.block(None, f"hp-agent hook {event}: no hook payload on stdin; blocking (fail closed)")
        if not isinstance(payload, dict):
            raise PayloadError(f"hook input must be a JSON object, got {type(payload).__name__}")
        who = who or assistants.detect(payload)
        ev = who.normalize(payload, registered_event=event)
        return _dispatch(event, ev, who)
    except (PayloadError, ValueError) as exc:
        return (who or assistants.get("claude")).block(ev, f"hp-agent hook {event}: {exc}; blocking (fail closed)")
    except Exception as exc:  # pylint: disable=broad-except  # fail closed: any crash blocks, with the cause
        import traceback  # pylint: disable=import-outside-toplevel
        tb = traceback.format_exc(limit=3)
        return (who or assistants.get("claude")).block(ev, f"hp-agent hook {event}: internal error "
                                                           f"{type(exc).__name__}: {exc}; blocking (fail closed)\n{tb}")


def run_commit_msg_hook(message_file: Path) -> HookAnswer:
    """The git ``commit-msg`` hook: exit 1 with the problems when the message breaks the policy."""
    from hp_agent.checks.commit_msg import check_commit_message  # pylint: disable=import-outside-toplevel

    try:
        with open(message_file, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        return HookAnswer(1, stderr=f"hp-agent commit-msg: cannot read {message_file}: {exc}\n")
    problems = check_commit_message(text)
    if problems:
        body = "\n".join(f"  - {p}" for p in problems)
        return HookAnswer(1, stderr=f"hp-agent commit-msg: commit rejected:\n{body}\n")
    return HookAnswer(0)


def run_pre_push_hook(stdin_text: str, cwd: Path | None = None, env: dict | None = None) -> HookAnswer:
    """The git ``pre-push`` hook: refuse (exit 2) non-fast-forward pushes and deletes of protected branches."""
    from hp_agent.checks.pre_push import (check_push, parse_updates,  # pylint: disable=import-outside-toplevel
                                          updates_from_pre_commit_env)
    from hp_agent.repo import NotARepositoryError, repo_root  # pylint: disable=import-outside-toplevel

    env = dict(os.environ) if env is None else env
    try:
        updates = parse_updates(stdin_text) or updates_from_pre_commit_env(env)
        root = repo_root(cwd)
        problems = check_push(root, updates)
    except (ValueError, NotARepositoryError, OSError) as exc:
        return HookAnswer(2, stderr=f"hp-agent pre-push: {exc}; push refused (fail closed)\n")
    if problems:
        return HookAnswer(2, stderr="hp-agent pre-push: push refused:\n" + "\n".join(f"  - {p}" for p in problems)
                          + "\n")
    return HookAnswer(0)


def staged_files(root: Path) -> list[str]:
    """Files added, copied, modified or renamed in the index."""
    import subprocess  # pylint: disable=import-outside-toplevel
    out = subprocess.run(["git", "diff", "--cached", "--name-only", "--diff-filter=ACMR", "-z"], cwd=root,
                         check=True, capture_output=True, text=True).stdout
    return [p for p in out.split("\0") if p]


def run_pre_commit_hook(cwd: Path | None = None, files: list[str] | None = None) -> HookAnswer:
    """The git ``pre-commit`` hook on the staged version of each file, judged on the lines the commit changes
    (a new file: all of it): license header, no trailing whitespace, final newline, valid Python; a staged
    registry/rule file runs the op-registry pairing check. Check-only."""
    from hp_agent.checks.difflines import changed_lines  # pylint: disable=import-outside-toplevel
    from hp_agent.checks.style import style_text  # pylint: disable=import-outside-toplevel
    from hp_agent.repo import repo_root  # pylint: disable=import-outside-toplevel

    import subprocess  # pylint: disable=import-outside-toplevel

    root = repo_root(cwd)
    paths = files if files else staged_files(root)
    problems = []
    for rel in paths:
        blob = subprocess.run(["git", "show", f":{rel}"], cwd=root, capture_output=True, check=False)
        if blob.returncode != 0:
            continue  # not in the index (deleted)
        try:
            text = blob.stdout.decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary file
        res = style_text(text, rel, fix=False, lines=changed_lines(root, rel, staged=True))
        problems.extend(str(f) for f in res.findings if f.rule in ("style-fixable", "syntax-error"))
    if any(_is_registry_path(p) for p in paths):
        problems.extend(_registry_problems({root}))
    if problems:
        return HookAnswer(1, stderr="hp-agent pre-commit: fix these first (`hp-agent check style --fix PATH` "
                                    "fixes the fixable ones):\n" + "\n".join(f"  {p}" for p in problems) + "\n")
    return HookAnswer(0)
