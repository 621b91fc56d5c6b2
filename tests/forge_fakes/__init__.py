"""Local, stateful GitHub and GitLab REST servers for the forge tests (issue 26).

Real HTTP servers on 127.0.0.1 that githubkit and python-gitlab talk to over sockets, backed
by a bare git repository the code under test pushes to. See base.py for what both share.
"""

from .base import LineNote, Logged
from .github import GitHubFake
from .gitlab import GitLabFake

__all__ = ["GitHubFake", "GitLabFake", "LineNote", "Logged"]
