"""What a box may reach on the network: its mode, its list of named destinations, and the
judgement of one destination by its name and by the address it resolves to.

Pure and standard-library only, below ``config`` (which checks the entries of config.yaml
and agents.yaml with it), the runner's proxy (which judges with it) and the faces (which
describe with it). docs/security.md says what each mode (``allow``, ``none``, ``open``)
allows.
"""

from __future__ import annotations

import ipaddress
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from .netmodes import MODES, OLD_NAMES, agent_mode, canonical_mode, checks_mode  # noqa: F401
from .patterns import LazyPattern
from .text import ascii_int

#: Where the claude CLI's API is unless its env names another (``ANTHROPIC_BASE_URL``).
ANTHROPIC_API = "api.anthropic.com:443"
#: Where the claude CLI refreshes a login's token (its ``TOKEN_URL``, Claude Code 2.1):
#: needed when the box carries the login's credentials instead of an API key.
CLAUDE_LOGIN = "platform.claude.com:443"
_NAME_RE = LazyPattern(r"(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*"
                      r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")  # fmt: skip
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def address_of(text: str) -> IPAddress | None:
    """``text`` as an address (``[v6]`` too; an IPv4-mapped IPv6 address as its IPv4), or
    None when it is a name."""
    try:
        addr = ipaddress.ip_address(text.removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    mapped = getattr(addr, "ipv4_mapped", None)
    return mapped if mapped is not None else addr


def is_public(addr: IPAddress) -> bool:
    """An address on the internet: not loopback, link-local, private, shared (CGNAT),
    unspecified, reserved or multicast."""
    return addr.is_global and not addr.is_multicast


def kind_of(addr: IPAddress) -> str:
    """What sort of address a refusal names, in words."""
    if addr.is_loopback:
        return "a loopback address (this machine's own services)"
    if addr.is_link_local:
        return "a link-local address (where a cloud's metadata service hands out credentials)"
    if addr.is_unspecified:
        return "the unspecified address (this machine)"
    if addr.is_multicast:
        return "a multicast address"
    return "a private address (the network behind this machine)"


def host_name(text: str) -> str:
    """A host name as the proxy compares it (lower case, no final dot); ``ValueError`` if it
    is not one."""
    name = text.lower().removesuffix(".")
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"{text[:80]!r} is not a host name")
    return name


class Entry(NamedTuple):
    """One named destination: a host name (``*.`` for its subdomains) or an address,
    on one port or any."""

    host: str  # a name, the suffix of a wildcard, or an address's text
    port: int | None = None
    address: IPAddress | None = None
    wildcard: bool = False

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else self.host
        if isinstance(self.address, ipaddress.IPv6Address):
            host = f"[{host}]"
        return host if self.port is None else f"{host}:{self.port}"

    def names(self, host: str, port: int) -> bool:
        """Whether a request for ``host`` (normalised) on ``port`` is this destination."""
        if self.port is not None and self.port != port:
            return False
        if self.address is not None:
            return self.address == address_of(host)
        if self.wildcard:
            return host.endswith(f".{self.host}")
        return host == self.host

    @property
    def forwarded(self) -> bool:
        """A loopback address and port: the box's own loopback carries it to the host's (the
        box's loopback is otherwise its own, so a client there never asks the proxy)."""
        return self.address is not None and self.address.is_loopback and self.port is not None


def parse_entry(text: str) -> Entry:
    """One entry of ``sandbox.network.allow``; ``ValueError`` saying what is wrong."""
    raw = text.strip()
    if "://" in raw or "/" in raw:
        raise ValueError(
            f"{text!r}: name a host (api.example.com, api.example.com:8443), not a URL"
        )
    host, port = raw, None
    if (raw.startswith("[") and "]:" in raw) or raw.count(":") == 1:
        host, _, digits = raw.rpartition(":")
        port = ascii_int(digits)
        if port is None or not 0 < port < 65536:
            raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    address = address_of(host)
    if address is not None:
        if address.is_loopback and port is None:
            raise ValueError(
                f"{text!r}: a loopback address needs its port (127.0.0.1:8123): a box's "
                "loopback is its own, and only named ports are carried to this machine's"
            )
        if address.is_unspecified or address.is_multicast:
            raise ValueError(f"{text!r}: {kind_of(address)} is no destination")
        return Entry(str(address), port, address)
    wildcard = host.startswith("*.")
    if host == "*" or "*" in host.removeprefix("*."):
        raise ValueError(
            f"{text!r}: a wildcard stands only for subdomains (*.example.com); "
            "`network: open` is the way to allow everything"
        )
    try:
        return Entry(host_name(host.removeprefix("*.")), port, None, wildcard)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None


class Policy(NamedTuple):
    """The destinations one box may reach through the proxy."""

    entries: tuple[Entry, ...] = ()

    @classmethod
    def of(cls, texts: list[str]) -> Policy:
        return cls(tuple(dict.fromkeys(parse_entry(t) for t in texts)))

    def named(self, host: str, port: int) -> bool:
        return any(entry.names(host, port) for entry in self.entries)

    def reachable(self, addr: IPAddress, port: int) -> bool:
        """An address a named destination resolved to may be connected to: it is on the
        internet, or the list names it by address (a name that resolves to loopback or to
        the metadata service is not enough: DNS is the attacker's to answer)."""
        if is_public(addr):
            return True
        return any(e.address == addr and e.port in (None, port) for e in self.entries)

    def forwards(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.forwarded]


def api_entries(backend: str, env: dict[str, str]) -> list[str]:
    """What a backend's box must reach by default: the claude CLI's API (the host of
    ``ANTHROPIC_BASE_URL`` in its env, else Anthropic's) and, on a login rather than a
    key, where the login is refreshed. The ``anthropic`` backend calls its API from the
    runner, and a ``command`` agent names what it needs itself: none."""
    if backend != "claude-code":
        return []
    try:
        parts = urlsplit(env.get("ANTHROPIC_BASE_URL") or "")
    except ValueError:  # ``http://[::1``: no URL, and the CLI cannot use it either
        parts = None
    entries = [ANTHROPIC_API]
    if parts is not None and parts.hostname:
        try:
            port = parts.port or (80 if parts.scheme == "http" else 443)
        except ValueError:  # a port that is no number: the CLI cannot use it either
            port = 443
        address = address_of(parts.hostname)
        host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else parts.hostname
        entries = [f"{host}:{port}"]
    if not env.get("ANTHROPIC_API_KEY") and not env.get("ANTHROPIC_AUTH_TOKEN"):
        entries.append(CLAUDE_LOGIN)
    return [entry for entry in entries if _valid(entry)]  # a URL the CLI cannot use either


def _valid(text: str) -> bool:
    try:
        parse_entry(text)
    except ValueError:
        return False
    return True


def agent_network(
    agent: dict[str, Any], cfg: dict[str, Any], env: dict[str, str]
) -> tuple[str, list[str]]:
    """(mode, named destinations) of ``agent``'s box: its own mode or the project's; its
    backend's API, the project's ``sandbox.network.allow`` and its own. ``env`` is the
    environment its box gets (where the API's address may be named)."""
    own = (agent.get("sandbox") or {}).get("network") or {}
    mode = agent_mode(agent, cfg)  # only a named network reads the API's address
    api = api_entries(agent.get("backend", ""), env) if mode == "allow" else []
    return _named(mode, cfg, own.get("allow", []), api)


def checks_network(cfg: dict[str, Any]) -> tuple[str, list[str]]:
    """(mode, named destinations) of the checks' box: ``checks.network``, its list added to
    the project's. Checks run the agent's code, so they have no network unless they say;
    but a project that still writes ``sandbox.network: host`` (which covered the checks
    before they had a setting of their own) keeps it for them too."""
    return _named(checks_mode(cfg), cfg, cfg["checks"]["network"]["allow"])


def setup_network(cfg: dict[str, Any]) -> tuple[str, list[str]]:
    """(mode, named destinations) of the set-up's box (``workspace.network``): ``allow`` by
    default, whatever the agent's box has (a set-up installs what the agent then uses
    offline), its list added to the project's."""
    own = cfg["workspace"]["network"]
    return _named(canonical_mode(own["mode"] or "allow"), cfg, own["allow"])


def preview_network(cfg: dict[str, Any]) -> tuple[str, list[str]]:
    """(mode, named destinations) of a preview's box (``preview.network``): it serves the
    agent's code, so none unless it says."""
    own = cfg["preview"]["network"]
    return _named(canonical_mode(own["mode"] or "none"), cfg, own["allow"])


def _named(
    mode: str, cfg: dict[str, Any], own: list[str], first: list[str] | None = None
) -> tuple[str, list[str]]:
    """``mode``; with ``allow``, ``first``, the project's list and ``own``, each once."""
    if mode != "allow":
        return mode, []
    wanted = [*(first or []), *cfg["sandbox"]["network"]["allow"], *own]
    return mode, [str(entry) for entry in Policy.of(wanted).entries]


def describe(mode: str, allow: list[str]) -> str:
    """A box's network in words (after "network"), for the log's first line and the faces."""
    if mode == "open":
        return (
            "OPEN: this machine's own (its loopback services, the network behind it, a "
            "cloud's metadata service) and the whole internet"
        )
    if mode == "none":
        return "none"
    if not allow:
        return "allow, naming nothing (every destination is refused and noted)"
    return f"allow: only {', '.join(allow)}"
