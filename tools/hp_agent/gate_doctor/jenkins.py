# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Jenkins JSON API client: job builds (``tree=``), build detail, pipeline ``wfapi``, logs, queue items."""
from __future__ import annotations

from urllib.parse import urljoin, urlparse

import requests

from hp_agent.redact import redact, register_secret

BUILD_FIELDS = ("number,result,building,duration,estimatedDuration,timestamp,description,url,queueId,"
                "actions[parameters[name,value],causes[shortDescription,userId]]")
BUILDS_TREE = f"builds[{BUILD_FIELDS}]{{0,50}}"
QUEUE_TREE = ("items[id,why,blocked,stuck,cancelled,inQueueSince,task[name,url],"
              "actions[parameters[name,value],causes[shortDescription]]]")
TIMEOUT_S = 30


class JenkinsError(RuntimeError):
    """Jenkins answered with an error or an unexpected shape."""


class JenkinsClient:
    """Read-only client for one job (``job`` may be a folder path ``a/b``)."""

    def __init__(self, url: str, job: str, user: str | None = None, token: str | None = None,
                 session: requests.Session | None = None) -> None:
        if not job:
            raise ValueError("Jenkins job name is empty; set [jenkins] job or HP_AGENT_JENKINS_JOB")
        self.url = url.rstrip("/")
        self.job = job
        self.job_url = self.url + "".join(f"/job/{part}" for part in job.strip("/").split("/"))
        self.session = session or requests.Session()
        if user and token:
            register_secret(token)
            self.session.auth = (user, token)

    def _get(self, url: str, params: dict | None = None, allow_404: bool = False) -> requests.Response | None:
        try:
            resp = self.session.get(url, params=params, timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            raise JenkinsError(redact(f"GET {url}: {exc}")) from None
        if allow_404 and resp.status_code == 404:
            return None
        if resp.status_code >= 400:
            raise JenkinsError(redact(f"GET {url}: HTTP {resp.status_code}: {resp.text[:200]}"))
        return resp

    def _json(self, url: str, params: dict | None = None, allow_404: bool = False):
        resp = self._get(url, params, allow_404)
        if resp is None:
            return None
        try:
            return resp.json()
        except ValueError:
            raise JenkinsError(redact(f"GET {url}: response is not JSON")) from None

    def list_builds(self) -> list[dict]:
        """The job's recent builds (newest first) with parameters and causes, via one ``tree=`` query."""
        data = self._json(f"{self.job_url}/api/json", {"tree": BUILDS_TREE})
        builds = (data or {}).get("builds")
        if not isinstance(builds, list):
            raise JenkinsError(f"{self.job_url}/api/json: no 'builds' list in the answer")
        return builds

    def build(self, number: int) -> dict:
        """One build's JSON (same fields as :data:`BUILD_FIELDS`)."""
        return self._json(f"{self.job_url}/{int(number)}/api/json", {"tree": BUILD_FIELDS})

    def describe(self, number: int) -> dict | None:
        """Pipeline run description (``wfapi/describe``): stages with status; None when not a pipeline."""
        return self._json(f"{self.job_url}/{int(number)}/wfapi/describe", allow_404=True)

    def _href(self, href: str) -> str:
        parsed = urlparse(self.url)
        return urljoin(f"{parsed.scheme}://{parsed.netloc}", href)

    def stage_log(self, number: int, stage: dict) -> str | None:
        """Text of the logs of a stage's flow nodes, or None when Jenkins does not expose them."""
        href = ((stage.get("_links") or {}).get("self") or {}).get("href")
        default = f"{self.job_url}/{int(number)}/execution/node/{stage.get('id')}/wfapi/describe"
        url = self._href(href) if href else default
        node = self._json(url, allow_404=True)
        if not node:
            return None
        texts = []
        for flow in node.get("stageFlowNodes") or []:
            log_href = ((flow.get("_links") or {}).get("log") or {}).get("href")
            if not log_href:
                continue
            log = self._json(self._href(log_href), allow_404=True) or {}
            if log.get("text"):
                texts.append(log["text"])
        return "\n".join(texts) if texts else None

    def console_text(self, number: int) -> str:
        """The full console log."""
        return self._get(f"{self.job_url}/{int(number)}/consoleText").text

    def progressive_text(self, number: int, start: int = 0) -> tuple[str, int, bool]:
        """Console log from byte ``start``: ``(text, next_start, more_data)``."""
        resp = self._get(f"{self.job_url}/{int(number)}/logText/progressiveText", {"start": start})
        size = int(resp.headers.get("X-Text-Size", start + len(resp.content)))
        return resp.text, size, resp.headers.get("X-More-Data", "").lower() == "true"

    def queue_items(self) -> list[dict]:
        """Items of the global queue that belong to this job (``why``, parameters, causes)."""
        data = self._json(f"{self.url}/queue/api/json", {"tree": QUEUE_TREE}) or {}
        name = self.job.strip("/").split("/")[-1]
        return [i for i in data.get("items") or [] if (i.get("task") or {}).get("name") == name]

    def queue_item(self, item_id: int) -> dict:
        """A queue item (``why``, ``cancelled``, ``executable.number`` once it started)."""
        return self._json(f"{self.url}/queue/item/{int(item_id)}/api/json")
