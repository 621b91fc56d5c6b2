"""`octopoid intake` and `octopoid forge ...`: GitHub and GitLab by hand. Parse, call, print.

The scheduler does the same on its own every ``forge.poll_seconds`` (docs/forge.md); these
commands are for a first import, and for seeing a poll's work at once.
"""

from __future__ import annotations

import click

from ... import forge
from ...forge import Forge, issues, poller
from ...model.exceptions import ConfigError


def _connect(kind: str | None = None) -> Forge:
    cfg = forge.settings()
    if cfg is None:
        raise ConfigError(
            "no forge is configured: add a forge section to .octopoid/config.yaml (docs/forge.md)"
        )
    if kind is not None and kind != cfg["kind"]:
        raise ConfigError(f"forge.kind in .octopoid/config.yaml is {cfg['kind']}, not {kind}")
    try:
        return forge.connect(cfg)
    except ImportError as exc:
        raise ConfigError(
            f"the forge's client library is not installed ({exc.name}): "
            "pip install 'octopoid[forge]'"
        ) from None


@click.command("intake")
@click.argument("kind", type=click.Choice(["github", "gitlab"]))
@click.option("--label", required=True, help="Import the open issues with this label.")
def intake_command(kind: str, label: str) -> None:
    """Turn the open issues labelled LABEL into tasks (GH-<n> / GL-<n>), once each.

    Task-list items become acceptance criteria, a P0..P3 label the priority, and
    "blocked by #N" a blocker. Running it again imports only new issues; an issue edited
    or closed before its task started updates or cancels the task.
    """
    label = label.strip()
    if not label:
        raise click.UsageError("--label must name a label")
    done = issues.intake_issues(_connect(kind), label)
    click.echo("\n".join(done) or f"nothing new labelled {label!r}")


@click.group("forge")
def forge_group() -> None:
    """GitHub or GitLab (config.yaml's forge section): pull requests and issues."""


@forge_group.command("poll")
def forge_poll() -> None:
    """Poll the forge once, as the scheduler does: open pull requests, act on CI and
    reviews, import labelled issues, comment on issues. Prints what was done."""
    click.echo("\n".join(poller.poll_once(_connect())) or "nothing to do")
