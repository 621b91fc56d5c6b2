"""The names of the network modes a box may have (docs/security.md says what each allows).

Apart from ``netpolicy`` (the entries and the judging, with their dataclasses and patterns)
so that ``config``, which every command imports to read config.yaml, checks a mode's name
without loading the policy; it loads ``netpolicy`` only to check an allow list's entries.
Whose box has which mode is here too: `status` and `agents` say whose network is open.
"""

from __future__ import annotations

from typing import Any

MODES = ("allow", "none", "open")
#: Before the proxy, ``host`` was the default mode; it is what ``open`` is now.
OLD_NAMES = {"host": "open"}


def canonical_mode(mode: str) -> str:
    return OLD_NAMES.get(mode, mode)


def agent_mode(agent: dict[str, Any], cfg: dict[str, Any]) -> str:
    """``agent``'s network mode: its own, else the project's."""
    own = (agent.get("sandbox") or {}).get("network") or {}
    return canonical_mode(own.get("mode") or cfg["sandbox"]["network"]["mode"])


def checks_mode(cfg: dict[str, Any]) -> str:
    """The checks' network mode: ``checks.network``'s, else none (``netpolicy.checks_network``
    has the rest); a project that still writes ``sandbox.network: host`` keeps it for them."""
    own, project = cfg["checks"]["network"], cfg["sandbox"]["network"]
    return canonical_mode(own["mode"] or ("host" if project["mode"] == "host" else "none"))
