"""Keep secrets out of notes, logs and task files.

The values of environment variables whose names look secret, and anything shaped like an
Anthropic key, are replaced by ``[REDACTED:<name>]`` before octopoid writes agent output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

SECRET_NAME_RE = re.compile(r".*(_API_KEY|_TOKEN)$|.*(SECRET|PASSWORD).*", re.IGNORECASE)
KEY_SHAPES = (re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),)
MIN_SECRET_LEN = 6  # shorter values ("1", "true") would redact ordinary words


class Redactor:
    """A compiled redaction for one environment; build once, apply to every chunk."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        secrets = {
            value: name
            for name, value in env.items()
            if SECRET_NAME_RE.fullmatch(name) and len(value) >= MIN_SECRET_LEN
        }
        self._names = secrets
        alternatives = [re.escape(v) for v in sorted(secrets, key=len, reverse=True)]
        alternatives += [shape.pattern for shape in KEY_SHAPES]
        self._pattern = re.compile("|".join(alternatives))

    def __call__(self, text: str) -> str:
        return self._pattern.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        return f"[REDACTED:{self._names.get(match.group(0), 'api-key')}]"


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with secret values from ``environ`` (default: this process's) replaced."""
    return Redactor(environ)(text)
