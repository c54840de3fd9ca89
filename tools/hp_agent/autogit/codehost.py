# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""REST clients for the code host: GitCode v5, Gitee v5 and GitHub, normalised to one small shape.

Normalised PR: ``{number, state, title, body, html_url, user, head_ref, head_sha, head_repo, base_ref,
base_repo, labels: [str], draft}``; normalised comment: ``{id, body, created_at, user}``.
"""
from __future__ import annotations

from typing import Any

import requests

from hp_agent.config import DEFAULT_API, Config
from hp_agent.redact import redact

TIMEOUT_S = 30
PER_PAGE = 100


class CodeHostError(RuntimeError):
    """The code host answered with an error or something that is not the documented JSON."""


def _login(user: Any) -> str | None:
    if isinstance(user, dict):
        return user.get("login") or user.get("username") or user.get("name")
    return None


def _repo_name(side: dict) -> str | None:
    repo = side.get("repo") or side.get("repository") or {}
    if isinstance(repo, dict):
        return repo.get("full_name") or repo.get("path_with_namespace")
    return None


def normalize_pr(data: dict) -> dict:
    """Map a GitCode/Gitee/GitHub PR object to the normalised PR dict."""
    if not isinstance(data, dict) or "number" not in data:
        raise CodeHostError(f"PR response is not a pull request object: {redact(str(data)[:200])}")
    head = data.get("head") or {}
    base = data.get("base") or {}
    labels = [lab.get("name") if isinstance(lab, dict) else str(lab) for lab in data.get("labels") or []]
    return {
        "number": int(data["number"]),
        "state": data.get("state"),
        "title": data.get("title") or "",
        "body": data.get("body") or "",
        "html_url": data.get("html_url") or data.get("url"),
        "user": _login(data.get("user")),
        "head_ref": head.get("ref"),
        "head_sha": head.get("sha"),
        "head_repo": _repo_name(head),
        "base_ref": base.get("ref"),
        "base_repo": _repo_name(base),
        "labels": [lab for lab in labels if lab],
        "draft": bool(data.get("draft")),
    }


def normalize_comment(data: dict) -> dict:
    """Map a comment object to ``{id, body, created_at, user}``."""
    return {"id": data.get("id"), "body": data.get("body") or "", "created_at": data.get("created_at"),
            "user": _login(data.get("user"))}


class CodeHost:
    """Client for one upstream repository on a v5-style host (GitCode, Gitee)."""

    provider = "gitcode"

    def __init__(self, api: str, repo: str, token: str | None, session: requests.Session | None = None) -> None:
        if "/" not in repo:
            raise ValueError(f"code-host repo must be 'owner/name', got {repo!r}")
        self.api = api.rstrip("/")
        self.repo = repo
        self.token = token
        self.session = session or requests.Session()

    # -- transport -------------------------------------------------------------------------------
    def _auth(self, params: dict, headers: dict) -> None:
        """GitCode v5: a bearer token header (kept out of URLs, so it never lands in access logs)."""
        del params
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"

    def request(self, method: str, path: str, params: dict | None = None, json: Any = None) -> Any:
        """Send one request; return decoded JSON; raise :class:`CodeHostError` (redacted) on failure."""
        params = dict(params or {})
        headers = {"Accept": "application/json"}
        self._auth(params, headers)
        url = f"{self.api}{path}"
        try:
            resp = self.session.request(method, url, params=params, json=json, headers=headers, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            raise CodeHostError(redact(f"{method} {url}: {exc}")) from None
        if resp.status_code >= 400:
            raise CodeHostError(redact(f"{method} {url}: HTTP {resp.status_code}: {resp.text[:300]}"))
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            raise CodeHostError(redact(f"{method} {url}: response is not JSON: {resp.text[:200]}")) from None

    def _paged(self, path: str) -> list:
        items: list = []
        page = 1
        while True:
            chunk = self.request("GET", path, params={"page": page, "per_page": PER_PAGE})
            if not isinstance(chunk, list):
                raise CodeHostError(f"GET {path}: expected a JSON list, got {type(chunk).__name__}")
            items.extend(chunk)
            if len(chunk) < PER_PAGE:
                return items
            page += 1

    # -- endpoints -------------------------------------------------------------------------------
    def _pr_path(self, number: int) -> str:
        return f"/repos/{self.repo}/pulls/{int(number)}"

    def _comments_path(self, number: int) -> str:
        return f"{self._pr_path(number)}/comments"

    def get_pr(self, number: int) -> dict:
        """PR detail, normalised."""
        return normalize_pr(self.request("GET", self._pr_path(number)))

    def list_comments(self, number: int) -> list[dict]:
        """All PR conversation comments, oldest first, normalised."""
        return [normalize_comment(c) for c in self._paged(self._comments_path(number))]

    def post_comment(self, number: int, body: str) -> dict:
        """Post a PR conversation comment; return it normalised."""
        return normalize_comment(self.request("POST", self._comments_path(number), json={"body": body}) or {})

    def create_pr(self, title: str, head: str, base: str, body: str, draft: bool = False) -> dict:
        """Open a PR from ``head`` (``owner:branch``) into ``base``; return it normalised."""
        payload = {"title": title, "head": head, "base": base, "body": body}
        if draft:
            payload["draft"] = True
        return normalize_pr(self.request("POST", f"/repos/{self.repo}/pulls", json=payload))

    def update_pr(self, number: int, title: str | None = None, body: str | None = None) -> dict:
        """Change a PR's title and/or body; return it normalised."""
        payload = {k: v for k, v in (("title", title), ("body", body)) if v is not None}
        return normalize_pr(self.request("PATCH", self._pr_path(number), json=payload))

    def list_files(self, number: int) -> list[str]:
        """Paths changed by the PR (``filename`` of each entry of ``/pulls/{n}/files``)."""
        return [f.get("filename") for f in self._paged(f"{self._pr_path(number)}/files") if f.get("filename")]

    def list_file_patches(self, number: int) -> list[tuple[str, str]]:
        """``(filename, unified diff)`` per changed file (``patch`` is a string, or ``{diff}`` on Gitee)."""
        out = []
        for entry in self._paged(f"{self._pr_path(number)}/files"):
            patch = entry.get("patch") or ""
            if isinstance(patch, dict):
                patch = patch.get("diff") or ""
            if entry.get("filename"):
                out.append((entry["filename"], str(patch)))
        return out

    def current_user(self) -> str | None:
        """Login of the token's owner (None without a token)."""
        if not self.token:
            return None
        return _login(self.request("GET", "/user"))


