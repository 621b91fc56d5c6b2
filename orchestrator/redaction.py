"""Keep secrets out of notes, logs and task files.

The values of environment variables whose names look secret, and anything shaped like an
Anthropic key, are replaced by ``[REDACTED:<name>]`` before octopoid writes agent output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache

SECRET_SUFFIXES = ("_API_KEY", "_TOKEN")
SECRET_PARTS = ("SECRET", "PASSWORD")
KEY_SHAPES = (re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),)
MIN_SECRET_LEN = 6  # shorter values ("1", "true") would redact ordinary words


def secret_values(environ: Mapping[str, str]) -> dict[str, str]:
    """value -> variable name, for every variable whose name looks secret."""
    return {
        value: name
        for name, value in environ.items()
        if len(value) >= MIN_SECRET_LEN and looks_secret(name)
    }


def looks_secret(name: str) -> bool:
    """``*_API_KEY``, ``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*`` (any case)."""
    upper = name.upper()
    return upper.endswith(SECRET_SUFFIXES) or any(part in upper for part in SECRET_PARTS)


class Redactor:
    """A compiled redaction for one environment; build once, apply to every chunk."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        secrets = secret_values(os.environ if environ is None else environ)
        self._names = secrets
        alternatives = [re.escape(v) for v in sorted(secrets, key=len, reverse=True)]
        alternatives += [shape.pattern for shape in KEY_SHAPES]
        self._pattern = re.compile("|".join(alternatives))

    def __call__(self, text: str) -> str:
        return self._pattern.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        return f"[REDACTED:{self._names.get(match.group(0), 'api-key')}]"


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with secret values from ``environ`` (default: this process's) replaced.

    The compiled pattern is cached per set of secrets, so the hot paths that call this
    for every header (claims, moves) pay a dictionary scan, not a regex compile.
    """
    secrets = secret_values(os.environ if environ is None else environ)
    return _cached(frozenset(secrets.items()))(text)


@lru_cache(maxsize=16)
def _cached(secrets: frozenset[tuple[str, str]]) -> Redactor:
    return Redactor({name: value for value, name in secrets})
