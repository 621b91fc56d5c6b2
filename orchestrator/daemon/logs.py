"""The scheduler's log: a rotated file under logs/ (and stderr in the foreground), its
lines redacted. Only the daemon logs: `status` and the other commands that read the
scheduler's pid file (``scheduler_control``) do not import ``logging`` for it."""

from __future__ import annotations

import logging
import logging.handlers

from .. import config
from ..base.redaction import redact


class RedactingFormatter(logging.Formatter):
    """Log lines (tracebacks included) with secrets redacted, like every file octopoid writes."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def setup_logging(console: bool = False) -> None:
    """Scheduler log: rotated file under logs/, and stderr when run in the foreground."""
    logger = logging.getLogger("octopoid")
    logger.setLevel(logging.INFO)
    logs = config.get_logs_dir()
    logs.mkdir(parents=True, exist_ok=True)
    target = str(logs / "scheduler.log")
    if not any(getattr(h, "baseFilename", None) == target for h in logger.handlers):
        handler = logging.handlers.RotatingFileHandler(target, maxBytes=5 << 20, backupCount=3)
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    if console and not any(
        isinstance(h, logging.StreamHandler) and not hasattr(h, "baseFilename")
        for h in logger.handlers
    ):
        stream = logging.StreamHandler()
        stream.setFormatter(RedactingFormatter("%(asctime)s %(message)s", "%H:%M:%S"))
        logger.addHandler(stream)
