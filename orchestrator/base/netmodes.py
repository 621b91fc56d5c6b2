"""The names of the network modes a box may have (docs/security.md says what each allows).

Apart from ``netpolicy`` (the entries and the judging, with their dataclasses and patterns)
so that ``config``, which every command imports to read config.yaml, checks a mode's name
without loading the policy; it loads ``netpolicy`` only to check an allow list's entries.
"""

from __future__ import annotations

MODES = ("allow", "none", "open")
#: Before the proxy, ``host`` was the default mode; it is what ``open`` is now.
OLD_NAMES = {"host": "open"}


def canonical_mode(mode: str) -> str:
    return OLD_NAMES.get(mode, mode)
