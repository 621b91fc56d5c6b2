"""The forge's side of the scheduler: a thread that polls every ``forge.poll_seconds``.

A thread, so a slow or unreachable forge never holds up a claim. A poll that cannot reach
the forge (5xx, rate limited, refused connection) loses nothing: every verdict is still on
the forge, and the next poll takes it. Polls back off while the forge is down, doubling up
to ``MAX_BACKOFF_SECONDS`` or waiting as long as a rate limit asked.
"""

from __future__ import annotations

import logging
import threading

from ..model.exceptions import ForgeError, ForgeUnavailable, OctopoidError
from . import Forge, connect, issues, pulls, settings

log = logging.getLogger("octopoid.forge")
MAX_BACKOFF_SECONDS = 900.0
DEFAULT_POLL_SECONDS = 60


def poll_once(forge: Forge) -> list[str]:
    """One poll: import issues (``forge.intake_label``), act on pull requests, tell issues.
    An intake the forge refuses (or answers oddly) is said and the poll goes on: pull
    requests' verdicts never wait on it. A forge that cannot answer ends the poll."""
    cfg = settings() or {}
    done = []
    if cfg.get("intake_label"):
        try:
            done += issues.intake_issues(forge, cfg["intake_label"])
        except ForgeUnavailable:
            raise
        except (ForgeError, ValueError, TypeError, KeyError) as exc:
            log.error("forge: the issue intake failed: %s", exc)
            done.append(f"intake failed: {exc}")
    done += pulls.poll(forge)
    done += issues.tell_issues(forge)
    return done


def next_wait(interval: float, failures: int, asked: float | None) -> float:
    """Seconds until the next poll after ``failures`` failed ones in a row."""
    if failures == 0:
        return interval
    return max(asked or 0.0, min(MAX_BACKOFF_SECONDS, interval * 2 ** min(failures, 16)))


class ForgePoller(threading.Thread):
    """Polls until ``stop`` is set. ``polls`` and ``failures`` are for tests and logs."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__(name="octopoid-forge", daemon=True)
        self.stop = stop
        self.polls = 0
        self.failures = 0

    def run(self) -> None:
        forge: Forge | None = None
        while not self.stop.is_set():
            asked, interval = None, DEFAULT_POLL_SECONDS
            try:
                cfg = settings()
                if cfg is None:  # the forge was taken out of config.yaml
                    return
                interval = cfg["poll_seconds"]
                forge = forge or connect(cfg)
                for line in poll_once(forge):
                    log.info("forge: %s", line)
                self.failures = 0
            except ForgeUnavailable as exc:
                self.failures += 1
                asked = exc.retry_after
                log.warning("forge: %s (try %d)", exc, self.failures)
            except ImportError as exc:  # said once: polling cannot work until it is installed
                log.error("forge: %s is not installed: pip install 'octopoid[forge]'", exc.name)
                return
            except OctopoidError as exc:  # a bad token, a broken config.yaml: said, tried again
                self.failures += 1
                log.error("forge: %s", exc)
            except Exception:  # a bug must not end the polls: the next may go through
                self.failures += 1
                log.exception("forge: the poll failed")
            self.polls += 1
            self.stop.wait(next_wait(interval, self.failures, asked))
