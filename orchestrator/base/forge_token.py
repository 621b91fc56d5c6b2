"""Which variables hold the forge's token, so no runner, fork server or box inherits it.

Here, below every part, because the box, the runners and the daemon all drop it, and none of
them needs the forge itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import config
from ..model.exceptions import ConfigError


def token_vars() -> tuple[str, ...]:
    """The variables that hold a forge token: the configured one, or, while config.yaml
    cannot be read, both kinds' defaults (failing closed)."""
    try:
        forge = config.load_config()["forge"]
    except ConfigError:
        return tuple(name for _, name in config.FORGE_DEFAULTS.values())
    return () if forge["kind"] == "none" else (forge["token_env"],)


def without_token(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the forge's token: what runners and the fork server inherit."""
    drop = token_vars()
    return {key: value for key, value in environ.items() if key not in drop}
