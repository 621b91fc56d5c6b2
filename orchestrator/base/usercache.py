"""The user's own cache folder, and what octopoid keeps there: a YAML file's parse.

Every command that reads the queue reads ``config.yaml`` (which store?), and PyYAML's
import alone is ~14 ms of a command's ~100 (``yaml.reader`` compiles its character class
at import): a command whose YAML did not change since any command last parsed it loads the
parse from here instead, and no PyYAML. An entry is keyed by the file's path *and its whole
text*, compared in full, so an edit (even one of the same size in the same mtime tick) is
never answered from here. The folder is ``$XDG_CACHE_HOME/octopoid`` (``~/.cache`` without
it), the user's own: a link there or another user's folder is not used, as for bytecode.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import stat
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = 1  # of an entry: (FORMAT, path, text, parsed); another is a miss
SLOTS = 256  # files at most: one per path, by its hash (a test suite's temp paths too)


def private_dir(name: str) -> Path | None:
    """``$XDG_CACHE_HOME/octopoid/<name>``, made if missing; None unless it is a folder of
    this user's own (not a link): what is read from it is trusted like our own code."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "octopoid" / name
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
        return None
    return path


def parsed(path: Path, text: str, parse: Callable[[str], Any]) -> Any:
    """``parse(text)``, the file at ``path`` holding ``text``, from the cache when an entry
    has this path and this text; else parsed now and kept (when the result is plain data)."""
    folder = private_dir("parsed")
    if folder is None:
        return parse(text)
    where = str(path)
    slot = zlib.crc32(where.encode()) % SLOTS  # bounded: a clash costs a parse, no more
    entry = folder / f"{slot:02x}.marshal"
    with contextlib.suppress(OSError, ValueError, EOFError, TypeError, IndexError):
        kept = marshal.loads(entry.read_bytes())
        if kept[:3] == (FORMAT, where, text):
            return kept[3]
    data = parse(text)
    with contextlib.suppress(OSError, ValueError):
        blob = marshal.dumps((FORMAT, where, text, data))  # ValueError: not plain data
        temp = entry.with_name(f"{entry.name}.{os.getpid()}.{threading.get_ident()}")
        temp.write_bytes(blob)
        os.replace(temp, entry)  # whole or not at all; a lost cache is only a parse
    return data
