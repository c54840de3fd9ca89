# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""A small POSIX-shell parser for the before-shell guard: what commands would this line run?

It reads a command line the way bash does, far enough to know every simple command it runs and the
static value of each word: quoting (``'...'``, ``"..."``, ``$'...'``, backslashes), operators (``;``,
``&``, ``&&``, ``||``, ``|``, newlines), subshells and groups, ``if``/``while``/``for``/``case``
bodies, redirections, here-documents and here-strings (their text becomes the command's stdin), and
command substitutions ``$(...)`` and backticks, whose commands are run too and whose value is known
when it is ``cat`` of a here-document or ``echo`` of static words (the way assistants write commit
messages). A word built from a variable or an unknown substitution is *dynamic* (``value`` is None).

Nothing is executed. Input that bash would reject (an unterminated quote, a missing ``)``) raises
:class:`ShellSyntaxError`.
"""
from __future__ import annotations

import posixpath

_OPERATOR_CHARS = set(";&|<>()\n")
_SPACE = " \t\r"
_RESERVED_SKIP = {"if", "then", "else", "elif", "do", "while", "until", "!", "{", "time"}
_RESERVED_END = {"fi", "done", "esac", "}"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "e": "\x1b",
            "0": "\0"}


class ShellSyntaxError(ValueError):
    """The command line is not valid shell syntax (the message says where)."""


class Word:
    """One shell word: its static value (None when it depends on run-time expansion) and its source text."""

    __slots__ = ("value", "raw")

    def __init__(self, value: str | None, raw: str) -> None:
        self.value, self.raw = value, raw

    def __repr__(self) -> str:
        return f"Word({self.value!r}, {self.raw!r})"

    @property
    def dynamic(self) -> bool:
        """True when the value is only known when the shell runs."""
        return self.value is None


class Command:
    """A simple command: assignments, argv words, stdin text when static, cwd when changed by ``cd``."""

    __slots__ = ("words", "assignments", "stdin", "stdin_known", "cwd", "piped_from", "redirects")

    def __init__(self, words: list[Word], cwd: str | None = None) -> None:
        self.words = words
        self.assignments: list[Word] = []
        self.redirects: list[tuple[str, Word]] = []
        self.stdin: str | None = None
        self.stdin_known = False
        self.cwd = cwd
        self.piped_from: Command | None = None

    def copy(self, **changes: object) -> "Command":
        """A copy with some attributes changed (``words``, ``cwd``...)."""
        new = Command(self.words, self.cwd)
        for name in self.__slots__:
            setattr(new, name, changes.get(name, getattr(self, name)))
        return new

    def __repr__(self) -> str:
        return f"Command({self.argv()!r}, cwd={self.cwd!r}, stdin={self.stdin!r})"

    def runs_something(self) -> bool:
        """True when the command has words, assignments or redirections (an assignment alone sets a variable)."""
        return bool(self.words or self.assignments or self.redirects)

    def argv(self) -> list[str | None]:
        """The words' values (None for dynamic ones)."""
        return [w.value for w in self.words]

    @property
    def name(self) -> str | None:
        """The command name (its last path component), None when dynamic or absent."""
        if not self.words or self.words[0].value is None:
            return None
        return posixpath.basename(self.words[0].value)


class _Heredoc:  # pylint: disable=too-few-public-methods
    __slots__ = ("delimiter", "strip_tabs", "target")

    def __init__(self, delimiter: str, strip_tabs: bool, target: Command) -> None:
        self.delimiter, self.strip_tabs, self.target = delimiter, strip_tabs, target


