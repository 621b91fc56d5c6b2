"""A task branch's diff as git prints it: whole, or streamed within a byte budget (git is
stopped once it is spent)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from ..model import defaults
from ..model.exceptions import ConfigError, GitError
from .core import HOOKS_OFF

#: How every diff octopoid reads is asked for: no program an agent could configure, no
#: colour, file names as they are (``café.py``, not git's quoted ``"caf\\303\\251.py"``),
#: and a file larger than ``DIFF_TEXT_BYTES`` counted as binary, never loaded.
DIFF_ARGS = (
    "-c",
    "core.quotePath=false",
    "-c",
    f"core.bigFileThreshold={defaults.DIFF_TEXT_BYTES}",
    "diff",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--src-prefix=a/",  # whatever diff.noprefix or diff.mnemonicPrefix say
    "--dst-prefix=b/",
)


def read_diff(
    root: Path, base: str, head: str, limit: int, leave_out: Sequence[str] = ()
) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``git diff base...head`` without the files ``leave_out``
    names, and whether there was more.

    git is stopped as soon as the budget is spent, so a 400,000-line commit costs a
    reader no more than a small one (a page never holds the whole diff)."""
    chunks: list[bytes] = []
    more = _stream_diff(root, base, head, limit, leave_out, chunks.append)
    return b"".join(chunks)[:limit], more


def copy_diff(root: Path, base: str, head: str, out: BinaryIO) -> None:
    """All of ``git diff base...head`` into ``out``, a chunk at a time (never held whole)."""
    _stream_diff(root, base, head, sys.maxsize, (), lambda chunk: (out.write(chunk), out.flush()))


def _stream_diff(
    root: Path,
    base: str,
    head: str,
    limit: int,
    leave_out: Sequence[str],
    sink: Callable[[bytes], object],
) -> bool:
    """Give ``sink`` git's diff as it comes, until ``limit`` bytes are past (then git is
    killed); whether there was more."""
    skip = [f":(exclude,literal){path}" for path in leave_out]
    argv = ["git", "-C", str(root), *DIFF_ARGS, f"{base}...{head}", "--", *skip]
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **HOOKS_OFF},
        )
    except FileNotFoundError:
        raise ConfigError("git is not installed (or not on PATH); octopoid needs it") from None
    size, read = 0, False
    try:
        while size <= limit and (chunk := proc.stdout.read1(1 << 16)):  # type: ignore[union-attr]
            sink(chunk)
            size += len(chunk)
        read = True
    finally:
        more = size > limit
        if more or not read:
            proc.kill()  # spent, or the reader went away (a closed pipe)
        _, err = proc.communicate()
    if proc.returncode != 0 and not more:
        why = err.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git diff {base}...{head}: {why[0] if why else proc.returncode}")
    return more
