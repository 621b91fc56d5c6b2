"""Runners read compiled bytecode, even where the user's environment says not to write any.

Where ``PYTHONDONTWRITEBYTECODE`` is set (to keep ``__pycache__`` out of source trees), every
runner compiled octopoid, and each module it imports that had no ``.pyc`` beside it, from
source: 1.3 to 2x the same start with bytecode, on every attempt. ``runner_env`` lets
octopoid's own processes write bytecode, but only into a cache of their own
(``PYTHONPYCACHEPREFIX``): the first runner writes it, the next ones read it, and no source
tree gets a ``__pycache__``. The cache is the user's (``$XDG_CACHE_HOME/octopoid``, keyed by
this install), outside every work tree: no merge of an agent's branch can write the code
octopoid's runners load (it once lived in ``.octopoid/runtime``, which a branch adding that
path replaced), and no box sees it (a box hides the user's home). ``user_env`` gives what a
runner starts (the agent, the checks) the user's own settings back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from .usercache import private_dir

DONT_WRITE = "PYTHONDONTWRITEBYTECODE"
PREFIX = "PYTHONPYCACHEPREFIX"
SAVED = "OCTOPOID_USER_"  # + DONT_WRITE or PREFIX: the user's value, kept for the agent
INSTALL = Path(__file__).resolve().parents[1]  # octopoid's code: the cache is this install's


def cache_dir() -> Path | None:
    """Where runners keep their bytecode: ``$XDG_CACHE_HOME/octopoid/pycache-<install>``
    (``~/.cache`` without it), a folder of the user's own; None when there is none (then
    runners compile as the user's setting says)."""
    key = hashlib.sha256(str(INSTALL).encode()).hexdigest()[:12]
    return private_dir(f"pycache-{key}")


def runner_env(env: Mapping[str, str], cache: Path | None) -> dict[str, str]:
    """``env`` for a process running octopoid's own code (a runner, the fork server).

    Unchanged unless it forbids writing bytecode (Python then writes beside the sources as
    usual) and there is a ``cache``; else bytecode is written and read in ``cache`` only,
    and the user's two settings are kept under ``OCTOPOID_USER_*`` for ``user_env``.
    """
    out = dict(env)
    if cache is None or not out.get(DONT_WRITE) or SAVED + DONT_WRITE in out:
        return out
    out[SAVED + DONT_WRITE] = out.pop(DONT_WRITE)
    if PREFIX in out:
        out[SAVED + PREFIX] = out[PREFIX]
    out[PREFIX] = str(cache)
    return out


def user_env(env: MutableMapping[str, str]) -> None:
    """Undo ``runner_env`` in ``env`` (a runner's ``os.environ``), so what the runner starts
    runs with the user's own bytecode settings; nothing to undo leaves ``env`` as it is."""
    if SAVED + DONT_WRITE not in env:
        return
    env[DONT_WRITE] = env.pop(SAVED + DONT_WRITE)
    if SAVED + PREFIX in env:
        env[PREFIX] = env.pop(SAVED + PREFIX)
    else:
        env.pop(PREFIX, None)
