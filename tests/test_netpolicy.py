"""What a box may reach: the entries of an allow list, read where config is read, and each
box's effective list as `octopoid doctor` shows it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator import config
from orchestrator.base import netpolicy
from orchestrator.faces import doctor
from orchestrator.model.exceptions import ConfigError

from .support import set_config


def test_entries_name_hosts_ports_subdomains_and_addresses() -> None:
    policy = netpolicy.Policy.of(
        ["PyPI.org.", "*.example.com", "api.example.net:8443", "10.0.0.5", "[::1]:8123"]
    )
    assert [str(e) for e in policy.entries] == [
        "pypi.org", "*.example.com", "api.example.net:8443", "10.0.0.5", "[::1]:8123"
    ]  # fmt: skip
    assert policy.named("pypi.org", 443) and policy.named("a.b.example.com", 80)
    assert not policy.named("example.com", 443)  # a wildcard is its subdomains only
    assert not policy.named("evil-example.com", 443) and not policy.named("api.example.net", 443)
    assert policy.named("::ffff:10.0.0.5", 22)  # an IPv4-mapped address is its IPv4
    assert [str(e) for e in policy.forwards()] == ["[::1]:8123"]
    public, private = netpolicy.address_of("93.184.216.34"), netpolicy.address_of("10.0.0.5")
    assert policy.reachable(public, 1) and policy.reachable(private, 1)
    for hidden in ("127.0.0.1", "169.254.169.254", "192.168.1.1", "100.64.0.1", "fd00::1"):
        assert not policy.reachable(netpolicy.address_of(hidden), 443), hidden


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("https://api.example.com", "not a URL"),
        ("*", "`network: open` is the way to allow everything"),
        ("api.*.com", "a wildcard stands only for subdomains"),
        ("127.0.0.1", "a loopback address needs its port"),
        ("example.com:99999", "the port must be a number"),
        ("exa mple.com", "is not a host name"),
    ],
)
def test_a_bad_entry_is_refused_where_the_config_is_read(
    project: Path, entry: str, why: str
) -> None:
    set_config(project, sandbox={"network": {"mode": "allow", "allow": [entry]}})
    with pytest.raises(ConfigError) as caught:
        config.load_config()
    assert "'sandbox.network.allow' has" in str(caught.value) and why in str(caught.value)


def agents(root: Path, *entries: dict) -> list[dict]:
    (root / ".octopoid/agents.yaml").write_text(yaml.safe_dump({"agents": list(entries)}))
    return config.load_agents()["agents"]


def test_each_box_reaches_its_backends_api_the_projects_list_and_its_own(project: Path) -> None:
    set_config(project, sandbox={"network": {"allow": ["pypi.org"]}})
    claude, command, api = agents(
        project,
        {"name": "c", "role": "implement", "backend": "claude-code",
         "sandbox": {"network": {"allow": ["github.com"]}}},
        {"name": "s", "role": "implement", "backend": "command", "argv": ["true"]},
        {"name": "a", "role": "implement", "backend": "anthropic", "model": "m",
         "sandbox": {"network": "none"}},
    )  # fmt: skip
    cfg = config.load_config()
    keyed = {"ANTHROPIC_API_KEY": "k"}
    assert netpolicy.agent_network(claude, cfg, keyed) == (
        "allow", ["api.anthropic.com:443", "pypi.org", "github.com"]
    )  # fmt: skip
    local = {**keyed, "ANTHROPIC_BASE_URL": "http://127.0.0.1:8123/v1"}
    assert netpolicy.agent_network(claude, cfg, local)[1][0] == "127.0.0.1:8123"
    login = netpolicy.agent_network(claude, cfg, {})[1]  # no key: the login is refreshed
    assert netpolicy.CLAUDE_LOGIN in login
    assert netpolicy.agent_network(command, cfg, keyed) == ("allow", ["pypi.org"])
    assert netpolicy.agent_network(api, cfg, keyed) == ("none", [])  # its API is the runner's
    assert netpolicy.checks_network(cfg) == ("none", [])  # checks run the agent's code
    set_config(project, checks={"network": {"mode": "allow", "allow": ["files.example.org"]}})
    assert netpolicy.checks_network(config.load_config()) == (
        "allow", ["pypi.org", "files.example.org"]
    )  # fmt: skip
    set_config(project, sandbox={"network": "host"}, checks={})  # before the proxy: open
    cfg = config.load_config()
    assert netpolicy.agent_network(command, cfg, {}) == ("open", [])
    assert netpolicy.checks_network(cfg) == ("open", [])  # host covered the checks too


def test_doctor_shows_every_boxs_list_as_it_would_get_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://gateway.example.org:8443")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    agents(project, {"name": "c", "role": "implement", "backend": "claude-code"},
           {"name": "s", "role": "implement", "backend": "command", "argv": ["true"]})  # fmt: skip
    assert doctor.network() == [
        "network of c (claude-code): allow: only gateway.example.org:8443",
        "network of s (command): allow, naming nothing (every destination is refused and noted)",
        "network of the checks: none",
    ]


def test_a_box_without_a_named_network_never_reads_the_api_address(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an address no URL parser takes: only a box whose list names the API needs to read it
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://[::1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    agents(project, {"name": "c", "role": "implement", "backend": "claude-code",
                     "sandbox": {"network": "none"}},
           {"name": "d", "role": "implement", "backend": "claude-code"})  # fmt: skip
    assert doctor.network()[:2] == [
        "network of c (claude-code): none",
        "network of d (claude-code): allow: only api.anthropic.com:443",  # as with no URL
    ]
