# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""The plan file ``plans/<op>.md``: a YAML front-matter block (machine-readable) and a Markdown body.

Lifecycle: ``draft`` (written by ``analyze``) -> ``confirmed`` (``confirm`` records who, when and the
sha256 of the plan's content) -> ``stale`` when the content no longer matches the recorded hash (edited
after confirmation). Anything undecided is written ``[TBD] <question>``; ``confirm`` refuses while one
remains anywhere in the file.
"""
from __future__ import annotations

import datetime
import hashlib
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml


#: libyaml's safe loader when PyYAML was built with it (about 10x faster on the large plan front matters), else
#: the pure-Python one; both build the same objects
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # pylint: disable=invalid-name
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # pylint: disable=invalid-name


def safe_dump(data: Any, **options: Any) -> str:
    """``yaml.safe_dump`` through libyaml when PyYAML has it (the same text, ~2x faster: the plans gate hashes and
    renders every plan)."""
    return yaml.dump(data, Dumper=SAFE_DUMPER, **options)
__all__ = ["Plan", "PlanError", "TBD", "load_plan", "find_tbd", "content_hash", "slug_of", "confirm_plan",
           "plan_state", "git_identity"]

TBD = "[TBD]"
_FENCE = "---"
_VOLATILE = ("status", "confirmation", "returned")
STATES = ("draft", "confirmed", "stale")


class _Dumper(yaml.SafeDumper):  # pylint: disable=too-many-ancestors
    """Short lists of scalars in flow style (``[3, 4, 6]``), everything else block style, no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        """Never write ``&id``/``*id`` aliases: a plan is read by people."""
        return True


def _represent_list(dumper, data):
    flow = len(data) <= 8 and all(isinstance(v, (int, float, str, bool, type(None))) and len(str(v)) < 40
                                  for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_dict(dumper, data):
    flow = len(data) <= 4 and all(isinstance(v, (int, float, str, bool, type(None))) and len(str(v)) < 30
                                  for v in data.values())
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=flow and bool(data) or None)


_Dumper.add_representer(list, _represent_list)
_Dumper.add_representer(dict, _represent_dict)


def dump_yaml(data: Any) -> str:
    """YAML text of ``data`` in the plan's style (key order kept)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=110)


class PlanError(ValueError):
    """A plan that cannot be read or used; the message names the file and the problem."""


def slug_of(op: str) -> str:
    """File stem for an op name: ``torch.nn.functional.glu`` -> ``torch.nn.functional.glu``
    (dots kept, anything else outside ``[A-Za-z0-9_.]`` replaced by ``_``)."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", op)


@dataclass
class Plan:
    """A parsed plan: front matter (``meta``) and Markdown ``body``."""

    meta: Dict[str, Any]
    body: str
    path: Optional[Path] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, path: Optional[Path] = None) -> "Plan":
        """Split ``---``-fenced YAML front matter from the body; clear errors naming ``path``."""
        where = str(path) if path else "<plan>"
        if not text.startswith(_FENCE + "\n"):
            raise PlanError(f"{where}: a plan starts with a '---' line and a YAML front-matter block")
        end = text.find("\n" + _FENCE + "\n", len(_FENCE))
        if end < 0:
            raise PlanError(f"{where}: the front-matter block is not closed by a '---' line")
        try:
            meta = yaml.load(text[len(_FENCE) + 1:end], Loader=SAFE_LOADER) or {}
        except yaml.YAMLError as exc:
            raise PlanError(f"{where}: front matter is not valid YAML: {exc}") from exc
        if not isinstance(meta, dict):
            raise PlanError(f"{where}: front matter must be a mapping, got {type(meta).__name__}")
        for key in ("op", "status", "path"):
            if key not in meta:
                raise PlanError(f"{where}: front matter lacks {key!r}")
        return cls(meta, text[end + len(_FENCE) + 2:], path)

    def render(self) -> str:
        """The plan file's text (stable key order as written)."""
        front = dump_yaml(self.meta)
        return f"{_FENCE}\n{front}{_FENCE}\n{self.body}"

    def save(self, path: Optional[Path] = None) -> Path:
        """Write the plan to ``path`` (default: where it was read)."""
        target = Path(path or self.path or "")
        if not str(target):
            raise PlanError("plan has no path to save to")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.render(), encoding="utf-8")
        self.path = target
        return target

    @property
    def op(self) -> str:
        """The primary op name."""
        return str(self.meta["op"])


def load_plan(path: Path) -> Plan:
    """Read and parse ``path``."""
    path = Path(path)
    if not path.is_file():
        raise PlanError(f"{path}: no such plan file")
    return Plan.parse(path.read_text(encoding="utf-8"), path)


def find_tbd(plan: Plan) -> List[str]:
    """Every ``[TBD]`` line of the plan (front matter and body), stripped."""
    return [line.strip() for line in plan.render().splitlines() if TBD in line]


