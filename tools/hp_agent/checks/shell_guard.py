# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Checks on a shell command an assistant is about to run (the ``before-shell`` hook).

The command line is parsed as a shell would (:mod:`hp_agent.checks.shparse`): every simple command it
runs is checked, including those inside ``$(...)``, backticks, subshells, ``bash -c``/``sh -c`` strings,
``eval`` and wrappers (``env``, ``sudo``, ``nohup``, ``timeout``, ``xargs``, ``command``, ``exec``...).

Blocked:

* bypassing the git hooks: ``--no-verify``, ``commit -n``, ``-c core.hooksPath=...``, ``git config core.hooksPath``;
* any force push (``--force``, ``-f``, ``+refspec``, ``--force-with-lease``, ``--mirror``) or delete of a
  protected branch (``main``, ``master``, ``release/*``), and a force push without a lease elsewhere;
* a commit message that breaks the commit policy: ``-m``/``--message``, ``-F`` files, ``-F -`` fed by a
  here-document, a here-string or ``echo ... |``, and ``$(cat <<EOF ... EOF)`` are all read; a message
  only known at run time is left to the ``commit-msg`` git hook, and blocked when that hook is not installed.

Destructive commands (``git reset --hard``, ``git checkout -- <paths>``/``-f``, ``git restore <paths>``,
``git switch -f``, ``git clean -f``, ``rm -r`` of the repository or its ``.git``) are allowed only when
they would lose nothing (the files they discard are clean) and after a backup branch of HEAD was written;
otherwise they need the user's approval (``ask`` where the assistant supports it, a block elsewhere).
Removing ``.git`` or the whole repository always needs approval.
"""
from __future__ import annotations

import os
import posixpath

from hp_agent.checks import guard_env
from hp_agent.checks.guard_loss import LossChecks
from hp_agent.checks.protected import is_protected
from hp_agent.checks.shparse import Command, ShellSyntaxError, Word, parse_commands

TYPE_CHECKING = False  # no `typing` import on the hook path (~4 ms)
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterator

MAX_DEPTH = 4
SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "ash"}
_SIMPLE_WRAPPERS = {"nohup", "builtin", "time", "nice", "stdbuf", "doas", "sudo", "command", "exec", "timeout",
                    "xargs", "env"}
_WRAPPER_ARG_OPTS = {"sudo": {"-u", "-g", "-p", "-C", "-D", "-h", "-U", "-r", "-t", "-T"},
                     "doas": {"-u", "-C"}, "nice": {"-n"}, "stdbuf": {"-i", "-o", "-e"}, "exec": {"-a"},
                     "timeout": {"-s", "-k", "--signal", "--kill-after"},
                     "xargs": {"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a", "--delimiter", "--max-args",
                               "--max-procs", "--replace", "--arg-file"},
                     "env": {"-u", "-C", "--unset", "--chdir", "-S", "--split-string"}}
_GIT_ARG_OPTS = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env",
                 "--super-prefix"}
_COMMIT_ARG_SHORT = set("mFCctSu")
_COMMIT_ARG_LONG = {"--message", "--file", "--reuse-message", "--reedit-message", "--template", "--fixup",
                    "--squash", "--author", "--date", "--cleanup", "--trailer", "--pathspec-from-file"}
_PUSH_ARG_OPTS = {"-o", "--push-option", "--repo", "--receive-pack", "--exec"}
SETUP_HINT = "run `make install` (sets up .venv and installs the git hooks)"


class Verdict:
    """What to do with a command line: reasons to block, reasons to ask the user, notes (e.g. a backup)."""

    __slots__ = ("blocks", "asks", "notes")

    def __init__(self) -> None:
        self.blocks: list[str] = []
        self.asks: list[str] = []
        self.notes: list[str] = []

    @property
    def decision(self) -> str:
        """``block``, ``ask`` or ``allow``."""
        return "block" if self.blocks else ("ask" if self.asks else "allow")


class GitContext:
    """The few facts about the repository the guard needs, read lazily with git (cached per directory)."""

    def __init__(self, cwd: str | None = None, now: object = None) -> None:
        self.cwd = cwd or os.getcwd()
        self.now = now
        self._cache: dict[tuple, object] = {}

    def _git(self, cwd: str, *args: str):
        import subprocess  # pylint: disable=import-outside-toplevel  # most commands need no git call
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False,
                              env=dict(os.environ, LC_ALL="C", GIT_OPTIONAL_LOCKS="0"))

    def resolve(self, cwd: str | None) -> str:
        """An absolute directory for a command's (possibly relative) working directory."""
        if cwd is None:
            return self.cwd
        return os.path.normpath(cwd if os.path.isabs(cwd) else os.path.join(self.cwd, cwd))

    def _cached(self, key: tuple, *args: str):
        if key not in self._cache:
            self._cache[key] = self._git(key[-1], *args)
        return self._cache[key]  # type: ignore[return-value]

    def toplevel(self, cwd: str) -> str | None:
        """The work tree root of ``cwd`` (None outside a repository)."""
        proc = self._cached(("top", cwd), "rev-parse", "--show-toplevel")
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def branch(self, cwd: str) -> str | None:
        """The checked-out branch (None when detached or outside a repository)."""
        proc = self._cached(("branch", cwd), "symbolic-ref", "--quiet", "--short", "HEAD")
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def has_commit_msg_hook(self, cwd: str) -> bool:
        """True when the repository's ``commit-msg`` hook is installed and executable."""
        proc = self._cached(("hook", cwd), "rev-parse", "--git-path", "hooks/commit-msg")
        if proc.returncode != 0:
            return False
        path = proc.stdout.strip()
        path = path if os.path.isabs(path) else os.path.join(cwd, path)
        return os.path.isfile(path) and os.access(path, os.X_OK)

    def git_alias(self, cwd: str, name: str) -> str | None:
        """The value of git alias ``name`` in ``cwd``'s configuration (None when there is none)."""
        if not os.path.isdir(cwd):
            return None
        proc = self._cached(("alias", name, cwd), "config", "--get", f"alias.{name}")
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def would_lose(self, cwd: str, kind: str) -> list[str]:
        """Paths whose content ``kind`` (tracked | untracked | ignored) would discard."""
        args = ["status", "--porcelain=v1", "--untracked-files=all" if kind != "tracked" else "--untracked-files=no"]
        if kind == "ignored":
            args.append("--ignored=matching")
        proc = self._git(cwd, *args)
        if proc.returncode != 0:
            return [f"(git status failed: {proc.stderr.strip()})"]
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        if kind == "untracked":
            lines = [ln for ln in lines if ln.startswith("??")]
        elif kind == "ignored":
            lines = [ln for ln in lines if ln.startswith(("??", "!!"))]
        return [ln[3:] for ln in lines]

    def backup_head(self, cwd: str) -> str | None:
        """Write ``backup/<branch>/<UTC timestamp>`` at HEAD; return its name (None without a commit)."""
        head = self._git(cwd, "rev-parse", "--verify", "--quiet", "HEAD^{commit}").stdout.strip()
        if not head:
            return None
        import datetime as _dt  # pylint: disable=import-outside-toplevel
        stamp = (self.now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
        name = f"backup/{self.branch(cwd) or 'detached'}/{stamp}"
        suffix = 1
        while self._git(cwd, "rev-parse", "--verify", "--quiet", f"refs/heads/{name}").returncode == 0:
            suffix += 1
            name = f"backup/{self.branch(cwd) or 'detached'}/{stamp}-{suffix}"
        proc = self._git(cwd, "update-ref", f"refs/heads/{name}", head, "")
        return name if proc.returncode == 0 else None


# -- unwrapping -----------------------------------------------------------------------------------------
def _skip_options(words: list[Word], start: int, arg_opts: set[str]) -> int:
    """Index of the first non-option word after ``start`` (options in ``arg_opts`` take a value)."""
    i = start
    while i < len(words):
        value = words[i].value or ""
        if value == "--":
            return i + 1
        if not value.startswith("-") or value == "-":
            return i
        i += 2 if value in arg_opts else 1
    return i


def _shell_script(words: list[Word]) -> Word | None:
    """The command string of ``bash -c STRING`` (any flag cluster holding ``c``), else None."""
    seen_c = False
    i = 1
    while i < len(words):
        value = words[i].value
        if value is None:
            return words[i] if seen_c else None
        if value.startswith("-") and not value.startswith("--") and len(value) > 1:
            seen_c = seen_c or "c" in value[1:]
            i += 2 if value in ("-o", "-O") else 1
            continue
        if value.startswith("--"):
            i += 1
            continue
        return words[i] if seen_c else None
    return None


def _env_chdir(words: list[Word], cwd: str | None) -> str | None:
    for i, word in enumerate(words[:-1]):
        if word.value in ("-C", "--chdir") and words[i + 1].value:
            return posixpath.join(cwd or ".", words[i + 1].value)
    return cwd


def _unwrap_once(cmd: Command) -> tuple[list[Word], str | None, list[Word]] | None:
    """Strip one wrapper (``env``, ``sudo``, ...) from ``cmd``: the words it runs, its cwd and the variables the
    wrapper sets (``env NAME=VALUE``); None when it is not a wrapper."""
    name = cmd.name
    if name not in _SIMPLE_WRAPPERS:
        return None
    words = cmd.words
    if name == "command" and any(w.value in ("-v", "-V") for w in words[1:2]):
        return [], cmd.cwd, []  # a lookup, not a run
    start = _skip_options(words, 1, _WRAPPER_ARG_OPTS.get(name, set()))
    cwd = _env_chdir(words, cmd.cwd) if name == "env" else cmd.cwd
    assigned: list[Word] = []
    if name == "env":
        while start < len(words) and "=" in words[start].raw.split("$", 1)[0] \
                and not words[start].raw.startswith("="):
            assigned.append(words[start])
            start += 1
    if name == "timeout" and start < len(words):
        start += 1  # the duration
    rest = words[start:]
    if name == "xargs":
        rest = rest + [Word(None, "<xargs input>")]
    return rest, cwd, assigned


def expand(cmd: Command, depth: int = 0) -> Iterator[tuple[Command, int]]:
    """Yield the commands ``cmd`` really runs: wrappers stripped, ``bash -c``/``eval`` strings parsed."""
    current = cmd
    for _ in range(8):
        unwrapped = _unwrap_once(current)
        if unwrapped is None:
            break
        words, cwd, assigned = unwrapped
        if not words:
            if assigned:
                yield current.copy(words=[], assignments=current.assignments + assigned), depth
            return
        current = current.copy(words=words, cwd=cwd, assignments=current.assignments + assigned)
    script = None
    if current.name in SHELLS:
        script = _shell_script(current.words)
    elif current.name == "eval":
        parts = [w.value for w in current.words[1:]]
        script = Word(None if None in parts else " ".join(p for p in parts if p is not None), "eval")
    if script is None:
        yield current, depth
        return
    yield from _expand_script(script, current, depth)


def _expand_script(script: Word, parent: Command, depth: int) -> Iterator[tuple[Command, int]]:
    if script.value is None or depth >= MAX_DEPTH:
        yield parent.copy(words=[Word("__opaque_script__", script.raw)]), depth
        return
    for inner in parse_commands(script.value):
        cwd = inner.cwd if inner.cwd and os.path.isabs(inner.cwd) else (
            posixpath.join(parent.cwd, inner.cwd) if parent.cwd and inner.cwd else (inner.cwd or parent.cwd))
        yield from expand(inner.copy(cwd=cwd), depth + 1)


# -- git --------------------------------------------------------------------------------------------------
def git_invocation(cmd: Command) -> tuple[list[Word], str | None, list[str]] | None:
    """``(subcommand words, cwd, -c settings)`` when ``cmd`` runs git, else None."""
    if cmd.name != "git":
        return None
    words, cwd, configs = cmd.words[1:], cmd.cwd, []
    i = 0
    while i < len(words):
        value = words[i].value or ""
        if not value.startswith("-"):
            break
        key, eq, inline = value.partition("=")
        arg = inline if eq else (words[i + 1].value if i + 1 < len(words) else "")
        if key == "-C" and arg:
            cwd = arg if arg.startswith("/") else posixpath.join(cwd or ".", arg)
        elif key in ("-c", "--config-env"):
            configs.append(arg or "")
        i += (1 if eq or key not in _GIT_ARG_OPTS else 2)
    return words[i:], cwd, configs


def _hooks_path_override(configs: list[str]) -> bool:
    return any(guard_env.risky_key(c.split("=", 1)[0]) for c in configs)


def _config_aliases(configs: list[str]) -> dict[str, str]:
    """``-c alias.NAME=VALUE`` settings of one git command."""
    out = {}
    for conf in configs:
        key, eq, value = conf.partition("=")
        if eq and key.lower().startswith("alias."):
            out[key[6:]] = value
    return out


# git's own commands (an alias cannot shadow them; anything else may be an alias to look up)
GIT_BUILTINS = frozenset(
    "add am annotate apply archive bisect blame branch bundle cat-file check-ignore checkout cherry cherry-pick "
    "clean clone commit commit-tree config count-objects describe diff diff-files diff-index diff-tree difftool "
    "fetch for-each-ref format-patch fsck gc grep hash-object help init log ls-files ls-remote ls-tree maintenance "
    "merge merge-base mergetool mv name-rev notes prune pull push range-diff read-tree rebase reflog remote repack "
    "replace rerere reset restore rev-list rev-parse revert rm shortlog show show-ref sparse-checkout stash status "
    "submodule switch symbolic-ref tag update-index update-ref var verify-commit version whatchanged worktree "
    "write-tree lfs".split())
_DECLARERS = {"export", "declare", "typeset", "local", "readonly"}
_VAR_REF = "$"


def _short_cluster(value: str, arg_letters: set[str]) -> tuple[set[str], str | None, str | None]:
    """Letters of a short-option cluster, the letter taking a value and its inline value (if any)."""
    letters: set[str] = set()
    for k, ch in enumerate(value[1:], start=1):
        letters.add(ch)
        if ch in arg_letters:
            return letters, ch, value[k + 1:] or None
    return letters, None, None


class _CommitArgs:  # pylint: disable=too-few-public-methods
    __slots__ = ("no_verify", "messages", "files", "reuse", "amend")

    def __init__(self) -> None:
        self.no_verify = self.reuse = self.amend = False
        self.messages: list[str | None] = []
        self.files: list[str | None] = []


def _commit_arg(args: _CommitArgs, opt: str, value: str | None) -> None:
    if opt in ("m", "--message"):
        args.messages.append(value)
    elif opt in ("F", "--file"):
        args.files.append(value)
    elif opt in ("C", "c", "--reuse-message", "--reedit-message", "--fixup", "--squash"):
        args.reuse = True


def parse_commit(words: list[Word]) -> _CommitArgs:
    """The options of ``git commit`` that matter to the guard."""
    args = _CommitArgs()
    i = 1
    while i < len(words):
        value = words[i].value
        nxt = words[i + 1].value if i + 1 < len(words) else None
        i += 1
        if value is None or not value.startswith("-") or value == "-":
            continue
        if value == "--":
            break
        if value.startswith("--"):
            key, eq, inline = value.partition("=")
            args.no_verify |= key == "--no-verify"
            args.amend |= key == "--amend"
            if key in _COMMIT_ARG_LONG:
                _commit_arg(args, key, inline if eq else nxt)
                i += 0 if eq else 1
            continue
        letters, opt, inline = _short_cluster(value, _COMMIT_ARG_SHORT)
        args.no_verify |= "n" in letters
        if opt:
            _commit_arg(args, opt, inline if inline is not None else nxt)
            i += 0 if inline is not None else 1
    return args


def _var_name(raw: str) -> tuple[str, bool] | None:
    """``(name, quoted)`` when a word is exactly one variable reference (``$g``, ``${g}``, ``"$g"``)."""
    quoted = len(raw) > 1 and raw[0] == raw[-1] == '"'
    body = raw[1:-1] if quoted else raw
    if not body.startswith(_VAR_REF):
        return None
    name = body[2:-1] if body.startswith("${") and body.endswith("}") else body[1:]
    return (name, quoted) if name and name.replace("_", "a").isalnum() and not name[0].isdigit() else None


class Guard(LossChecks):
    """Evaluates a command line against the policy (see the module docstring)."""

    def __init__(self, ctx: GitContext, bootstrap: bool = False, speculative: bool = False) -> None:
        self.ctx = ctx
        self.bootstrap = bootstrap
        self.speculative = speculative  # checking "what if this were git": never write a backup
        self.verdict = Verdict()
        self.variables: dict[str, str | None] = {}
        self.aliases: dict[str, str] = {}
        self.depth = 0

    def block(self, text: str) -> None:
        """Add a reason to block (once)."""
        if text not in self.verdict.blocks:
            self.verdict.blocks.append(text)

    def check(self, command: str) -> Verdict:
        """Evaluate ``command``."""
        try:
            commands = parse_commands(command)
        except ShellSyntaxError as exc:
            self.block(f"cannot parse the shell command ({exc}); refusing to guess what it does")
            return self.verdict
        self.check_all(commands)
        return self.verdict

    def check_all(self, commands: list[Command]) -> None:
        """Check parsed commands in order (variables and aliases they define apply to the later ones)."""
        for top in commands:
            for cmd, _depth in expand(top):
                self.check_one(cmd)

    def check_one(self, cmd: Command) -> None:
        """Check one simple command."""
        self.check_environment(cmd, cmd.assignments)
        self.check_redirects(cmd)
        if not cmd.words:
            self.remember(cmd.assignments)
            return
        if cmd.words[0].value == "__opaque_script__":
            self.block(f"the script given to a shell ({cmd.words[0].raw[:80]}) is built at run time or nested "
                       "too deeply; it cannot be checked. Run the commands directly")
            return
        if cmd.words[0].value is None or cmd.name in self.aliases:
            self.check_expanded_name(cmd)
            return
        if cmd.name in _DECLARERS or cmd.name == "alias":
            self.declare(cmd)
            return
        self.check_writes(cmd)
        if cmd.name in ("rm", "unlink", "shred"):
            self.check_rm(cmd)
            return
        if cmd.name == "find":
            self.check_find(cmd)
            return
        git = git_invocation(cmd)
        if git is not None:
            self.check_git(cmd, *git)

    def check_git(self, cmd: Command, words: list[Word], cwd: str | None, configs: list[str]) -> None:
        """One git command: its ``-c`` settings, then its subcommand (a git alias is expanded first)."""
        if _hooks_path_override(configs):
            self.block("overriding core.hooksPath or including another config file (include.path/includeIf) on "
                       "the command line bypasses the repository's git hooks")
        sub = words[0].value if words else None
        if sub and sub not in GIT_BUILTINS and self.depth < MAX_DEPTH:
            alias = _config_aliases(configs).get(sub) or self.ctx.git_alias(self.ctx.resolve(cwd), sub)
            if alias:
                self.check_git_alias(cmd.copy(cwd=cwd), alias, words[1:])
                return
        handler = getattr(self, f"git_{(sub or '').replace('-', '_')}", None)
        if handler is not None:
            handler(words, cmd.copy(cwd=cwd))

    def check_git_alias(self, cmd: Command, alias: str, rest: list[Word]) -> None:
        """A git alias runs git with its words (or a shell command for ``!...``), then the given arguments."""
        self.depth += 1
        try:
            if alias.startswith("!"):
                extra = " ".join(w.raw for w in rest)
                self.check_all([c.copy(cwd=c.cwd or cmd.cwd) for c in parse_commands(f"{alias[1:]} {extra}")])
                return
            words = [Word("git", "git")] + [Word(v, v) for v in _split(alias)] + rest
            self.check_one(cmd.copy(words=words, assignments=[]))
        except ShellSyntaxError as exc:
            self.block(f"the git alias {alias[:60]!r} cannot be parsed ({exc})")
        finally:
            self.depth -= 1

    # -- variables, aliases, environment ---------------------------------------------------------------
    def remember(self, assignments: list[Word]) -> None:
        """Record ``NAME=VALUE`` words (their static value, None when only known at run time)."""
        for word in assignments:
            name, _, raw_value = word.raw.partition("=")
            value = word.value.partition("=")[2] if word.value is not None else None
            self.variables[name] = value if value is not None or not raw_value else None

    def declare(self, cmd: Command) -> None:
        """``export``/``declare``/... record variables; ``alias name=value`` records an alias."""
        words = [w for w in cmd.words[1:] if not (w.value or "").startswith("-")]
        assigned = [w for w in words if "=" in w.raw.split("$", 1)[0]]
        if cmd.name == "alias":
            for word in assigned:
                name, _, value = (word.value or word.raw).partition("=")
                self.aliases[name] = value if word.value is not None else ""
            return
        self.check_environment(cmd, assigned)
        self.remember(assigned)

    def check_environment(self, cmd: Command, assignments: list[Word]) -> None:
        """Variables that make git read other configuration (``GIT_CONFIG_*``)."""
        for word in assignments:
            name = word.raw.partition("=")[0]
            value = word.value.partition("=")[2] if word.value is not None else None
            found = guard_env.assignment_problem(name, value, self.ctx.resolve(cmd.cwd))
            if found:
                (self.block if found[0] == "block" else self.ask)(found[1])

    def check_expanded_name(self, cmd: Command) -> None:
        """A command name from a variable (``$g push``) or a shell alias: check what it expands to."""
        first = cmd.words[0]
        if self.depth >= MAX_DEPTH:
            self.block(f"the command name {first.raw[:40]} expands too deeply to be checked; run it directly")
            return
        text = self.expansion(first)
        self.depth += 1
        alias = self.aliases.pop(cmd.name, None) if first.value is not None else None  # bash: no self-expansion
        try:
            if text is not None:
                rest = " ".join(w.raw for w in cmd.words[1:])
                self.check_all([c.copy(cwd=c.cwd or cmd.cwd) for c in parse_commands(f"{text} {rest}")])
                return
            self.speculate_git(cmd)
        except ShellSyntaxError as exc:
            self.block(f"the command {first.raw[:40]} expands to something that cannot be parsed ({exc})")
        finally:
            self.depth -= 1
            if alias is not None:
                self.aliases[cmd.name] = alias

    def expansion(self, first: Word) -> str | None:
        """Shell text a command name stands for: a shell alias, or a variable with a known value."""
        if first.value is not None:
            return self.aliases.get(posixpath.basename(first.value))
        ref = _var_name(first.raw)
        if not ref or self.variables.get(ref[0]) is None:
            return None
        value = self.variables[ref[0]] or ""
        return _quote(value) if ref[1] else value

    def speculate_git(self, cmd: Command) -> None:
        """A command name only known at run time: refuse when, were it git, the command would be refused."""
        other = Guard(self.ctx, bootstrap=self.bootstrap, speculative=True)
        other.variables, other.aliases, other.depth = self.variables, self.aliases, self.depth
        other.check_one(cmd.copy(words=[Word("git", "git")] + cmd.words[1:], assignments=[]))
        for reason in other.verdict.blocks + other.verdict.asks:
            self.block(f"the command name {cmd.words[0].raw[:40]} is only known at run time and, if it is git: "
                       f"{reason}")

    def check_redirects(self, cmd: Command) -> None:
        """Writing git's config or hooks with a redirection."""
        for op, target in cmd.redirects:
            if op in (">", ">>", ">|", "&>", "&>>", "<>") and target.value:
                what = guard_env.git_dir_target(target.value, self.ctx.resolve(cmd.cwd))
                if what:
                    self.block(f"writing {what} directly (`{op} {target.value}`) can switch off the repository's "
                               "git hooks; use `git config`/`hp-agent install` instead")

    def check_writes(self, cmd: Command) -> None:
        """``rm``/``mv``/``chmod``/``sed -i``... on git's config or hooks."""
        if cmd.name not in guard_env.WRITERS:
            return
        values = [w.value for w in cmd.words[1:] if w.value and not w.value.startswith("-")]
        if cmd.name in ("cp", "install", "ln", "dd"):
            values = values[-1:] if cmd.name != "dd" else [v[3:] for v in values if v.startswith("of=")]
        if cmd.name in ("sed", "perl") and not any((w.value or "").startswith(("-i", "-pi")) for w in cmd.words):
            return
        for value in values:
            what = guard_env.git_dir_target(value, self.ctx.resolve(cmd.cwd))
            if what:
                self.block(f"`{cmd.name}` on {what} ({value}) can switch off the repository's git hooks; "
                           "use `git config`/`hp-agent install` instead")

    # -- commit ----------------------------------------------------------------------------------------
    def git_commit(self, words: list[Word], cmd: Command) -> None:
        """Hook bypass and the commit message policy."""
        args = parse_commit(words)
        if args.no_verify:
            self.block("`git commit --no-verify`/`-n` skips the repository's commit checks; commit without it")
        message, known = self.commit_message(args, cmd)
        if message is not None:
            from hp_agent.checks.commit_msg import check_commit_message  # pylint: disable=import-outside-toplevel
            for problem in check_commit_message(message):
                self.block(f"commit message: {problem}")
        elif not known and not args.reuse and not (args.amend and not args.messages and not args.files):
            self.unknown_message(cmd)

    def commit_message(self, args: _CommitArgs, cmd: Command) -> tuple[str | None, bool]:
        """The message the commit will get when it is known now, and whether it is known."""
        parts: list[str] = []
        for value in args.messages:
            if value is None:
                return None, False
            parts.append(value)
        for value in args.files:
            text = self.message_file(value, cmd)
            if text is None:
                return None, False
            parts.append(text)
        return ("\n\n".join(parts), True) if parts else (None, False)

    def message_file(self, value: str | None, cmd: Command) -> str | None:
        """Contents of ``-F VALUE``: stdin when ``-``, a readable file, else None (unknown)."""
        if value is None:
            return None
        if value == "-":
            return cmd.stdin if cmd.stdin_known else None
        try:
            with open(os.path.join(self.ctx.resolve(cmd.cwd), value), encoding="utf-8") as fh:
                return fh.read()
        except (OSError, UnicodeDecodeError):
            return None

    def unknown_message(self, cmd: Command) -> None:
        """A message only known at run time: fine when the commit-msg hook will check it."""
        if self.bootstrap or not self.ctx.has_commit_msg_hook(self.ctx.resolve(cmd.cwd)):
            self.block("the commit message is only known when the command runs and the repository's commit-msg "
                       f"hook is not installed to check it; {SETUP_HINT}, or pass the message literally with -m")

    # -- push ------------------------------------------------------------------------------------------
    def git_push(self, words: list[Word], cmd: Command) -> None:
        """Force pushes, deletes and hook bypasses."""
        opts, positional = _push_args(words)
        if "--no-verify" in opts:
            self.block("`git push --no-verify` skips the pre-push policy; push without it")
        hard = bool(opts & {"-f", "--force"})
        lease = any(o.startswith("--force-with-lease") for o in opts)
        deleting = bool(opts & {"-d", "--delete"})
        if opts & {"--mirror", "--all"} and (hard or lease or "--mirror" in opts):
            self.block("forced `git push --all/--mirror` would overwrite protected branches; push one branch")
            return
        refspecs = positional[1:] if positional else []
        targets = self.push_targets(refspecs, cmd)
        for spec, dst in targets:
            self.check_push_target(spec, dst, hard or (spec or "").startswith("+"), lease, deleting)

    def push_targets(self, refspecs: list[str | None], cmd: Command) -> list[tuple[str | None, str | None]]:
        """``(refspec, destination branch)`` pairs; no refspec means the current branch."""
        if not refspecs:
            return [(None, self.ctx.branch(self.ctx.resolve(cmd.cwd)))]
        out = []
        for spec in refspecs:
            if spec is None:
                out.append((None, None))
                continue
            dst = (spec.split(":", 1)[1] if ":" in spec else spec).lstrip("+").removeprefix("refs/heads/")
            if dst == "HEAD":
                dst = self.ctx.branch(self.ctx.resolve(cmd.cwd))
            out.append((spec, dst))
        return out

    def check_push_target(self, spec: str | None, dst: str | None, hard: bool, lease: bool,
                          deleting: bool) -> None:
        """The policy for one destination branch."""
        forced = hard or lease
        if dst is None:
            if forced or deleting:
                self.block("cannot tell which branch this forced push or delete targets (a variable or a detached "
                           "HEAD); name the branch literally")
            return
        if is_protected(dst):
            if deleting or (spec or "").startswith(":"):
                self.block(f"deleting protected branch '{dst}' is not allowed")
            elif forced:
                kind = "with a lease " if lease and not hard else ""
                self.block(f"force-pushing protected branch '{dst}' {kind}is not allowed; open a PR instead")
            return
        if hard and not lease:
            self.block("force push without a lease can destroy others' work; "
                       "use `git push --force-with-lease=<branch>:<expected sha>`")

    # -- config ----------------------------------------------------------------------------------------
    def git_config(self, words: list[Word], cmd: Command) -> None:
        """Setting core.hooksPath switches the repository's hooks off."""
        del cmd
        problem = guard_env.config_write_problem([w.value or "" for w in words[1:]])
        if problem:
            self.block(problem)

    # -- destructive -----------------------------------------------------------------------------------
    def git_reset(self, words: list[Word], cmd: Command) -> None:
        """``git reset --hard`` discards tracked changes and moves HEAD."""
        if any(w.value == "--hard" for w in words[1:]):
            self.destructive(cmd, "`git reset --hard`", "tracked")

    def git_checkout(self, words: list[Word], cmd: Command) -> None:
        """``git checkout -- <paths>``, ``git checkout <tree> <paths>``, ``git checkout -f``."""
        values = [w.value for w in words[1:]]
        what = _checkout_discards(values, self.ctx.resolve(cmd.cwd))
        if what:
            self.destructive(cmd, what, "tracked")
        self.reset_branch(values, cmd, ("-B",))

    def git_restore(self, words: list[Word], cmd: Command) -> None:
        """``git restore <paths>`` discards worktree changes unless only ``--staged`` is given."""
        values = [w.value or "" for w in words[1:]]
        staged = any(v in ("--staged", "-S") for v in values)
        worktree = any(v in ("--worktree", "-W") for v in values)
        if worktree or not staged:
            self.destructive(cmd, "`git restore`", "tracked")

    def git_switch(self, words: list[Word], cmd: Command) -> None:
        """``git switch -f``/``--discard-changes``; ``-C``/``--force-create`` of a branch with unpushed commits."""
        if any(w.value in ("-f", "--force", "--discard-changes") for w in words[1:]):
            self.destructive(cmd, "`git switch --discard-changes`", "tracked")
        self.reset_branch([w.value for w in words[1:]], cmd, ("-C", "--force-create"))

    def git_clean(self, words: list[Word], cmd: Command) -> None:
        """``git clean -f`` deletes untracked files (``-x``/``-X``: ignored ones too, e.g. .venv)."""
        letters: set[str] = set()
        for w in words[1:]:
            v = w.value or ""
            if v.startswith("--"):
                letters |= {"f"} if v == "--force" else ({"n"} if v == "--dry-run" else set())
            elif v.startswith("-"):
                letters |= set(v[1:])
        if "f" not in letters or "n" in letters:
            return
        kind = "ignored" if letters & {"x", "X"} else "untracked"
        self.destructive(cmd, "`git clean -f" + ("x`" if kind == "ignored" else "`"), kind)

    def check_rm(self, cmd: Command) -> None:
        """``rm -r`` of ``.git``, of the repository (or a parent of it), or of everything in it."""
        values = [w.value for w in cmd.words[1:]]
        targets = _rm_targets(values)
        if not _rm_recursive(values):
            self.lose_files(cmd, targets, f"`{cmd.name}`")
            return
        base = self.ctx.resolve(cmd.cwd)
        top = self.ctx.toplevel(base) if os.path.isdir(base) else None
        for value in (v for v in values if v and not v.startswith("-")):
            target = os.path.normpath(os.path.join(base, os.path.expanduser(value)))
            if _deletes_repo(value, target, top):
                self.ask(f"`rm -r {value}` deletes the repository's history (.git); it cannot be undone")
            elif top and value in ("*", "./*") and base == top:
                self.destructive(cmd, f"`rm -r {value}`", "untracked")
        if not self.verdict.asks:
            self.lose_files(cmd, targets, "`rm -r`")

    def ask(self, text: str) -> None:
        """A reason the user must approve."""
        if text not in self.verdict.asks:
            self.verdict.asks.append(text)

    def destructive(self, cmd: Command, what: str, kind: str) -> None:
        """Allow ``what`` only when it loses nothing, after a backup branch of HEAD; else ask."""
        cwd = self.ctx.resolve(cmd.cwd)
        if not os.path.isdir(cwd) or self.ctx.toplevel(cwd) is None:
            return  # not in a git work tree: nothing of ours to protect
        lost = self.ctx.would_lose(cwd, kind)
        if lost:
            shown = ", ".join(lost[:8]) + (f" and {len(lost) - 8} more" if len(lost) > 8 else "")
            self.ask(f"{what} would discard uncommitted work ({shown}); commit it or run "
                     "`git stash push --include-untracked` first, or let the user approve")
            return
        backup = None if self.speculative else self.ctx.backup_head(cwd)
        self.verdict.notes.append(f"{what}: the working tree has nothing to lose"
                                  + (f"; HEAD backed up as branch {backup}" if backup else ""))


def _checkout_discards(values: list[str | None], base: str) -> str | None:
    """How a ``git checkout`` discards work (None when it only switches or creates a branch)."""
    if any(v in ("-f", "--force") for v in values):
        return "`git checkout --force`"
    if "--" in values and values.index("--") < len(values) - 1:
        return "`git checkout -- <paths>`"
    if any(v in ("-b", "-B", "--orphan") for v in values):
        return None
    plain = [v for v in values if v is None or not v.startswith("-")]
    if len(plain) >= 2 or any(v == "." or (v and os.path.exists(os.path.join(base, v))) for v in plain):
        return "`git checkout <paths>`"
    return None


def _deletes_repo(value: str, target: str, top: str | None) -> bool:
    """True when ``rm -r value`` removes a ``.git`` directory or a directory holding the repository."""
    if posixpath.basename(value.rstrip("/")) == ".git" or os.path.exists(os.path.join(target, ".git")):
        return True
    return bool(top) and (top == target or top.startswith(target + "/"))


def _rm_targets(values: list[str | None]) -> list[str | None]:
    """The operands of ``rm`` (after ``--`` everything is one)."""
    out: list[str | None] = []
    operands = False
    for value in values:
        if value == "--" and not operands:
            operands = True
        elif operands or value is None or not value.startswith("-") or value == "-":
            out.append(value)
    return out


def _split(text: str) -> list[str]:
    """Split a git alias (or an unquoted variable's value) into words, as git and the shell do."""
    import shlex  # pylint: disable=import-outside-toplevel
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _quote(value: str) -> str:
    import shlex  # pylint: disable=import-outside-toplevel
    return shlex.quote(value)


def _rm_recursive(values: list[str | None]) -> bool:
    return any(v == "--recursive" or (v.startswith("-") and not v.startswith("--") and set(v[1:]) & {"r", "R"})
               for v in values if v)


def _push_args(words: list[Word]) -> tuple[set[str], list[str | None]]:
    """Options (long ones without their ``=value``, short clusters split) and positional words of a push."""
    opts: set[str] = set()
    positional: list[str | None] = []
    i = 1
    while i < len(words):
        value = words[i].value
        i += 1
        if value is None:
            positional.append(None)
        elif value.startswith("--"):
            key = value.split("=", 1)[0]
            opts.add(key if not key.startswith("--force-with-lease") else value)
            i += 1 if key in _PUSH_ARG_OPTS and "=" not in value else 0
        elif value.startswith("-") and len(value) > 1:
            opts.update(f"-{ch}" for ch in value[1:])
            i += 1 if value in _PUSH_ARG_OPTS else 0
        else:
            positional.append(value)
    return opts, positional


def evaluate(command: str, cwd: str | None = None, ctx: GitContext | None = None,
             bootstrap: bool = False) -> Verdict:
    """Evaluate ``command`` as run from ``cwd`` (see the module docstring)."""
    return Guard(ctx or GitContext(cwd), bootstrap=bootstrap).check(command)


def check_shell_command(command: str, cwd: str | None = None) -> list[str]:
    """The reasons not to run ``command`` right away (blocks, then what needs the user's approval)."""
    verdict = evaluate(command, cwd)
    return verdict.blocks + verdict.asks