class _Parser:  # pylint: disable=too-few-public-methods
    """Recursive-descent reader over one shared position (here-documents are read at newlines)."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.pending: list[_Heredoc] = []
        self.commands: list[Command] = []
        self.pipe_from: Command | None = None

    # -- low level --------------------------------------------------------------------------------
    def peek(self, n: int = 1) -> str:
        """The next ``n`` characters ('' at the end)."""
        return self.s[self.i:self.i + n]

    def error(self, what: str) -> ShellSyntaxError:
        """A syntax error naming the position."""
        return ShellSyntaxError(f"{what} at character {self.i + 1}")

    def skip_blanks(self) -> None:
        """Skip spaces, tabs, line continuations and comments (not newlines)."""
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch in _SPACE:
                self.i += 1
            elif self.s.startswith("\\\n", self.i):
                self.i += 2
            elif ch == "#":
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            else:
                return

    def newline(self) -> None:
        """Consume a newline and read the bodies of the here-documents it ends the line of."""
        self.i += 1
        pending, self.pending = self.pending, []
        for doc in pending:
            self.read_heredoc(doc)

    def read_heredoc(self, doc: _Heredoc) -> None:
        """Read lines up to the delimiter line; the text becomes the command's stdin."""
        lines = []
        while True:
            if self.i >= len(self.s):
                raise self.error(f"here-document delimited by {doc.delimiter!r} is not closed")
            end = self.s.find("\n", self.i)
            line = self.s[self.i:] if end < 0 else self.s[self.i:end]
            self.i = len(self.s) if end < 0 else end + 1
            check = line.lstrip("\t") if doc.strip_tabs else line
            if check == doc.delimiter:
                break
            lines.append(check)
        doc.target.stdin = "".join(f"{line}\n" for line in lines)
        doc.target.stdin_known = True

    def operator(self) -> str | None:
        """The control operator at the position, if any (not consumed)."""
        for op in (";;", "&&", "||", "|&", ";", "&", "|", "\n", "(", ")"):
            if self.s.startswith(op, self.i):
                return op
        return None

    # -- lists, pipelines, commands ----------------------------------------------------------------
    def parse_list(self, closer: str | None, cwd: str | None) -> None:
        """Parse commands until ``closer`` (``)``, ``}`` or a keyword) or the end of input."""
        while True:
            self.skip_blanks()
            if self.i >= len(self.s):
                if closer == ")":
                    raise self.error("missing ')'")
                return
            op = self.operator()
            if op == ")" and closer == ")":
                return
            if op == ";;":
                self.i += 2
                self.next_case_pattern()
                continue
            if op in ("|", "|&"):
                self.i += len(op)
                self.pipe_from = self.commands[-1] if self.commands else None
                continue
            if op in (";", "&", "&&", "||"):
                self.i += len(op)
                continue
            if op == "\n":
                self.newline()
                continue
            cwd = self.parse_command(cwd)

    def parse_command(self, cwd: str | None) -> str | None:
        """Parse one command (subshell, group or simple command); return the cwd after it."""
        if self.peek() == "(":
            self.i += 1
            self.parse_list(")", cwd)
            self.i += 1
            return cwd
        if self.peek() == ")":
            raise self.error("unexpected ')'")
        upstream, self.pipe_from = self.pipe_from, None
        cmd = self.simple_command(cwd)
        if cmd is None:
            return cwd
        cmd.piped_from = upstream
        self.commands.append(cmd)
        return _cd_target(cmd, cwd)

    def simple_command(self, cwd: str | None) -> Command | None:
        """Words, assignments and redirections up to a control operator."""
        cmd = Command(words=[], cwd=cwd)
        while True:
            self.skip_blanks()
            if self.i >= len(self.s) or self.operator() is not None and not self.redirection_ahead():
                break
            if self.redirection_ahead():
                self.redirection(cmd)
                continue
            word = self.word()
            if not cmd.words and _is_assignment(word):
                cmd.assignments.append(word)
            elif not cmd.words and word.value in _RESERVED_SKIP | _RESERVED_END and word.raw == word.value:
                continue
            elif not cmd.words and word.value in ("for", "case", "select") and word.raw == word.value:
                self.skip_header(word.value)
            else:
                cmd.words.append(word)
        return cmd if cmd.runs_something() else None

    def skip_header(self, keyword: str) -> None:
        """``for x in a b c`` / ``case w in``: skip to the body (``do``) or the first pattern."""
        while self.i < len(self.s):
            self.skip_blanks()
            if self.operator() in (";", "\n") or self.i >= len(self.s):
                return
            if self.peek() == "(":
                self.skip_balanced("(", ")")
                continue
            word = self.word()
            if keyword == "case" and word.value == "in":
                self.case_patterns()
                return

    def next_case_pattern(self) -> None:
        """After ``;;``: either ``esac`` or the next ``pattern)``."""
        self.skip_blanks()
        while self.peek() == "\n":
            self.newline()
            self.skip_blanks()
        if self.s.startswith("esac", self.i) and self.s[self.i + 4:self.i + 5] in ("", " ", "\n", ";", ")", "\t"):
            self.i += 4
            return
        self.case_patterns()

    def case_patterns(self) -> None:
        """Skip a ``pattern)`` of a case statement (the commands after it are parsed normally)."""
        self.skip_blanks()
        while self.peek() == "\n":
            self.newline()
            self.skip_blanks()
        depth = 0
        while self.i < len(self.s):
            ch = self.s[self.i]
            self.i += 1
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    return
                depth -= 1
        raise self.error("case pattern without ')'")

    # -- redirections ------------------------------------------------------------------------------
    def redirection_ahead(self) -> bool:
        """True when a redirection operator (optionally after an fd number or ``&``) starts here."""
        j = self.i
        while j < len(self.s) and self.s[j].isdigit():
            j += 1
        if self.s.startswith("&>", j):
            return True
        return j < len(self.s) and self.s[j] in "<>" and not self.s.startswith("<(", j) \
            and not self.s.startswith(">(", j)

    def redirection(self, cmd: Command) -> None:
        """Read one redirection; here-documents and here-strings set the command's stdin."""
        while self.peek().isdigit():
            self.i += 1
        for op in ("<<<", "<<-", "<<", "&>>", "&>", ">>", ">&", "<&", "<>", ">|", "<", ">"):
            if self.s.startswith(op, self.i):
                self.i += len(op)
                break
        self.skip_blanks()
        target = self.word()
        cmd.redirects.append((op, target))
        if op in ("<<", "<<-"):
            delimiter = target.raw.replace("'", "").replace('"', "").replace("\\", "")
            self.pending.append(_Heredoc(delimiter, op == "<<-", cmd))
        elif op == "<<<":
            cmd.stdin = None if target.value is None else target.value + "\n"
            cmd.stdin_known = target.value is not None

    # -- words -------------------------------------------------------------------------------------
    def word(self) -> Word:
        """Read one word and compute its static value."""
        start = self.i
        parts: list[str | None] = []
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch in _SPACE or ch in _OPERATOR_CHARS and not self.process_substitution():
                break
            parts.append(self.word_part(ch))
        if self.i == start:
            raise self.error(f"unexpected {self.s[self.i]!r}" if self.i < len(self.s) else "unexpected end")
        value = None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
        return Word(value, self.s[start:self.i])

    def process_substitution(self) -> bool:
        """``<(...)``/``>(...)``: commands run in a process substitution are parsed, the word is dynamic."""
        return self.s.startswith("<(", self.i) or self.s.startswith(">(", self.i)

    def word_part(self, ch: str) -> str | None:
        """One piece of a word (dispatch on its first character)."""
        if ch == "\\":
            self.i += 2
            return "" if self.s[self.i - 1:self.i] == "\n" else self.s[self.i - 1:self.i]
        if ch == "'":
            return self.single_quoted()
        if ch == '"':
            return self.double_quoted()
        if ch == "`":
            return self.backtick()
        if ch == "$":
            return self.dollar(quoted=False)
        if ch in "<>":
            self.i += 1
            self.substitution()
            return None
        self.i += 1
        return ch

    def single_quoted(self) -> str:
        """``'...'``: literal text."""
        end = self.s.find("'", self.i + 1)
        if end < 0:
            raise self.error("unterminated single quote")
        text = self.s[self.i + 1:end]
        self.i = end + 1
        return text

    def double_quoted(self) -> str | None:
        """``"..."``: backslash escapes for ``$ ` " \\`` and newline, expansions inside."""
        self.i += 1
        parts: list[str | None] = []
        while True:
            if self.i >= len(self.s):
                raise self.error("unterminated double quote")
            ch = self.s[self.i]
            if ch == '"':
                self.i += 1
                break
            parts.append(self.double_quoted_part(ch))
        return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)

    def double_quoted_part(self, ch: str) -> str | None:
        """One piece inside double quotes."""
        if ch == "\\":
            nxt = self.s[self.i + 1:self.i + 2]
            self.i += 2
            if nxt == "\n":
                return ""
            return nxt if nxt in '$`"\\' else "\\" + nxt
        if ch == "`":
            return self.backtick()
        if ch == "$":
            return self.dollar(quoted=True)
        self.i += 1
        return ch

    def ansi_c(self) -> str:
        """``$'...'``: C-style escapes."""
        self.i += 2
        out = []
        while True:
            if self.i >= len(self.s):
                raise self.error("unterminated $'...' string")
            ch = self.s[self.i]
            if ch == "'":
                self.i += 1
                return "".join(out)
            if ch == "\\" and self.i + 1 < len(self.s):
                out.append(_ESCAPES.get(self.s[self.i + 1], "\\" + self.s[self.i + 1]))
                self.i += 2
                continue
            out.append(ch)
            self.i += 1

    def dollar(self, quoted: bool) -> str | None:
        """``$(...)``, ``$((...))``, ``${...}``, ``$name``, ``$'...'`` or a lone ``$``."""
        nxt = self.s[self.i + 1:self.i + 2]
        if nxt == "'" and not quoted:
            return self.ansi_c()
        if self.s.startswith("$((", self.i):
            self.i += 1
            self.skip_balanced("(", ")")
            return None
        if nxt == "(":
            self.i += 1
            return self.substitution()
        if nxt == "{":
            self.i += 1
            self.skip_balanced("{", "}")
            return None
        if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            self.i += 2
            return None
        if nxt and (nxt.isalpha() or nxt == "_"):
            self.i += 1
            while self.i < len(self.s) and (self.s[self.i].isalnum() or self.s[self.i] == "_"):
                self.i += 1
            return None
        self.i += 1
        return "$"

    def skip_balanced(self, opener: str, closer: str) -> None:
        """Skip from an opener to its matching closer (quotes respected)."""
        depth = 0
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "'":
                self.single_quoted()
                continue
            if ch == '"':
                self.double_quoted()
                continue
            self.i += 1
            if ch == opener:
                depth += 1
            elif ch == closer:
                depth -= 1
                if depth == 0:
                    return
        raise self.error(f"missing {closer!r}")

    def substitution(self) -> str | None:
        """``(...)`` of a command substitution: its commands are recorded; its value when static."""
        self.i += 1
        first = len(self.commands)
        self.parse_list(")", None)
        self.i += 1
        return _static_output(self.commands[first:])

    def backtick(self) -> str | None:
        """```...```: an old-style command substitution."""
        end = self.i + 1
        while end < len(self.s) and self.s[end] != "`":
            end += 2 if self.s[end] == "\\" else 1
        if end >= len(self.s):
            raise self.error("unterminated backquote")
        inner = self.s[self.i + 1:end].replace("\\`", "`").replace("\\\\", "\\").replace("\\$", "$")
        self.i = end + 1
        sub = parse_commands(inner)
        self.commands.extend(sub)
        return _static_output(sub)