def content_hash(plan: Plan) -> str:
    """sha256 of the plan's content: the front matter without status/confirmation, plus the body."""
    meta = {k: v for k, v in plan.meta.items() if k not in _VOLATILE}
    text = safe_dump(meta, sort_keys=True, allow_unicode=True) + "\n" + plan.body
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_state(plan: Plan) -> str:
    """``draft``, ``confirmed`` or ``stale`` (confirmed, but the content hash changed)."""
    status = plan.meta.get("status")
    conf = plan.meta.get("confirmation") or {}
    if status != "confirmed":
        return "draft"
    if conf.get("sha256") != content_hash(plan):
        return "stale"
    return "confirmed"


def git_identity(root: Path) -> str:
    """``Name <email>`` of the git user in ``root``; a clear error when none is configured."""
    parts = []
    for key in ("user.name", "user.email"):
        out = subprocess.run(["git", "config", key], cwd=root, capture_output=True, text=True, check=False)
        parts.append(out.stdout.strip())
    if not parts[0]:
        raise PlanError("git user.name is not set: confirmation records who confirmed; run git config user.name")
    return f"{parts[0]} <{parts[1]}>" if parts[1] else parts[0]


def confirm_plan(plan: Plan, who: str, now: Optional[datetime.datetime] = None) -> Dict[str, Any]:
    """Mark ``plan`` confirmed by ``who`` (refused while ``[TBD]`` remain); returns the record."""
    open_items = find_tbd(plan)
    if open_items:
        raise PlanError(f"{plan.path or plan.op}: {len(open_items)} [TBD] item(s) remain; decide them first:\n  "
                        + "\n  ".join(open_items))
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = {"by": who, "at": stamp, "sha256": content_hash(plan)}
    plan.meta["status"] = "confirmed"
    plan.meta["confirmation"] = record
    return record


def return_to_draft(plan: Plan, reason: str, now: Optional[datetime.datetime] = None) -> Dict[str, Any]:
    """Withdraw the confirmation of a plan whose design did not hold (``dev`` failed): status ``draft``, and
    ``returned`` records when, why and the confirmation it replaces, so the reviewer sees what to decide."""
    stamp = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = {"at": stamp, "reason": reason}
    if plan.meta.get("confirmation"):
        record["confirmation"] = plan.meta["confirmation"]
    plan.meta["status"] = "draft"
    plan.meta.pop("confirmation", None)
    plan.meta["returned"] = record
    return record


def set_field(plan: Plan, assignment: str) -> tuple:
    """Apply ``a.b.c=value`` to the front matter; returns ``(key, value)``.

    The value is stored as the string given unless the field's current value (the plan template's schema)
    says otherwise: a bool field takes ``true``/``false`` (``yes``/``no``...), a number field a number, a list
    or mapping field a YAML list or mapping; anything else is refused with the type expected. So
    ``reason=a: b`` stores the text ``a: b``, never a mapping.
    """
    if "=" not in assignment:
        raise PlanError(f"{assignment!r}: expected KEY=VALUE (e.g. frontends.mindspore.in_scope=false)")
    key, raw = assignment.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts or parts[0] in _VOLATILE:
        raise PlanError(f"{key!r}: not a settable field (status and confirmation belong to confirm)")
    node = plan.meta
    for p in parts[:-1]:
        if not isinstance(node, dict) or p not in node:
            raise PlanError(f"{key!r}: no field {p!r} in the plan's front matter")
        node = node[p]
    if not isinstance(node, dict) or parts[-1] not in node:
        raise PlanError(f"{key!r}: no field {parts[-1]!r} in the plan's front matter")
    value = _typed(".".join(parts), raw, node[parts[-1]])
    node[parts[-1]] = value
    return ".".join(parts), value


# fields whose type is not a string (a [TBD] or null placeholder does not tell); others take their value's type
SCHEMA = {"frontends.mindspore.in_scope": bool, "frontends.mindspore.installed": bool, "frontends.torch": list,
          "frontends.mindspore.names": list, "derivation.linear": bool, "derivation.differentiable": bool,
          "derivation.legacy_dim": bool, "derivation.tensors": int, "derivation.probed_cases": int,
          "dim_position": int, "dim_default": int, "options": dict, "cache_values": list}
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", list: "a YAML list ([a, b])",
               dict: "a YAML mapping ({k: v})"}


def field_type(key: str, current: object) -> type:
    """The type ``key`` holds: :data:`SCHEMA`, else the current value's (str for a placeholder or null)."""
    if key in SCHEMA:
        return SCHEMA[key]
    if current is None or isinstance(current, str):
        return str
    return float if isinstance(current, float) else type(current)


def _typed(key: str, raw: str, current: object) -> object:
    """``raw`` as the field's type (:func:`field_type`): the text itself for a string field."""
    expected = field_type(key, current)
    if expected is str:
        return raw.strip()
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise PlanError(f"{key}: value {raw!r} is not valid YAML: {exc}") from exc
    if value is None and key in SCHEMA and expected in (int, list, dict):
        return None  # unset
    ok = isinstance(value, bool) if expected is bool else (
        isinstance(value, (int, float)) and not isinstance(value, bool) if expected is float else
        isinstance(value, expected) and not (expected is int and isinstance(value, bool)))
    if not ok:
        raise PlanError(f"{key}: expected {_TYPE_NAMES.get(expected, expected.__name__)}, got {raw!r}")
    return value
