# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The before-shell guard's rule for commands that delete: ask when they would lose work git cannot give back.

Work is lost when a command deletes a file that is modified or untracked (``rm``, ``rm -r DIR``, ``find ...
-delete``/``-exec rm``), drops stashed changes (``git stash drop``/``clear``), deletes or moves a ref whose
commits no other branch, remote-tracking branch or tag holds (``git branch -D``/``-f``, ``git update-ref -d``,
``git checkout -B``), removes a worktree with changes (``git worktree remove --force``) or expires the reflog.
Each is decided from the repository's state: a command that would lose nothing is allowed.
"""
from __future__ import annotations

import os
import subprocess

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from hp_agent.checks.shparse import Command, Word

# find predicates that only select files (safe to run with -print instead of the action)
_FIND_TESTS = {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-type", "-regex", "-iregex",
               "-maxdepth", "-mindepth", "-newer", "-mtime", "-mmin", "-size", "-user", "-group", "-perm",
               "-links", "-atime", "-ctime", "-amin", "-cmin", "-xtype"}
_FIND_FLAGS = {"-not", "!", "-o", "-or", "-a", "-and", "(", ")", "-empty", "-prune", "-print", "-print0",
               "-depth", "-true", "-false", "-L", "-H", "-P", "-mount", "-xdev", "-readable", "-writable",
               "-executable", "-follow", "-nouser", "-nogroup"}


def _shown(paths: list[str]) -> str:
    return ", ".join(paths[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")


def _run(cwd: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, check=False, timeout=timeout,
                          env=dict(os.environ, LC_ALL="C", GIT_OPTIONAL_LOCKS="0"))


def dirty_paths(cwd: str, pathspecs: list[str]) -> list[str]:
    """Modified tracked or untracked (not ignored) files under ``pathspecs`` (relative to ``cwd``)."""
    proc = _run(cwd, "git", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *pathspecs)
    if proc.returncode != 0:
        return [f"(git status failed: {proc.stderr.strip()[:120]})"]
    entries = [e for e in proc.stdout.split("\0") if e]
    return [e[3:] for e in entries if len(e) > 3 and e[2] == " "]


def unique_commits(cwd: str, branch: str) -> int:
    """How many commits of local ``branch`` no other branch, remote-tracking branch or tag holds (0 if unknown)."""
    ref = branch.removeprefix("refs/heads/")
    proc = _run(cwd, "git", "rev-list", "--count", f"refs/heads/{ref}", "--not", f"--exclude={ref}", "--branches",
                "--remotes", "--tags")
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


def unique_commits_of_ref(cwd: str, ref: str) -> int:
    """Commits of any ``ref`` (``refs/...``) that no branch, remote-tracking branch or tag other than it holds."""
    if ref.startswith("refs/heads/"):
        return unique_commits(cwd, ref)
    proc = _run(cwd, "git", "rev-list", "--count", ref, "--not", "--branches", "--remotes", "--tags")
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


def commits_lost_by_reset(cwd: str, branch: str, start: str) -> int:
    """Commits of local ``branch`` that moving it to ``start`` loses: neither ``start`` nor another branch,
    remote-tracking branch or tag holds them (0 when the branch does not exist or ``start`` is unknown)."""
    ref = branch.removeprefix("refs/heads/")
    proc = _run(cwd, "git", "rev-list", "--count", f"refs/heads/{ref}", "--not", start, f"--exclude={ref}",
                "--branches", "--remotes", "--tags")
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


def _reset_target(values: list[str | None], flags: tuple[str, ...]) -> tuple[bool, str | None, str | None]:
    """``(found, branch, start)`` of ``git checkout -B BRANCH [START]`` / ``git switch -C BRANCH [START]``
    (``start`` defaults to HEAD; None: only known at run time)."""
    for i, value in enumerate(values):
        if value in flags and i + 1 < len(values):
            rest = [v for v in values[i + 2:] if v is None or not v.startswith("-")]
            return True, values[i + 1], rest[0] if rest else "HEAD"
    return False, None, None


def _plain(values: list[str | None]) -> list[str | None]:
    return [v for v in values if v is None or not v.startswith("-")]


class LossChecks:
    """Mixed into the guard: each method asks (``self.ask``) when its command would lose work."""

    ctx = None  # the guard's GitContext

    def ask(self, text: str) -> None:  # pragma: no cover - provided by the guard
        """A reason the user must approve."""
        raise NotImplementedError

    def _repo_dir(self, cmd: "Command") -> str | None:
        cwd = self.ctx.resolve(cmd.cwd)
        return cwd if os.path.isdir(cwd) and self.ctx.toplevel(cwd) else None

    def lose_files(self, cmd: "Command", targets: list[str | None], what: str) -> None:
        """Ask when deleting ``targets`` (paths or globs, relative to the command's cwd) loses changed files."""
        cwd = self._repo_dir(cmd)
        if cwd is None:
            return
        if None in targets:
            lost = dirty_paths(cwd, ["."])
            if lost:
                self.ask(f"{what} deletes paths only known at run time while the work tree has uncommitted work "
                         f"({_shown(lost)}); name the paths, commit first, or let the user approve")
            return
        specs = [t for t in targets if t]
        specs = [s for s in specs if self.ctx.toplevel(cwd) and _inside(os.path.join(cwd, s), self.ctx.toplevel(cwd))]
        lost = dirty_paths(cwd, specs) if specs else []
        if lost:
            self.ask(f"{what} would delete uncommitted work ({_shown(lost)}); commit or stash it first, or let the "
                     "user approve")

    # -- find ------------------------------------------------------------------------------------------
    def check_find(self, cmd: "Command") -> None:
        """``find ... -delete`` / ``-exec rm``: ask when the files it would delete include changed ones."""
        values = [w.value for w in cmd.words[1:]]
        if not _find_deletes(values):
            return
        cwd = self._repo_dir(cmd)
        if cwd is None:
            return
        roots, expr = _find_split(values)
        if None in roots or None in expr:
            self.lose_files(cmd, [None], "`find ... -delete`")
            return
        top = self.ctx.toplevel(cwd)
        roots = [r for r in roots or ["."] if _inside(os.path.join(cwd, r), top)]
        if not roots:
            return  # nothing of this work tree
        selected = _find_selected(cwd, roots, expr)
        prefix = os.path.relpath(cwd, top)
        if selected is None:  # an expression we do not run: every changed file under the start points counts
            lost = dirty_paths(cwd, roots)
        else:
            rel = {os.path.normpath(os.path.join(prefix, p)) for p in selected}
            lost = sorted(p for p in dirty_paths(top, ["."]) if os.path.normpath(p) in rel)
        if lost:
            self.ask(f"`find ... -delete` would delete uncommitted work ({_shown(lost)}); commit or stash it first, "
                     "or let the user approve")

    # -- git -------------------------------------------------------------------------------------------
    def git_stash(self, words: list["Word"], cmd: "Command") -> None:
        """``git stash drop``/``clear`` lose stashed changes for good."""
        sub = words[1].value if len(words) > 1 else None
        if sub not in ("drop", "clear"):
            return
        cwd = self._repo_dir(cmd)
        if cwd is None:
            return
        count = len([ln for ln in _run(cwd, "git", "stash", "list").stdout.splitlines() if ln.strip()])
        if count:
            self.ask(f"`git stash {sub}` throws away stashed changes ({count} stash entr"
                     f"{'y' if count == 1 else 'ies'}); they cannot be recovered from a branch. Let the user approve")

    def git_branch(self, words: list["Word"], cmd: "Command") -> None:
        """``git branch -D``/``-d -f``/``-f``/``-M``/``-C`` of a branch holding commits nothing else holds."""
        values = [w.value for w in words[1:]]
        delete, targets = _branch_targets(values)
        cwd = self._repo_dir(cmd) if targets else None
        if cwd is None:
            return
        for name in targets:
            if name is None:
                self.ask("`git branch` deletes or moves a branch named at run time; name it literally")
                continue
            count = unique_commits(cwd, name)
            if count:
                self.ask(f"`git branch {'-D' if delete else '-f'} {name}` would lose {count} commit(s) that no "
                         "other branch, remote or tag holds (unpushed work); push or merge them first, or let "
                         "the user approve")

    def reset_branch(self, values: list[str | None], cmd: "Command", flags: tuple[str, ...]) -> None:
        """``git checkout -B``/``git switch -C`` of an existing branch: its commits the new start lacks are lost."""
        found, branch, start = _reset_target(values, flags)
        cwd = self._repo_dir(cmd) if found else None
        if cwd is None:
            return
        if branch is None or start is None:
            self.ask(f"`{flags[0]}` resets a branch (or to a start point) named at run time; name it literally")
            return
        count = commits_lost_by_reset(cwd, branch, start)
        if count:
            self.ask(f"`{flags[0]} {branch}` resets branch {branch} to {start} and would lose {count} commit(s) "
                     "that no other branch, remote or tag holds (unpushed work); push or merge them first, or let "
                     "the user approve")

    def git_update_ref(self, words: list["Word"], cmd: "Command") -> None:
        """``git update-ref -d REF`` or ``git update-ref REF NEW``: the ref's own commits are lost."""
        values = [w.value for w in words[1:]]
        if "--stdin" in values:
            self.ask("`git update-ref --stdin` changes refs the guard cannot see; let the user approve")
            return
        names = _plain(values)
        if not names:
            return
        cwd = self._repo_dir(cmd)
        if cwd is None:
            return
        ref = names[0]
        if ref is None:
            self.ask("`git update-ref` on a ref named at run time; name it literally")
            return
        if not ref.startswith("refs/") and ref != "HEAD":
            ref = f"refs/heads/{ref}" if _run(cwd, "git", "show-ref", "--verify", "--quiet",
                                                f"refs/heads/{ref}").returncode == 0 else ref
        count = unique_commits_of_ref(cwd, ref) if ref != "HEAD" else 0
        if count:
            self.ask(f"`git update-ref` would drop {count} commit(s) of {ref} that no other branch, remote or tag "
                     "holds; let the user approve")

    def git_worktree(self, words: list["Word"], cmd: "Command") -> None:
        """``git worktree remove --force`` deletes a worktree's uncommitted changes."""
        values = [w.value for w in words[1:]]
        if not values or values[0] != "remove" or not ({"-f", "--force"} & set(v for v in values if v)):
            return
        paths = _plain(values[1:])
        base = self.ctx.resolve(cmd.cwd)
        for path in paths:
            if path is None:
                self.ask("`git worktree remove --force` of a path known only at run time; name it literally")
                continue
            full = os.path.join(base, path)
            lost = dirty_paths(full, ["."]) if os.path.isdir(full) else []
            if lost:
                self.ask(f"`git worktree remove --force {path}` would delete uncommitted work ({_shown(lost)}); "
                         "commit it in that worktree first, or let the user approve")

    def git_rm(self, words: list["Word"], cmd: "Command") -> None:
        """``git rm -f`` deletes files with uncommitted changes (plain ``git rm`` refuses to)."""
        values = [w.value for w in words[1:]]
        if "--cached" in values or not ("f" in _letters(values) or "--force" in values):
            return
        self.lose_files(cmd, [v for v in values if v is None or not v.startswith("-")], "`git rm -f`")

    def git_reflog(self, words: list["Word"], cmd: "Command") -> None:
        """``git reflog expire``/``delete`` forget the last way back to commits no ref holds."""
        del cmd
        if len(words) > 1 and words[1].value in ("expire", "delete"):
            self.ask(f"`git reflog {words[1].value}` removes the reflog, the only record of commits no branch "
                     "holds any more; let the user approve")


def _inside(path: str, top: str) -> bool:
    path = os.path.normpath(path)
    return path == top or path.startswith(top.rstrip("/") + "/")


def _letters(values: list[str | None]) -> set[str]:
    out: set[str] = set()
    for v in values:
        if v and v.startswith("-") and not v.startswith("--"):
            out |= set(v[1:])
    return out


def _branch_targets(values: list[str | None]) -> tuple[bool, list[str | None]]:
    """``(deleting, branches)`` a forced ``git branch`` deletes or overwrites ([] when it is not forced)."""
    letters = _letters(values)
    force = "f" in letters or "--force" in values
    delete = "D" in letters or (("d" in letters or "--delete" in values) and force)
    names = _plain(values)
    if delete:
        return True, names
    if letters & {"M", "C"}:
        return False, names[-1:]
    return False, names[:1] if force else []


def _find_deletes(values: list[str | None]) -> bool:
    if "-delete" in values:
        return True
    for i, v in enumerate(values):
        if v in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(values):
            nxt = values[i + 1] or ""
            if os.path.basename(nxt) in ("rm", "unlink", "shred", "mv"):
                return True
    return False


def _find_split(values: list[str | None]) -> tuple[list[str | None], list[str | None]]:
    """The start points of a ``find`` and its expression."""
    i = 0
    while i < len(values) and values[i] in ("-L", "-H", "-P"):
        i += 1
    start = i
    while i < len(values) and not (values[i] or "").startswith(("-", "(", "!")):
        i += 1
    return values[start:i], values[i:]


def _find_selected(cwd: str, roots: list[str], expr: list[str | None]) -> list[str] | None:
    """The paths ``find`` would act on (run with ``-print`` instead of its actions); None when unknown."""
    kept: list[str] = []
    i = 0
    while i < len(expr):
        value = expr[i] or ""
        if value in ("-delete",):
            i += 1
            continue
        if value in ("-exec", "-execdir", "-ok", "-okdir"):
            while i < len(expr) and expr[i] not in (";", "+"):
                i += 1
            i += 1
            continue
        if value in _FIND_TESTS:
            kept.extend([value, expr[i + 1] or ""] if i + 1 < len(expr) else [value])
            i += 2
            continue
        if value not in _FIND_FLAGS:
            return None
        kept.append(value)
        i += 1
    try:
        proc = _run(cwd, "find", *roots, *kept, "-print", timeout=10)
    except subprocess.TimeoutExpired:
        return None
    return [ln for ln in proc.stdout.splitlines() if ln] if proc.returncode == 0 else None