class GiteeHost(CodeHost):
    """Gitee v5: the token travels as the ``access_token`` parameter."""

    provider = "gitee"

    def _auth(self, params: dict, headers: dict) -> None:
        if self.token:
            params["access_token"] = self.token


class GitHubHost(CodeHost):
    """GitHub REST: conversation comments live on the issue of the same number."""

    provider = "github"

    def _auth(self, params: dict, headers: dict) -> None:
        del params
        headers["Accept"] = "application/vnd.github+json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"

    def _comments_path(self, number: int) -> str:
        return f"/repos/{self.repo}/issues/{int(number)}/comments"


_CLASSES = {"gitcode": CodeHost, "gitee": GiteeHost, "github": GitHubHost}


def make_codehost(cfg: Config, provider: str | None = None, token: str | None = None) -> CodeHost:
    """Build the client for ``provider`` (default: the configured one) from the configuration."""
    name = provider or cfg.provider
    if name not in _CLASSES:
        raise ValueError(f"provider {name!r} is not one of {', '.join(_CLASSES)}")
    api = cfg.codehost_api
    if name != cfg.provider and api == DEFAULT_API.get(cfg.provider):
        api = DEFAULT_API[name]
    return _CLASSES[name](api, cfg.codehost_repo, token if token is not None else cfg.token())