def _is_assignment(word: Word) -> bool:
    name, eq, _ = word.raw.partition("=")
    return bool(eq) and name.replace("_", "a").isalnum() and not name[0].isdigit()


def _cd_target(cmd: Command, cwd: str | None) -> str | None:
    """The working directory after ``cmd`` (only ``cd <static dir>`` changes it)."""
    if cmd.name != "cd" or len(cmd.words) != 2 or cmd.words[1].value is None:
        return cwd
    target = cmd.words[1].value
    return target if cwd is None or target.startswith("/") else posixpath.join(cwd, target)


def _static_output(commands: list[Command]) -> str | None:
    """The output of a substitution when it is known without running it (trailing newlines dropped)."""
    if len(commands) != 1:
        return None
    cmd = commands[0]
    argv = cmd.argv()
    if cmd.name == "cat" and len(argv) == 1 and cmd.stdin_known:
        return (cmd.stdin or "").rstrip("\n")
    if cmd.name == "echo" and None not in argv:
        args = [a for a in argv[1:] if a is not None]
        newline = not (args and args[0] == "-n")
        args = args[1:] if not newline else args
        return " ".join(args)
    return None


def parse_commands(text: str) -> list[Command]:
    """Every simple command ``text`` would run, in order (nested substitutions before their command).

    A command on the right of a pipe whose left side has a static output (``echo``, ``cat`` of a
    here-document) gets that output as its stdin.
    """
    parser = _Parser(text)
    parser.parse_list(None, None)
    if parser.pending:
        raise ShellSyntaxError(f"here-document delimited by {parser.pending[0].delimiter!r} has no body")
    for cmd in parser.commands:
        if cmd.piped_from is not None and not cmd.stdin_known:
            out = _static_output([cmd.piped_from])
            cmd.stdin, cmd.stdin_known = (None, False) if out is None else (out + "\n", True)
    return parser.commands
