"""The board's stats page: `octopoid stats`'s figures (``stats.report``), the headline ones
as numbers and the rest as charts over the weeks, each chart linking to the board's list of
the tasks behind it (read-only)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import stats
from .charts import Series, bars, lines

WEEKS_SHOWN = 26  # half a year of bars stays readable at the chart's width
GREEN, RED, GREY = "#2d7d46", "#c0392b", "#8a93a6"
BLUE, ORANGE, PURPLE = "#1f5fbf", "#d9822b", "#7d3c98"
#: Where each chart's tasks are on the board (its groups).
DONE, WAITING = "/?group=done", "/?group=waiting"
REVIEW, ATTENTION = "/?group=review", "/?group=attention"


def page(query: Mapping[str, str]) -> dict[str, Any]:
    """What the page shows for the query's ``agent``, ``since`` and ``week``."""
    chosen = {k: (query.get(k) or "").strip() or None for k in ("agent", "since", "week")}
    data = stats.report(chosen["agent"], chosen["since"], chosen["week"])
    weeks = list(data["by_week"])[-WEEKS_SHOWN:]
    return {
        "data": data,
        "chosen": {k: v or "" for k, v in chosen.items()},
        "charts": _charts(weeks, data["by_week"], data["breaker_pauses"]),
        "retry": _retry_chart(data["project"]["retry_effect"]),
    }


def _charts(weeks: list[str], by_week: dict, pauses: list[dict]) -> list[str]:
    def per(pick: Callable[[dict], Any]) -> list[Any]:
        return [pick(by_week[w]) for w in weeks]

    tripped = [sum(1 for p in pauses if p["week"] == w) for w in weeks]
    hours = [
        Series(name, colour, [None if v is None else v / 3600 for v in values], REVIEW)
        for name, colour, values in (
            ("p50", BLUE, per(lambda f: f["times"]["review_wait"]["p50"])),
            ("p90", ORANGE, per(lambda f: f["times"]["review_wait"]["p90"])),
        )
    ]
    retry = per(lambda f: f["retry_effect"])
    return [
        bars(
            "Accepted, rejected and won't do, by week",
            weeks,
            [
                Series("accepted", GREEN, per(lambda f: f["accepted"]), DONE),
                Series("rejected", RED, per(lambda f: f["rejected"]), WAITING),
                Series("won't do", GREY, per(lambda f: f["wont_do"]), DONE),
            ],
        ),
        lines(
            "Rates by week: accepted of reviewed, and attempts accepted by what came before",
            weeks,
            [
                Series("accept rate", GREEN, per(lambda f: f["accept_rate"]), DONE),
                Series("first attempts", BLUE, [r["first"]["rate"] for r in retry], DONE),
                Series(
                    "after a failed check", ORANGE, [r["after_check"]["rate"] for r in retry], DONE
                ),
                Series(
                    "after a rejection", PURPLE, [r["after_reject"]["rate"] for r in retry], DONE
                ),
            ],
            top=1,
        ),
        lines("Time waiting in review, hours", weeks, hours, unit="h"),
        bars(
            "Stalls and the circuit breaker's pauses, by week",
            weeks,
            [
                Series("reaped", RED, per(lambda f: f["stalls"]["reaped"]), ATTENTION),
                Series("given back", GREY, per(lambda f: f["stalls"]["given_back"]), WAITING),
                Series("usage limit", ORANGE, per(lambda f: f["stalls"]["usage_limit"]), WAITING),
                Series("breaker pauses", PURPLE, tripped, ATTENTION),
            ],
        ),
    ]


def _retry_chart(effect: dict[str, dict[str, Any]]) -> str:
    """The retry effect: the share accepted of first attempts, of retries after a failed
    check (and of those that fixed what failed), of retries after a rejection."""
    kinds = ["first attempt", "after check", "after reject"]
    rates = [effect[k]["rate"] for k in ("first", "after_check", "after_reject")]
    fixed = [None, effect["after_check"]["fixed_rate"], None]
    return bars(
        "The retry effect: share accepted",
        kinds,
        [Series("accepted", GREEN, rates, DONE), Series("fixed what failed", BLUE, fixed, DONE)],
    )
