# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""One HTTP server speaking GitCode API v5 (``/api/v5``) and Jenkins JSON (``/jenkins``) for tests.

State lives in plain dicts the test edits.  Time comes from the injected clock (the same fake clock the
watcher uses), and ``schedule(at, fn)`` runs scripted events once that time is reached, so scenarios
(label lag, a build that takes 40 minutes) play out without sleeping.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlparse

JOB = "hyper-parallel-gate"


def iso(t: float) -> str:
    """Epoch seconds → ISO-8601 with offset, as GitCode returns it."""
    return _dt.datetime.fromtimestamp(t, _dt.timezone(_dt.timedelta(hours=8))).isoformat()


class Scenario:
    """Hooks a test overrides: react to posted comments (the default only records them)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    def on_comment(self, forge: "FakeForge", pr: int, body: str) -> None:
        """Called after a comment is stored."""
        del forge
        self.seen.append((pr, body))


class FakeForge:
    """The fake code host + Jenkins; ``api`` and ``jenkins`` are the base URLs to configure."""

    def __init__(self, clock, token: str | None = "s3cr3t-t0ken-value", login: str = "alice",
                 repo: str = "mindspore/hyper-parallel"):
        self.clock = clock
        self.token = token
        self.login = login
        self.repo = repo
        self.prs: dict[int, dict] = {}
        self.comments: dict[int, list[dict]] = {}
        self.files: dict[int, list[str]] = {}
        self.patches: dict[int, dict[str, str]] = {}
        self.queued: list[dict] = []
        self.builds: list[dict] = []
        self.queue: dict[int, dict] = {}
        self.requests: list[dict] = []
        self.events: list[tuple[float, Callable[[], None]]] = []
        self.scenario: Scenario = Scenario()
        self.lock = threading.RLock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------------
    def __enter__(self) -> "FakeForge":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def base(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def api(self) -> str:
        """Code-host API base URL."""
        return f"{self.base}/api/v5"

    @property
    def jenkins(self) -> str:
        """Jenkins root URL (with a context path, like real installations)."""
        return f"{self.base}/jenkins"

    # -- scripting ---------------------------------------------------------------------------------
    def schedule(self, at: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` the first time a request arrives at or after time ``at``."""
        with self.lock:
            self.events.append((at, fn))

    def _tick(self) -> None:
        with self.lock:
            due = [e for e in self.events if e[0] <= self.clock.now()]
            self.events = [e for e in self.events if e[0] > self.clock.now()]
        for _, fn in sorted(due, key=lambda e: e[0]):
            fn()

    def add_pr(self, number: int, head_sha: str, labels=(), head_repo: str = "alice/hyper-parallel",
               head_ref: str = "topic", author: str = "alice") -> dict:
        """Create a PR."""
        pr = {"number": number, "state": "open", "title": f"feat: PR {number}", "body": "desc",
              "html_url": f"{self.base}/{self.repo}/pull/{number}", "user": {"login": author},
              "head": {"ref": head_ref, "sha": head_sha, "repo": {"full_name": head_repo}},
              "base": {"ref": "master", "repo": {"full_name": self.repo}},
              "labels": [{"name": n} for n in labels], "draft": False}
        self.prs[number] = pr
        self.comments.setdefault(number, [])
        return pr

    def labels(self, pr: int) -> list[str]:
        """Current label names."""
        return [lab["name"] for lab in self.prs[pr]["labels"]]

    def set_label(self, pr: int, name: str, present: bool = True) -> None:
        """Add or remove a label."""
        labels = [lab for lab in self.prs[pr]["labels"] if lab["name"] != name]
        if present:
            labels.append({"name": name})
        self.prs[pr]["labels"] = labels

    def push(self, pr: int, sha: str, drop_check: bool = True) -> None:
        """A new push to the PR head (the bot drops pr-check-pass)."""
        self.prs[pr]["head"]["sha"] = sha
        if drop_check:
            self.set_label(pr, "pr-check-pass", False)
            self.set_label(pr, "ci-pipeline-passed", False)

    def bot_comment(self, pr: int, body: str, user: str = "mindspore-ci-bot") -> None:
        """A comment by the CI bot."""
        self.comments[pr].append({"id": len(self.comments[pr]) + 1, "body": body,
                                  "created_at": iso(self.clock.now()), "user": {"login": user}})

    def add_build(self, pr: int | None, result: str | None, duration_s: float, stages: list[dict] | None,
                  console: str = "", building: bool = False, param_name: str = "PR_NUMBER",
                  branch: str | None = None, start: float | None = None) -> dict:
        """Add a Jenkins build.  ``stages``: ``[{name, status, log}]``; None = not a pipeline."""
        number = max([b["number"] for b in self.builds], default=100) + 1
        params = [{"name": "TARGET_BRANCH", "value": branch or "master"}]
        if pr is not None:
            params.append({"name": param_name, "value": str(pr)})
        build = {"number": number, "result": None if building else result, "building": building,
                 "duration": 0 if building else int(duration_s * 1000), "estimatedDuration": 600000,
                 "timestamp": int((start if start is not None else self.clock.now()) * 1000),
                 "description": f"PR !{pr}" if pr else "master", "queueId": 500 + number,
                 "url": f"{self.jenkins}/job/{JOB}/{number}/",
                 "actions": [{"_class": "hudson.model.ParametersAction", "parameters": params},
                             {"_class": "hudson.model.CauseAction",
                              "causes": [{"shortDescription": f"Triggered by comment on PR !{pr}"}]}, {}],
                 "_stages": stages, "_console": console, "_final": result}
        self.builds.append(build)
        self.queue[500 + number] = {"id": 500 + number, "why": None, "cancelled": False,
                                    "executable": {"number": number, "url": build["url"]}}
        return build

    def enqueue(self, pr: int, why: str = "Waiting for next available executor") -> dict:
        """Put a build of the PR in the Jenkins queue; return the item (remove it from ``queued`` to start)."""
        item = {"id": 900 + len(self.queued), "why": why, "blocked": False, "stuck": False, "cancelled": False,
                "inQueueSince": int(self.clock.now() * 1000), "task": {"name": JOB, "url": f"{self.jenkins}/job/{JOB}/"},
                "actions": [{"parameters": [{"name": "PR_NUMBER", "value": str(pr)}]}]}
        self.queued.append(item)
        return item

    def finish_build(self, build: dict, duration_s: float) -> None:
        """Mark a running build finished with its final result."""
        build["building"] = False
        build["result"] = build["_final"]
        build["duration"] = int(duration_s * 1000)

    # -- HTTP --------------------------------------------------------------------------------------
    def _handler(self):
        forge = self

        class Handler(BaseHTTPRequestHandler):
            """Routes requests to the forge."""

            def log_message(self, *args) -> None:  # quiet
                return

            def _send(self, code: int, payload, ctype: str = "application/json", headers=None) -> None:
                data = payload if isinstance(payload, bytes) else (
                    json.dumps(payload).encode() if ctype == "application/json" else str(payload).encode())
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _dispatch(self, method: str) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null") if length else None
                forge.requests.append({"method": method, "path": url.path, "query": query,
                                       "headers": dict(self.headers), "body": body})
                forge._tick()
                with forge.lock:
                    code, payload, ctype, headers = forge.route(method, url.path, query, dict(self.headers), body)
                self._send(code, payload, ctype, headers)

            def do_GET(self) -> None:  # noqa: N802
                self._dispatch("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._dispatch("POST")

            def do_PATCH(self) -> None:  # noqa: N802
                self._dispatch("PATCH")

        return Handler

    def _authorized(self, query: dict, headers: dict) -> bool:
        if self.token is None:
            return True
        given = {query.get("access_token"), headers.get("PRIVATE-TOKEN"),
                 (headers.get("Authorization") or "").removeprefix("Bearer ").removeprefix("token ")}
        return self.token in given

    def route(self, method: str, path: str, query: dict, headers: dict, body):
        """Answer one request: ``(status, payload, content type, extra headers)``."""
        if path.startswith("/api/v5/"):
            if not self._authorized(query, headers):
                return 401, {"message": "401 Unauthorized"}, "application/json", None
            return self._codehost(method, path[len("/api/v5"):], query, body)
        if path.startswith("/jenkins/"):
            return self._jenkins(path[len("/jenkins"):], query)
        return 404, {"message": "not found"}, "application/json", None

    def _codehost(self, method: str, path: str, query: dict, body):
        if path == "/user":
            return 200, {"login": self.login, "id": 7}, "application/json", None
        m = re.fullmatch(rf"/repos/{re.escape(self.repo)}/pulls(?:/(\d+)(/comments|/labels|/files)?)?", path)
        if not m:
            return 404, {"message": f"no route {path}"}, "application/json", None
        number, sub = (int(m.group(1)) if m.group(1) else None), m.group(2)
        if number is None:
            return self._create_pr(body) if method == "POST" else (405, {}, "application/json", None)
        if number not in self.prs:
            return 404, {"message": "Not Found Pull Request"}, "application/json", None
        return self._pr_route(method, number, sub, query, body)

    def _pr_route(self, method, number, sub, query, body):
        pr = self.prs[number]
        if sub is None and method == "PATCH":
            pr.update({k: v for k, v in (body or {}).items() if k in ("title", "body")})
            return 200, pr, "application/json", None
        if sub is None:
            return 200, pr, "application/json", None
        if sub == "/labels":
            return 200, pr["labels"], "application/json", None
        if sub == "/files":
            patches = self.patches.get(number, {})
            return 200, [{"filename": f, "patch": {"diff": patches.get(f, "")}} for f in self.files.get(number, [])], \
                "application/json", None
        if method == "POST":
            comment = {"id": len(self.comments[number]) + 1, "body": body["body"],
                       "created_at": iso(self.clock.now()), "user": {"login": self.login}}
            self.comments[number].append(comment)
            self.scenario.on_comment(self, number, body["body"])
            return 201, comment, "application/json", None
        page, per = int(query.get("page", 1)), int(query.get("per_page", 20))
        return 200, self.comments[number][(page - 1) * per: page * per], "application/json", None

    def _create_pr(self, body):
        owner, _, branch = body["head"].partition(":")
        number = max(self.prs, default=0) + 1
        pr = self.add_pr(number, "0" * 40, head_repo=f"{owner}/hyper-parallel", head_ref=branch)
        pr.update(title=body["title"], body=body["body"], draft=bool(body.get("draft")))
        pr["base"]["ref"] = body["base"]
        return 201, pr, "application/json", None

    def _build(self, number: int) -> dict | None:
        return next((b for b in self.builds if b["number"] == number), None)

    @staticmethod
    def _public(build: dict) -> dict:
        return {k: v for k, v in build.items() if not k.startswith("_")}

    def _jenkins(self, path: str, query: dict):
        if path == "/queue/api/json":
            return 200, {"items": list(self.queued)}, "application/json", None
        m = re.fullmatch(r"/queue/item/(\d+)/api/json", path)
        if m:
            item = self.queue.get(int(m.group(1)))
            return (200, item, "application/json", None) if item else (404, "", "text/plain", None)
        m = re.fullmatch(rf"/job/{JOB}(?:/(\d+))?(/.*)?", path)
        if not m:
            return 404, "no such job", "text/plain", None
        if m.group(1) is None:
            if m.group(2) == "/api/json" and "tree" in query:
                builds = sorted(self.builds, key=lambda b: -b["number"])
                return 200, {"builds": [self._public(b) for b in builds]}, "application/json", None
            return 400, "tree= required by this fake", "text/plain", None
        build = self._build(int(m.group(1)))
        if build is None:
            return 404, "no such build", "text/plain", None
        return self._build_route(build, m.group(2) or "/", query)

    def _build_route(self, build: dict, rest: str, query: dict):
        number = build["number"]
        stages = build["_stages"]
        if rest == "/api/json":
            return 200, self._public(build), "application/json", None
        if rest == "/consoleText":
            return 200, build["_console"], "text/plain", None
        if rest == "/logText/progressiveText":
            start = int(query.get("start", 0))
            data = build["_console"].encode()
            return 200, data[start:], "text/plain", {"X-Text-Size": str(len(data)),
                                                      "X-More-Data": "true" if build["building"] else "false"}
        if stages is None:
            return 404, "not a pipeline", "text/plain", None
        prefix = f"/jenkins/job/{JOB}/{number}/execution/node"
        if rest == "/wfapi/describe":
            return 200, {"id": str(number), "status": "IN_PROGRESS" if build["building"] else build["result"],
                         "durationMillis": build["duration"],
                         "stages": [{"id": str(10 + i), "name": s["name"], "status": s["status"],
                                     "durationMillis": 0 if s["status"] == "NOT_EXECUTED" else 1000,
                                     "_links": {"self": {"href": f"{prefix}/{10 + i}/wfapi/describe"}}}
                                    for i, s in enumerate(stages)]}, "application/json", None
        m = re.fullmatch(r"/execution/node/(\d+)/wfapi/(describe|log)", rest)
        if not m:
            return 404, "no route", "text/plain", None
        node = int(m.group(1))
        if m.group(2) == "describe":
            idx = node - 10
            return 200, {"id": str(node), "name": stages[idx]["name"], "status": stages[idx]["status"],
                         "stageFlowNodes": [{"id": str(100 + idx), "name": "Shell Script",
                                             "status": stages[idx]["status"],
                                             "_links": {"log": {"href": f"{prefix}/{100 + idx}/wfapi/log"}}}]}, \
                "application/json", None
        idx = node - 100
        return 200, {"nodeId": str(node), "nodeStatus": stages[idx]["status"], "length": 1, "hasMore": False,
                     "text": stages[idx].get("log", ""), "consoleUrl": "x"}, "application/json", None
