"""Pytest fixtures ``github_forge`` and ``gitlab_forge``: a fake forge over a fresh bare repo.

The bare repo (``forge.remote.path``) has a ``main`` branch with one commit; push to it with
plain ``git push``. ``TOKENS`` are the known users: the bot octopoid acts as, and two people.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .base import BareRepo
from .github import GitHubFake
from .gitlab import GitLabFake

BOT, ALICE, BOB = "octopoid-bot", "alice", "bob"
TOKENS = {"tok-bot": BOT, "tok-alice": ALICE, "tok-bob": BOB}
REPO = "octo/widgets"


def make_bare_repo(path: Path) -> Path:
    """A bare repo whose ``main`` holds one commit (a README), as a new forge project has."""
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(path)], check=True)
    BareRepo(path).commit(ALICE, "main", {"README.md": "# widgets\n"}, "Initial commit", None)
    return path


@pytest.fixture(scope="session")
def one_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA file of one certificate (certifi's first). A forge test's clients are pointed
    at it (SSL_CERT_FILE, read by httpx and OpenSSL, and inherited by the daemons a test
    starts): every forge a process makes (a command, a daemon, a runner) makes a TLS
    context that reads the whole bundle of ~140 (~33 ms), tens of times a test file.
    The fakes speak plain HTTP, so no certificate is ever checked."""
    import certifi

    bundle = Path(certifi.where()).read_text()
    end = "-----END CERTIFICATE-----\n"
    first = bundle[bundle.index("-----BEGIN CERTIFICATE-----") : bundle.index(end) + len(end)]
    path = tmp_path_factory.mktemp("ca") / "one.pem"
    path.write_text(first)
    return path


@pytest.fixture
def github_forge(
    tmp_path: Path, one_ca: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GitHubFake]:
    monkeypatch.setenv("SSL_CERT_FILE", str(one_ca))
    with GitHubFake(make_bare_repo(tmp_path / "github-remote.git"), TOKENS, REPO) as forge:
        yield forge
    assert not forge.errors, "\n".join(forge.errors)


@pytest.fixture
def gitlab_forge(
    tmp_path: Path, one_ca: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GitLabFake]:
    monkeypatch.setenv("SSL_CERT_FILE", str(one_ca))
    with GitLabFake(make_bare_repo(tmp_path / "gitlab-remote.git"), TOKENS, REPO) as forge:
        yield forge
    assert not forge.errors, "\n".join(forge.errors)
