# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The one place where hp-agent reads its settings (code host, Jenkins, protected branches, time scale).

Precedence, lowest first:

1. built-in defaults (the real GitCode API v5 and the MindSpore Jenkins of the original project);
2. the user file ``$XDG_CONFIG_HOME/hp-agent/config.toml`` (``~/.config/hp-agent/config.toml``);
3. the repository file ``.hp-agent.toml`` at the repository root;
4. a ``[repos."owner/name"]`` table in either file, for the repository being worked on;
5. environment variables ``HP_AGENT_CODEHOST_API``, ``HP_AGENT_CODEHOST_TOKEN``, ``HP_AGENT_PROVIDER``,
   ``HP_AGENT_JENKINS_URL``, ``HP_AGENT_JENKINS_JOB``, ``HP_AGENT_TIME_SCALE``.

The token, when none is configured, comes from ``git credential fill`` for the API host.  Every token
that is loaded is registered with :mod:`hp_agent.redact` so it is never printed.

File format::

    [codehost]
    provider = "gitcode"              # gitcode | gitee | github
    api = "https://api.gitcode.com/api/v5"
    repo = "mindspore/hyper-parallel" # upstream owner/name
    token = "…"                       # better: env or git credential helper
    [jenkins]
    url = "https://build.mindspore.cn"
    job = "hyper-parallel"
    user = ""                         # optional, with api_token
    api_token = ""
    [git]
    fork_remote = "origin"
    upstream_remote = "upstream"
    base = ""                         # empty: the upstream remote's HEAD branch (main, master, ...)
    protected_branches = ["main", "master", "release/*"]
    [gate_doctor]
    time_scale = 1.0
    bypass_max_seconds = 60
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from hp_agent.redact import register_secret

DEFAULT_API = {
    "gitcode": "https://api.gitcode.com/api/v5",
    "gitee": "https://gitee.com/api/v5",
    "github": "https://api.github.com",
}
PROVIDERS = tuple(DEFAULT_API)
DEFAULT_PROTECTED = ("main", "master", "release/*")
REPO_FILE = ".hp-agent.toml"


class ConfigError(ValueError):
    """A configuration file or variable holds a value hp-agent cannot use."""


@dataclasses.dataclass
class Config:
    """Resolved settings; build it with :func:`load_config`."""

    provider: str = "gitcode"
    codehost_api: str = DEFAULT_API["gitcode"]
    codehost_repo: str = "mindspore/hyper-parallel"
    codehost_token: str | None = None
    jenkins_url: str = "https://build.mindspore.cn"
    jenkins_job: str = "hyper-parallel"
    jenkins_user: str | None = None
    jenkins_api_token: str | None = None
    fork_remote: str = "origin"
    upstream_remote: str = "upstream"
    base_branch: str = ""  # empty: the upstream remote's default branch (see autogit.flows.base_branch)
    protected_branches: tuple[str, ...] = DEFAULT_PROTECTED
    time_scale: float = 1.0
    bypass_max_seconds: float = 60.0
    sources: list[str] = dataclasses.field(default_factory=list)
    _token_resolved: bool = dataclasses.field(default=False, repr=False)

    def is_protected(self, branch: str) -> bool:
        """True when ``branch`` (short name or ``refs/heads/…``) matches a protected pattern."""
        short = branch.removeprefix("refs/heads/")
        return any(fnmatch.fnmatchcase(short, pat) for pat in self.protected_branches)

    def token(self, cwd: Path | None = None) -> str | None:
        """The code-host token: configured value, else ``git credential fill`` for the API host."""
        if self.codehost_token is None and not self._token_resolved:
            self._token_resolved = True
            self.codehost_token = credential_fill(self.codehost_api, cwd)
        register_secret(self.codehost_token)
        return self.codehost_token

    def to_public_dict(self) -> dict[str, Any]:
        """Settings as a dict with secrets replaced by a marker (for ``--json`` and reports)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("_")}
        data["protected_branches"] = list(self.protected_branches)
        for key in ("codehost_token", "jenkins_api_token"):
            data[key] = "***" if data[key] else None
        return data


_KEYMAP = {
    ("codehost", "provider"): "provider",
    ("codehost", "api"): "codehost_api",
    ("codehost", "repo"): "codehost_repo",
    ("codehost", "token"): "codehost_token",
    ("jenkins", "url"): "jenkins_url",
    ("jenkins", "job"): "jenkins_job",
    ("jenkins", "user"): "jenkins_user",
    ("jenkins", "api_token"): "jenkins_api_token",
    ("git", "fork_remote"): "fork_remote",
    ("git", "upstream_remote"): "upstream_remote",
    ("git", "base"): "base_branch",
    ("git", "protected_branches"): "protected_branches",
    ("gate_doctor", "time_scale"): "time_scale",
    ("gate_doctor", "bypass_max_seconds"): "bypass_max_seconds",
}
_ENV = {
    "HP_AGENT_PROVIDER": "provider",
    "HP_AGENT_CODEHOST_API": "codehost_api",
    "HP_AGENT_CODEHOST_REPO": "codehost_repo",
    "HP_AGENT_CODEHOST_TOKEN": "codehost_token",
    "HP_AGENT_JENKINS_URL": "jenkins_url",
    "HP_AGENT_JENKINS_JOB": "jenkins_job",
    "HP_AGENT_TIME_SCALE": "time_scale",
}


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    """Path of the per-user config file (``$XDG_CONFIG_HOME/hp-agent/config.toml``)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".config")
    return Path(base) / "hp-agent" / "config.toml"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc


def _apply_tables(values: dict[str, Any], data: Mapping[str, Any], origin: str) -> None:
    for (table, key), attr in _KEYMAP.items():
        section = data.get(table)
        if isinstance(section, Mapping) and key in section:
            values[attr] = section[key]
    unknown = set(data) - {t for t, _ in _KEYMAP} - {"repos"}
    if unknown:
        raise ConfigError(f"{origin}: unknown table(s) {sorted(unknown)}; expected codehost, jenkins, git, "
                          f"gate_doctor, repos")


def _coerce(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    if "time_scale" in out:
        out["time_scale"] = _positive_float(out["time_scale"], "time_scale")
    if "bypass_max_seconds" in out:
        out["bypass_max_seconds"] = _positive_float(out["bypass_max_seconds"], "bypass_max_seconds")
    if "protected_branches" in out:
        pb = out["protected_branches"]
        if isinstance(pb, str):
            pb = [p.strip() for p in pb.split(",") if p.strip()]
        if not isinstance(pb, (list, tuple)) or not all(isinstance(p, str) for p in pb):
            raise ConfigError(f"protected_branches must be a list of branch patterns, got {pb!r}")
        out["protected_branches"] = tuple(pb)
    provider = out.get("provider")
    if provider is not None and provider not in PROVIDERS:
        raise ConfigError(f"provider {provider!r} is not one of {', '.join(PROVIDERS)}")
    return out


def _positive_float(value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} must be a positive number, got {value!r}") from exc
    if number <= 0:
        raise ConfigError(f"{name} must be a positive number, got {value!r}")
    return number


def load_config(repo_root: Path | None = None, env: Mapping[str, str] | None = None,
                repo_slug: str | None = None) -> Config:
    """Resolve the configuration for the repository at ``repo_root`` (see the module docstring)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: list[str] = ["defaults"]
    files = [user_config_path(env)]
    if repo_root is not None:
        files.append(Path(repo_root) / REPO_FILE)
    loaded = []
    for path in files:
        if path.is_file():
            data = _read_toml(path)
            _apply_tables(values, data, str(path))
            loaded.append((path, data))
            sources.append(str(path))
    slug = repo_slug or values.get("codehost_repo") or Config.codehost_repo
    for path, data in loaded:
        per_repo = (data.get("repos") or {}).get(slug)
        if isinstance(per_repo, Mapping):
            _apply_tables(values, per_repo, f"{path} [repos.{slug!r}]")
    if "provider" in values and "codehost_api" not in values:
        values["codehost_api"] = DEFAULT_API.get(values["provider"], Config.codehost_api)
    for var, attr in _ENV.items():
        if env.get(var):
            values[attr] = env[var]
            sources.append(f"${var}")
    cfg = Config(**_coerce(values), sources=sources)
    cfg.codehost_api = cfg.codehost_api.rstrip("/")
    cfg.jenkins_url = cfg.jenkins_url.rstrip("/")
    register_secret(cfg.codehost_token)
    register_secret(cfg.jenkins_api_token)
    return cfg


def credential_fill(api_url: str, cwd: Path | None = None) -> str | None:
    """Ask ``git credential fill`` for a password for the API host; never prompts; None when absent."""
    parsed = urlparse(api_url)
    if not parsed.hostname:
        return None
    request = f"protocol={parsed.scheme or 'https'}\nhost={parsed.netloc}\n\n"
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", SSH_ASKPASS="true")
    try:
        proc = subprocess.run(["git", "credential", "fill"], input=request, capture_output=True, text=True,
                              cwd=cwd, env=env, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        if line.startswith("password="):
            secret = line.split("=", 1)[1].strip()
            register_secret(secret)
            return secret or None
    return None
