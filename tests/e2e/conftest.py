"""Whole-daemon runs: the review page here is `octopoid web` as a process of its own (its
memory is measured; a daemon and the page run beside each other as they do for a user)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..web_server import start_web


@pytest.fixture
def web(agent_project: Path):
    """`octopoid web` serving ``git_project`` (with the scripted command agent)."""
    server = start_web(agent_project)
    yield server
    server.stop()
