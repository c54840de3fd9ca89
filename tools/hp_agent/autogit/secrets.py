# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""What ``hp-agent git commit`` refuses to commit unless told (``--allow-secrets``): files that hold secrets.

Two checks on every file the commit adds or changes (the content that would be committed):

* the file's *name* says it holds secrets: ``.env`` and ``.env.*`` (not the ``.env.example``/``.sample``/
  ``.template`` files projects commit on purpose), private keys and keystores (``*.pem``, ``*.key``,
  ``id_rsa``/``id_ed25519``..., ``*.p12``, ``*.pfx``, ``*.jks``), ``.netrc``, ``.pypirc``, ``.npmrc``;
* its *content* holds a secret found by `detect-secrets <https://github.com/Yelp/detect-secrets>`_ (Yelp's
  scanner: private keys, cloud and code-host tokens, high-entropy strings, ``password = "..."``...) with
  its default plugins and filters. A line marked ``# pragma: allowlist secret`` is skipped, as the
  scanner documents. A hex string that a line names as a digest (``plan_sha256: 0d5f...``, ``sha1 = ...``,
  ``digest: ...``, ``commit: ...``) is a checksum, not a secret: the generated op files record their plan's
  sha256 that way.
"""
from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import tempfile

SECRET_NAMES = (".env", ".env.*", "*.pem", "*.key", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "*.p12", "*.pfx",
                "*.jks", "*.keystore", ".netrc", ".pypirc", ".npmrc", "credentials.json", "*.kdbx")
PUBLIC_SUFFIXES = (".example", ".sample", ".template", ".dist", ".pub")
#: a line naming its hex value as a digest: ``plan_sha256: 0d5f...``, ``"sha1": "..."``, ``commit = ...``
DIGEST_LINE = re.compile(r"""^\s*["']?[\w.-]*(sha(1|224|256|384|512)?|digest|checksum|commit)["']?\s*[:=]\s*"""
                         r"""["']?(?P<hex>[0-9a-fA-F]{7,128})["']?\s*,?\s*$""", re.IGNORECASE)
HEX_FINDING = "Hex High Entropy String"


def secret_name(path: str) -> bool:
    """True when the file name says it holds secrets (see the module docstring)."""
    name = posixpath.basename(path)
    if name.endswith(PUBLIC_SUFFIXES):
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_NAMES)


def scan_texts(files: dict[str, bytes]) -> list[str]:
    """``"path:line: <kind>"`` for each secret detect-secrets finds in ``files`` (path -> committed content)."""
    try:
        from detect_secrets import SecretsCollection  # pylint: disable=import-outside-toplevel
        from detect_secrets.settings import default_settings  # pylint: disable=import-outside-toplevel
    except ImportError:
        return [f"{path}: not scanned (detect-secrets is not installed: run `make install`)" for path in files]
    found: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hp-agent-secrets-") as tmp, default_settings():
        collection = SecretsCollection(root=tmp)
        names = {}
        for i, (path, data) in enumerate(sorted(files.items())):
            local = os.path.join(tmp, str(i), posixpath.basename(path))  # keeps the suffix the plugins look at
            os.makedirs(os.path.dirname(local))
            with open(local, "wb") as fh:
                fh.write(data)
            names[os.path.relpath(local, tmp)] = path
            collection.scan_file(os.path.relpath(local, tmp))
        for filename, secrets in collection.data.items():
            path = names.get(filename, filename)
            lines = files[path].decode("utf-8", errors="replace").splitlines()
            digests = _digest_values(lines)
            for secret in sorted(secrets, key=lambda s: s.line_number):
                if secret.type != HEX_FINDING or secret.secret_value not in digests:
                    found.append(f"{path}:{secret.line_number}: {secret.type}")
    return found


def _digest_values(lines: list[str]) -> set[str]:
    """The hex values of the lines that name them as digests (see :data:`DIGEST_LINE`); the scanner's line
    numbers of YAML files follow its own parse, so a finding is matched by its value."""
    return {m.group("hex") for m in map(DIGEST_LINE.match, lines) if m}


def secret_problems(files: dict[str, bytes]) -> list[str]:
    """Every reason not to commit ``files`` (path -> content): secret-looking names, then scanner findings."""
    named = [f"{path}: the name of a file that holds secrets (.env*, keys, credentials)" for path in files
             if secret_name(path)]
    texts = {p: d for p, d in files.items() if not secret_name(p) and b"\0" not in d[:8192]}
    return named + scan_texts(texts)
