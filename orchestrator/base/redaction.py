"""Keep secrets out of notes, logs and task files.

Replaced by ``[REDACTED:<kind>]``: the values of environment variables whose names look
secret (kind: the name), and text shaped like a credential (kind: the shape, such as
``github-token``), found by the regexes of Yelp's detect-secrets plugins, imported so they
stay maintained there, and by the shapes they lack (``OWN_SHAPES``).

To keep up with an agent's output (docs/performance.md), one Aho-Corasick pass looks for
*anchors*, literal pieces that every match of a regex contains, and only the regexes whose
anchors occur run. A stream first asks a compiled gate on whole shapes (shape_gate.py, where
Hyperscan or RE2 is installed) which regexes could match at all: in code, most anchors are
false ("task-" holds "sk-"). All of it works on UTF-8 bytes; ``RedactingStream`` redacts output that
arrives in pieces, and says what it holds back and what it cannot catch.

Its size: one streaming redactor; the env-value scan, the shape scan and the hold-back
across reads share one state, and split they would keep their invariants in two files.
"""

from __future__ import annotations

import base64
import importlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import cached_property, lru_cache, partial
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote

import ahocorasick_rs

from . import shape_gate
from .patterns import LazyPattern

SECRET_SUFFIXES = ("_API_KEY", "_TOKEN")
SECRET_PARTS = ("SECRET", "PASSWORD")
#: Shorter values ("1", "true", "debug") would redact ordinary words: an env value, even of
#: an agent's ``env`` (every value of which is hidden whatever its name), is hidden from 6 on
MIN_SECRET_LEN = 6

#: Bytes of an unfinished line a stream holds back: the longest single-line secret it
#: promises to recognise (JWT headers and URL credentials included) fits in it.
HOLD_BYTES = 4096
#: A private key block is held until its END line, up to this many bytes (RSA-4096: ~3.3 KiB).
PEM_HOLD_BYTES = 16384
#: A match is final once this many bytes follow it (an END line or token tail could still come).
SETTLE_BYTES = 64


class Rule(NamedTuple):
    """How a regex runs: the anchors each match contains; the group that is secret (1: it
    matches context too); and whether matches start at an anchor (most do), so it is tried
    there alone: a ``match`` per hit costs ~0.3 us where a ``finditer`` over a 64 KiB chunk
    costs 30 us with a literal start and 500 us without one."""

    anchors: tuple[bytes, ...]
    group: int = 0
    at_anchor: bool = True


AWS = (b"aws", b"AWS", b"Aws")
GITHUB = (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_")
GITLAB = (b"glpat-", b"gldt-", b"glft-", b"glsoat-", b"glrt-")

#: detect-secrets plugins used: (module, class, kind, a Rule for each regex of its
#: ``denylist``). Replaced by OWN_SHAPES: BasicAuthDetector (``url-password`` also takes
#: ``!$&*`` passwords and ``redis://:pw@``), NpmDetector (its greedy ``//.+`` hides all but
#: the last token of a line). Left out: plugins without a literal anchor (Discord, Telegram,
#: Mailchimp, Artifactory) or matching ordinary words (Keyword, high entropy, IBM, SoftLayer).
UPSTREAM: tuple[tuple[str, str, str, tuple[Rule, ...]], ...] = (
    ("aws", "AWSKeyDetector", "aws-access-key",
        (Rule((b"AKIA", b"ASIA", b"ABIA", b"ACCA", b"A3T")), Rule(AWS, 1))),
    ("github_token", "GitHubTokenDetector", "github-token", (Rule(GITHUB),)),
    ("gitlab_token", "GitLabTokenDetector", "gitlab-token", (
        Rule(GITLAB), Rule((b"GR1348941",)), Rule((b"glcbt-",)), Rule((b"glimt-",)),
        Rule((b"glptt-",)), Rule((b"glagent-",)), Rule((b"gloas-",)),
    )),
    ("slack", "SlackDetector", "slack-token",
        (Rule((b"xox", b"XOX", b"Xox")), Rule((b"https://hooks.slack.com",)))),
    ("stripe", "StripeDetector", "stripe-key", (Rule((b"sk_live_", b"rk_live_")),)),
    ("jwt", "JwtTokenDetector", "jwt", (Rule((b"eyJ",)),)),
    ("openai", "OpenAIDetector", "openai-key", (Rule((b"T3BlbkFJ",), at_anchor=False),)),
    ("sendgrid", "SendGridDetector", "sendgrid-key", (Rule((b"SG.",)),)),
    ("twilio", "TwilioKeyDetector", "twilio-key", (Rule((b"AC",)), Rule((b"SK",)))),
    ("pypi_token", "PypiTokenDetector", "pypi-token", (Rule((b"pypi-AgE",)),) * 2),
    ("square_oauth", "SquareOAuthDetector", "square-oauth", (Rule((b"sq0csp-",)),)),
    ("azure_storage_key", "AzureStorageKeyDetector", "azure-storage-key",
        (Rule((b"AccountKey=",)),)),
)  # fmt: skip

PEM_NL = rb"(?:\r?\n|(?:\\r)?\\n)"  # a newline, or an escaped one inside a JSON string
PEM_TAG = rb"[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
PEM_END = rb"[ \t]*-----END" + PEM_TAG
PEM_EOL = rb"(?=\r?\n|\\[rn]|\r?$|\\$)"  # $: the end of a window may cut a newline
PEM_LINE = (  # a header, base64 or nothing, then the end of the line
    rb"[ \t]*(?:(?:[A-Za-z][A-Za-z-]*:[^\r\n\\]*|[A-Za-z0-9+/=]+)[ \t]*)?" + PEM_EOL
)
PEM_BODY = (
    rb"(?:" + PEM_NL + rb"(?!" + PEM_END + rb")" + PEM_LINE + rb")*(?:" + PEM_NL + PEM_END + rb")?"
)

#: Shapes detect-secrets lacks: (kind, regex, Rule).
OWN_SHAPES: tuple[tuple[str, bytes, Rule], ...] = (
    ("anthropic-key", rb"sk-ant-[A-Za-z0-9_\-]{8,}", Rule((b"sk-",))),
    ("openai-key",
     rb"sk-(?<![A-Za-z0-9_\-]sk-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{32,}", Rule((b"sk-",))),
    ("github-token", rb"github_pat_[A-Za-z0-9_]{22,}", Rule((b"github_pat_",))),
    ("google-api-key", rb"AIza[0-9A-Za-z_\-]{35}", Rule((b"AIza",))),
    ("npm-token", rb"npm_[A-Za-z0-9]{36}", Rule((b"npm_",))),
    ("npm-token", rb"_authToken=[ \t]*([^\s'\"]+)", Rule((b"_authToken=",), 1)),  # .npmrc
    ("aws-secret-key",
     rb"(?i:(?:aws_?)?secret_?access_?key)['\"]?[ \t]*[:=][ \t]*['\"]?"
     rb"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
     Rule((*AWS, b"secret_access", b"SECRET_ACCESS", b"SecretAccess", b"secretAccess"), 1)),
    ("url-password", rb"://[^\s:/@]*:((?![{$<])[^\s/]+)@", Rule((b"://",), 1)),  # not {pw}
    ("bearer-token", rb"(?:Bearer|bearer|BEARER)[ \t]+([A-Za-z0-9_.~+/\-]{16,}=*)",
     Rule((b"Bearer", b"bearer", b"BEARER"), 1)),
    ("private-key", rb"-----BEGIN" + PEM_TAG + PEM_BODY, Rule((b"PRIVATE KEY",), at_anchor=False)),
    # an access key id's secret printed after it on the same line (`aws AKIA... secret ...`)
    ("aws-secret-key",
     rb"(?:AKIA|ASIA)[A-Z0-9]{16}[^\r\n]{0,80}?(?<![A-Za-z0-9/+])([A-Za-z0-9/+]{40})"
     rb"(?![A-Za-z0-9/+])", Rule((b"AKIA", b"ASIA"), 1)),
    ("aws-session-token",
     rb"(?i:aws_?session_?token)['\"]?[ \t]*[:=][ \t]*['\"]?([A-Za-z0-9/+=]{100,})",
     Rule(AWS, 1)),
    ("slack-token", rb"xapp-\d-[A-Z0-9]{9,12}-\d{10,16}-[a-f0-9]{64}", Rule((b"xapp-",))),
    ("google-oauth-secret", rb"GOCSPX-[A-Za-z0-9_\-]{28}", Rule((b"GOCSPX-",))),
    ("huggingface-token", rb"(?<![A-Za-z0-9_])hf_[A-Za-z]{34}", Rule((b"hf_",))),
    ("databricks-token", rb"(?<![A-Za-z0-9])dapi[a-f0-9]{32}(?:-\d)?", Rule((b"dapi",))),
    ("digitalocean-token", rb"do[opr]_v1_[a-f0-9]{64}",
     Rule((b"dop_v1_", b"doo_v1_", b"dor_v1_"))),
    ("shopify-token", rb"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
     Rule((b"shpat_", b"shpca_", b"shppa_", b"shpss_"))),
    ("linear-key", rb"lin_api_[A-Za-z0-9]{40}", Rule((b"lin_api_",))),
    ("stripe-webhook-secret", rb"whsec_[A-Za-z0-9+/]{32,}", Rule((b"whsec_",))),
    ("sentry-token", rb"sntry[su]_[A-Za-z0-9+/=_\-]{30,}", Rule((b"sntrys_", b"sntryu_"))),
    ("planetscale-token", rb"pscale_(?:pw|tkn|oauth)_[A-Za-z0-9_\-.]{32,}", Rule((b"pscale_",))),
    ("postman-key", rb"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", Rule((b"PMAK-",))),
    ("age-secret-key", rb"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
     Rule((b"AGE-SECRET-KEY-1",))),
    ("vault-token", rb"hv[sb]\.[A-Za-z0-9_\-]{24,}", Rule((b"hvs.", b"hvb."))),
    ("terraform-token", rb"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,}",
     Rule((b".atlasv1.",), at_anchor=False)),
    ("grafana-token", rb"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}", Rule((b"glsa_",))),
    ("docker-token", rb"dckr_pat_[A-Za-z0-9_\-]{27,}", Rule((b"dckr_pat_",))),
    ("supabase-token", rb"sbp_[a-f0-9]{40}", Rule((b"sbp_",))),
    ("atlassian-token", rb"ATATT3[A-Za-z0-9_\-=]{180,}", Rule((b"ATATT3",))),
    ("newrelic-key", rb"NRAK-[A-Z0-9]{27}", Rule((b"NRAK-",))),
    ("doppler-token", rb"dp\.(?:st|pt|ct|sa)\.[A-Za-z0-9_\-.]{40,}",
     Rule((b"dp.st.", b"dp.pt.", b"dp.ct.", b"dp.sa."))),
    ("pulumi-token", rb"pul-[a-f0-9]{40}", Rule((b"pul-",))),
    ("mapbox-token", rb"sk\.eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]{20,}", Rule((b"sk.eyJ",))),
    # by context, last: a shape above names what it also finds
    ("basic-auth",
     rb"(?i:authorization)['\"]?[ \t]*[:=][ \t]*['\"]?(?:Basic|basic|BASIC)[ \t]+"
     rb"([A-Za-z0-9+/]{8,}={0,2})", Rule((b"Basic", b"basic", b"BASIC"), 1, False)),
    ("cli-password", rb"(?:sshpass[ \t]+-p|--password[= ])[ \t]*['\"]?(?!-)([^\s'\"]{6,})",
     Rule((b"sshpass", b"--password"), 1)),
    ("cli-password",
     rb"(?:(?<=[\s;|&(])|^)mysql(?:dump|admin)?(?:[ \t][^\r\n]{0,200}?)?[ \t]-p"
     rb"([^\s'\"$-][^\s'\"]{5,})", Rule((b"mysql",), 1)),
    ("cli-password",
     rb"(?:(?<=[\s;|&(])|^)curl(?:[ \t][^\r\n]{0,200}?)?[ \t](?:-u|--user)[ \t]+['\"]?"
     rb"[^:\s'\"]{1,100}:(?![$`{<])([^\s'\"]{6,})", Rule((b"curl",), 1)),
    ("env-secret",  # NAME_PASSWORD=value in shell or a .env: from the anchor, bounded
     rb"(?:PASSWORD|SECRET|_TOKEN|_API_KEY)[A-Z0-9_]{0,40}(?<!_FILE)(?<!_PATH)(?<!_DIR)="
     rb"['\"]?(?![$`{<(]|[a-z_][\w.]*\()([^\s'\"]{8,512}+)(?=[\s'\"]|$)",
     Rule((b"PASSWORD", b"SECRET", b"_TOKEN", b"_API_KEY"), 1)),
    ("json-secret",  # a value with a digit: "token": "tokenizer_name" is a name, not one
     rb"\"(?:client_?[Ss]ecret|[Cc]lientSecret|secret|password|api_?[Kk]ey|apiKey|token|"
     rb"access_?[Tt]oken|refresh_?[Tt]oken)\"[ \t]*:[ \t]*\"(?![$<{])(?=[^\"\\\s]{0,200}\d)"
     rb"([^\"\\\s]{8,})\"",
     Rule((b'ecret"', b'assword"', b'ey"', b'oken"'), 1, False)),
)  # fmt: skip

TOKEN_TAIL = LazyPattern(rb"[A-Za-z0-9_\-+/=.]*")  # "." joins the parts of a JWT
TOKEN_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.")
#: What follows a key block cut off at a stream's hold limit, swallowed with it: the rest
#: of its line, then its base64 and header lines through END.
PEM_REST = LazyPattern(rb"(?:" + PEM_END + rb"|[^\r\n\\]*" + PEM_BODY + rb")")
PEM_CLOSED = LazyPattern(rb"-----END" + PEM_TAG + rb"$")


def looks_secret(name: str) -> bool:
    """``*_API_KEY``, ``*_TOKEN``, ``*SECRET*``, ``*PASSWORD*`` (any case)."""
    upper = name.upper()
    return upper.endswith(SECRET_SUFFIXES) or any(part in upper for part in SECRET_PARTS)


#: The password of a URL with credentials (``scheme://user:password@host``), e.g. the
#: ``OCTOPOID_DATABASE_URL`` every agent inherits: its password alone must not leak either.
URL_PASSWORD = LazyPattern(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/:@\s]*:([^@/\s]+)@")


def secret_env(
    environ: Mapping[str, str] | Iterable[tuple[str, str]], every_value: bool = False
) -> frozenset[tuple[str, str]]:
    """(name, value) of every variable whose name looks secret and value is long enough,
    and (name:password, password) of every variable holding a URL with a password, the
    password also as it reads percent-decoded. ``every_value``: an agent's ``env`` from
    agents.yaml, whose every value long enough is hidden whatever its name (docs/backends.md)."""
    found = set()
    pairs = environ.items() if isinstance(environ, Mapping) else environ
    for name, value in pairs:
        if len(value) >= MIN_SECRET_LEN and (every_value or looks_secret(name)):
            found.add((name, value))
        if (match := URL_PASSWORD.match(value)) is not None:
            forms = {f"{name}:password": match.group(1)}  # a name per form: callers key by it
            forms[f"{name}:password-decoded"] = unquote(match.group(1))
            found.update((k, v) for k, v in forms.items() if len(v) >= MIN_SECRET_LEN)
    return frozenset(found)


def secret_values(
    environ: Mapping[str, str], agent_env: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> dict[bytes, str]:
    """UTF-8 value -> variable name, of ``environ``'s secrets and every value of
    ``agent_env``; a multi-line value line by line, as streams let go of output at line ends."""
    found = secret_env(environ) | secret_env(agent_env, every_value=True)
    return {
        line.encode("utf-8", "surrogateescape"): name
        for name, value in found
        for line in value.splitlines()
        if len(line) >= MIN_SECRET_LEN
    }


def encoded_forms(value: bytes) -> set[bytes]:
    """``value`` as it reads hex-encoded (either case) or base64-encoded (standard or
    URL-safe), wherever it sits in the encoded data: for each of the three alignments,
    only the characters its own bytes decide (a neighbour's bits change the others)."""
    forms = {value.hex().encode(), value.hex().upper().encode()}
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + value)
        first, last = -(-offset * 8 // 6), (offset + len(value)) * 8 // 6
        core = encoded[first:last]
        forms |= {core, core.translate(URLSAFE)}
    return {form for form in forms if len(form) >= MIN_SECRET_LEN}


URLSAFE = bytes.maketrans(b"+/", b"-_")


#: Aho-Corasick hits: (pattern index, start, end).
Hits = list[tuple[int, int, int]]


class Span(NamedTuple):
    """A secret found: the bytes to replace, and where the match that found it starts."""

    start: int
    end: int
    kind: str
    match: int  # before ``start`` when context (``://user:``, ``Bearer``) is matched too


class Detector(NamedTuple):
    """One regex for one kind of secret, run only where one of its anchors occurs."""

    kind: str
    regex: re.Pattern[bytes]
    rule: Rule

    def spans(self, data: bytes, starts: set[int] | None = None) -> Iterator[Span]:
        """Its matches; with ``starts``, only those starting there (``rule.at_anchor``)."""
        if starts is None:
            matches: Iterable[re.Match[bytes] | None] = self.regex.finditer(data)
        else:
            matches = map(self.regex.match, repeat(data), sorted(starts))  # no Python frame
        token_end = TokenEnds(data)
        for match in filter(None, matches):
            start, end = match.span(self.rule.group)
            if start < end:
                yield Span(start, token_end(end), self.kind, match.start())


class TokenEnds:
    """Where the token ending at ``end`` really ends: upstream regexes fix lengths that
    real tokens outgrow, and the JWT regex stops before the signature. One per text: an
    end inside the run last extended shares its end, so a line of overlapping matches
    (``AKIA`` repeated) is read once, not once per match (quadratic: 0.5 s per 32 KiB)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._run = (0, -1)  # the run last extended: data[low - 1 : high] are token bytes

    def __call__(self, end: int) -> int:
        low, high = self._run
        if low <= end <= high:
            return high
        if self._data[end - 1] not in TOKEN_BYTES:
            return end
        high = TOKEN_TAIL.match(self._data, end).end()
        self._run = (end, high)
        return high


class Scanner:
    """Finds secrets in bytes: one Aho-Corasick pass picks the detectors worth running."""

    def __init__(self, detectors: Sequence[Detector]) -> None:
        self.detectors = tuple(detectors)
        owners: dict[bytes, set[int]] = {}
        for index, detector in enumerate(detectors):
            for anchor in detector.rule.anchors:
                owners.setdefault(anchor, set()).add(index)
        self.anchors = anchors = tuple(sorted(owners))
        where = [hidden_starts(anchor, owners) for anchor in anchors]
        self._targets = [set(found) for found in where]
        self._placed = [
            {i: offsets for i, offsets in found.items() if detectors[i].rule.at_anchor}
            for found in where
        ]
        self._always = {i for i, detector in enumerate(detectors) if not detector.rule.anchors}
        self._gate = leftmost_first(anchors)

    def spans(
        self, data: bytes, hits: Hits | None = None, only: set[int] | None = None
    ) -> list[Span]:
        """Every match, in detector order (which names a secret two detectors find);
        ``hits``: those of a gate on ``self.anchors``, when the caller has them already;
        ``only``: the detectors a shape gate says could match (the others cannot)."""
        run, starts = self._plan(data, hits)
        if only is not None:
            run &= only
        detectors = self.detectors
        return [span for i in sorted(run) for span in detectors[i].spans(data, starts.get(i))]

    def _plan(self, data: bytes, hits: Hits | None = None) -> tuple[set[int], dict[int, set[int]]]:
        """The detectors to run on ``data``, and where to try those run at their anchors."""
        if hits is None:
            hits = self._gate.find_matches_as_indexes(data)
        run = self._always.union(*(self._targets[a] for a in {a for a, _, _ in hits}))
        placed: dict[int, list[int]] = {}
        for anchor, start in [(a, start) for a, start, _ in hits if self._placed[a]]:
            placed.setdefault(anchor, []).append(start)
        starts: dict[int, set[int]] = {}
        for anchor, positions in placed.items():
            for index, offsets in self._placed[anchor].items():
                for offset in offsets:
                    starts.setdefault(index, set()).update(map(offset.__add__, positions))
        return run, starts


def hidden_starts(outer: bytes, owners: Mapping[bytes, set[int]]) -> dict[int, set[int]]:
    """For a hit on ``outer``: each detector it must run, and at which offsets in the hit
    that detector's anchors can start. The gate reports hits without overlap, so an anchor
    starting inside a hit (``AKIA`` on the last letter of ``ACCA``) is never reported."""
    found: dict[int, set[int]] = {}
    for inner, detectors in owners.items():
        offsets = {
            i
            for i in range(len(outer))
            if outer.startswith(inner, i) or inner.startswith(outer[i:])
        }
        for index in detectors if offsets else ():
            found.setdefault(index, set()).update(offsets)
    return found


def upstream_detectors() -> list[Detector]:
    """detect-secrets' regexes as bytes; a regex added upstream runs on every chunk until
    it is given a Rule (tests/test_redaction.py notices)."""
    found = []
    for module, name, kind, rules in UPSTREAM:
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
        for index, pattern in enumerate(plugin.denylist):
            rule = rules[index] if index < len(rules) else Rule(())
            regex = re.compile(pattern.pattern.encode("ascii"), pattern.flags & ~re.UNICODE)
            found.append(Detector(kind, regex, rule))
    return found


def own_detectors() -> list[Detector]:
    return [Detector(kind, re.compile(pattern), rule) for kind, pattern, rule in OWN_SHAPES]


#: Every shape's anchors from this module's own tables, in ``shape_scanner().anchors``' order.
ANCHORS = tuple(
    sorted({a for rule in [*(r for *_, rs in UPSTREAM for r in rs), *(r for *_, r in OWN_SHAPES)]
            for a in rule.anchors})
)  # fmt: skip


def leftmost_first(patterns: Iterable[bytes]) -> ahocorasick_rs.BytesAhoCorasick:
    """Hits without overlap, as a DFA: ~1.5x the default NFA's speed, and 2-3x that of a
    search reporting overlaps (which needs the slower standard match kind)."""
    return ahocorasick_rs.BytesAhoCorasick(
        list(patterns),
        matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST,
        implementation=ahocorasick_rs.Implementation.DFA,
    )


@lru_cache(maxsize=1)
def anchor_gate() -> ahocorasick_rs.BytesAhoCorasick:
    return leftmost_first(ANCHORS)


def shape_spans(data: bytes, engine: str | None = None) -> list[Span]:
    """Text without an anchor needs no shape scanner, so most text (a History line, a
    claim) never imports detect-secrets; text with one is scanned from the same hits.
    With ``engine``, a compiled gate on whole shapes picks the detectors first: most text
    with anchors ("task-" holds "sk-") has none left to run."""
    gate = compiled_gate(engine) if engine is not None else None
    if gate is not None:
        if not (may := gate(data)):
            return []
        return shape_scanner().spans(data, only=may)
    hits = anchor_gate().find_matches_as_indexes(data)
    return shape_scanner().spans(data, hits) if hits else []


@lru_cache(maxsize=2)
def compiled_gate(engine: str) -> shape_gate.Gate | None:
    """Built for the first stream: it needs every detector, so detect-secrets (0.15 s), and
    a compile (Hyperscan 0.07 s, RE2 0.005 s) that only a stream's megabytes repay. An
    engine installed but unable to build (Hyperscan on a CPU without SSSE3) gives way to
    the next installed one, then to the anchor path (None): output is never left raw."""
    regexes = [d.regex for d in shape_scanner().detectors]
    for name in [engine, *(e for e in shape_gate.installed() if e != engine)]:
        try:
            return shape_gate.ENGINES[name](regexes)
        except Exception as exc:  # each engine raises its own kinds
            import logging  # here: readers that never stream never pay for it

            logging.getLogger("octopoid.redaction").warning(
                "redaction: the %s gate cannot be built here (%s); trying the next", name, exc
            )
    return None


@lru_cache(maxsize=1)
def shape_scanner() -> Scanner:
    """Built on first redaction, not at import: detect-secrets takes ~0.15 s to import."""
    return Scanner(upstream_detectors() + own_detectors())


def merge(spans: list[Span]) -> list[Span]:
    """Sorted, overlaps joined; at equal starts the earlier span (env before shape) names it."""
    merged: list[Span] = []
    for span in sorted(spans, key=lambda span: span.start):
        last = merged[-1] if merged else None
        if last and span.start < last.end:
            end, match = max(last.end, span.end), min(last.match, span.match)
            merged[-1] = last._replace(end=end, match=match)
        else:
            merged.append(span)
    return merged


def apply(data: bytes, spans: Sequence[Span]) -> bytes:
    """``data`` with every span replaced by its marker."""
    parts, pos = [], 0
    for start, end, kind, _ in spans:
        parts += (data[pos:start], f"[REDACTED:{kind}]".encode())
        pos = end
    parts.append(data[pos:])
    return b"".join(parts)


class Redactor:
    """The redaction for one environment; build once, apply to every text or stream."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        agent_env: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> None:
        """Hides ``environ``'s secrets (default: this process's) and every value of
        ``agent_env`` (an agent's ``env``, or secrets already chosen) long enough."""
        self._values = secret_values(os.environ if environ is None else environ, agent_env)
        self._encoded = {
            form: f"{name}:encoded"
            for value, name in self._values.items()
            for form in encoded_forms(value)
        }
        longest = max(map(len, [*self._values, *self._encoded]), default=0)
        self.hold = max(HOLD_BYTES, longest + SETTLE_BYTES)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        data = text.encode("utf-8", "surrogatepass")
        return apply(data, self.spans(data)).decode("utf-8", "surrogatepass")

    def stream(self, engine: str | None = shape_gate.FASTEST) -> RedactingStream:
        """A fresh stream for one output (it keeps what it holds back between pushes);
        ``engine``: the regex-set engine of its shape gate (None: the anchor path alone)."""
        return RedactingStream(partial(self.spans, engine=engine), self.hold)

    def spans(self, data: bytes, engine: str | None = None) -> list[Span]:
        token_end = TokenEnds(data)
        found = [
            Span(start, token_end(end), name, start)
            for search, name in self._searches
            for _, start, end in search.find_matches_as_indexes(data)
        ]
        if self._encoded:
            names = list(self._encoded.values())
            found += [
                Span(start, token_end(end), names[i], start)
                for i, start, end in self._encoded_search.find_matches_as_indexes(data)
            ]
        return merge(found + shape_spans(data, engine))

    @cached_property
    def _encoded_search(self) -> ahocorasick_rs.BytesAhoCorasick:
        """Every encoded form (nine a value) in one pass without overlaps: a form hidden
        inside a hit is all token bytes, so the hit's ``TokenEnds`` covers it."""
        return leftmost_first(self._encoded)

    @cached_property
    def _searches(self) -> list[tuple[ahocorasick_rs.BytesAhoCorasick, str]]:
        """One search per value: alone, a literal is found at memmem speed, and no value
        can hide another."""
        return [(ahocorasick_rs.BytesAhoCorasick([v]), name) for v, name in self._values.items()]


class RedactingStream:
    """Redacts output that arrives in pieces cut anywhere, even inside a character.

    A push lets go of everything up to the last newline, or all but the last ``hold``
    bytes of a longer line, never cutting through a secret: a match that could still grow
    (fewer than SETTLE_BYTES after it) is held from its start, a private key block until
    its END line. Memory stays bounded: a match that outgrows its hold (``hold``, or
    PEM_HOLD_BYTES for a key block) is redacted as far as it goes, and the rest of its
    token, or of the key's base64 lines, is swallowed as it arrives. Not caught: a shape
    that needs more than ``hold`` bytes to be recognised (a JWT header or URL credentials
    over 4 KiB) on a line still unfinished after that many bytes.
    """

    def __init__(self, spans: Callable[[bytes], list[Span]], hold: int) -> None:
        self._spans = spans
        self._hold = hold
        self._held = b""
        self._swallow: LazyPattern[bytes] | None = None

    @property
    def held(self) -> int:
        return len(self._held)

    def push(self, data: bytes) -> bytes:
        """The redacted output that is safe to let go; the rest is held for the next push."""
        window = self._held + data
        if self._swallow:
            window = self._swallowed(window, final=False)
            if self._swallow:  # maybe still inside the secret: hold the rest until it can tell
                self._held = window
                return b""
        cut, spans = self._cut(window)
        self._held = window[cut:]
        return apply(window[:cut], spans)

    def close(self) -> bytes:
        """Everything still held, redacted."""
        window = self._swallowed(self._held, final=True) if self._swallow else self._held
        self._held = b""
        return apply(window, self._spans(window))

    def _cut(self, window: bytes) -> tuple[int, list[Span]]:
        size = len(window)
        cut = max(window.rfind(b"\n") + 1, size - self._hold)
        done: list[Span] = []
        for span in self._spans(window):
            if span.match >= cut:
                break
            if span.end + SETTLE_BYTES > size:  # it could still grow
                if size - span.match <= self._budget(span.kind):  # hold it, to match it whole
                    return self._hold_from(span.match, done)
                self._swallow = rest_of(span, window)  # past its hold: swallow what follows
                return span.end, [*done, span]
            done.append(span)
            cut = max(cut, span.end)
        return cut, done

    @staticmethod
    def _hold_from(match: int, done: list[Span]) -> tuple[int, list[Span]]:
        """Let go of what lies before ``match`` (where a secret still growing is matched from,
        its context included), and of no secret reaching into it: released without that
        context, the growing one could no longer be recognised."""
        cut = min([match, *(d.start for d in done if d.end > match)])
        return cut, [d for d in done if d.end <= cut]

    def _budget(self, kind: str) -> int:
        return PEM_HOLD_BYTES if kind == "private-key" else self._hold

    def _swallowed(self, window: bytes, final: bool) -> bytes:
        """``window`` less what continues the secret that was cut off before it."""
        match = self._swallow.match(window)
        rest = window[match.end() :]
        if final or not still_inside(self._swallow, match, rest):
            self._swallow = None
        return rest


def rest_of(span: Span, window: bytes) -> LazyPattern[bytes] | None:
    """What may still follow a secret that was cut off where ``window`` ends."""
    if span.kind == "private-key":
        closed = PEM_CLOSED.search(window, max(span.match, span.end - 100), span.end)
        return None if closed else PEM_REST
    return TOKEN_TAIL if span.end == len(window) else None


def still_inside(swallow: LazyPattern[bytes], match: re.Match[bytes], rest: bytes) -> bool:
    """Whether what follows a swallowed piece may still be the secret: nothing follows yet,
    or a key block's END line may be arriving in pieces."""
    if not rest:
        return True
    pem_open = swallow is PEM_REST and not PEM_CLOSED.search(match.group())
    return pem_open and len(rest) < SETTLE_BYTES


_ALSO_HIDDEN: dict[str, str] = {}


def hide_also(environ: Mapping[str, str]) -> None:
    """Secrets this process must hide wherever it redacts with the default environment too:
    a runner adds its agent's own ``env`` from agents.yaml, which its environment lacks."""
    _ALSO_HIDDEN.update(environ)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with secrets redacted, by value from ``environ`` (default: this process's,
    plus ``hide_also``'s) and by shape.

    The Redactor is cached per set of secrets, so the hot paths that call this for every
    header (claims, moves) pay a dictionary scan, not a compile.
    """
    if not text:
        return text
    if environ is not None:
        return _cached(secret_env(environ))(text)
    return default_redactor()(text)


#: What no field from an attempt, a check or a forge keeps: C0 controls but tab and newline
#: (NUL, BEL, ESC...), DEL, C1 (CSI...), lone surrogates, and bidi overrides and isolates
#: (text that reads differently than it is).
UNSHOWN_RE = LazyPattern("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")


#: A terminal escape sequence as a whole (CSI, OSC, a charset or other ESC sequence), so a
#: colour code leaves no ``[31m`` behind.
ESCAPE_RE = LazyPattern(
    "\x1b(?:\\[[0-?]*[ -/]*[@-~]|\\][^\x07\x1b\n]{0,256}(?:\x07|\x1b\\\\)?|[ -/]*[0-~])"
)


def scrub(text: str, multiline: bool = True, redactor: Callable[[str], str] | None = None) -> str:
    """The one redact-and-clean of a string from an attempt, a check or a forge, before it
    is stored anywhere: terminal escapes and control characters go (a multi-line field
    keeps tab and newline, CR becomes LF), then secrets are redacted (after: a secret cut
    by a BEL is whole again; ``redactor``: a stream's own, else ``redact``), then a
    one-line field's whitespace becomes single spaces. Bounding is the caller's."""
    text = ESCAPE_RE.sub("", str(text).replace("\r\n", "\n").replace("\r", "\n"))
    text = (redactor or redact)(UNSHOWN_RE.sub("", text))
    return text if multiline else " ".join(text.split())


def each_string(value: Any, fix: Callable[[str], str]) -> Any:
    """A JSON value with ``fix`` (``redact``, ``scrub``) applied to every string in it,
    however deep in lists and dicts: an answer or a draft is cleaned whole."""
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, dict):
        return {key: each_string(item, fix) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [each_string(item, fix) for item in value]
    return value


class CleaningStream:
    """``scrub``'s cleaning for output that arrives in pieces (``fsutil.TailBuffer``, before
    its redaction): escape sequences and control characters out, CR LF and CR as LF. An
    unfinished sequence at the end of a piece (ESC and what follows, a C1 or bidi
    character's first bytes, a CR) is held, at most ``ESCAPE_HOLD`` bytes, for the next."""

    ESCAPE_HOLD = 256
    ESCAPES = LazyPattern(ESCAPE_RE.pattern.encode("latin-1"))
    C0 = bytes([*range(0x09), *range(0x0B, 0x20), 0x7F])  # deleted by translate: ~900 MB/s
    #: C1 and bidi characters in UTF-8, each pattern with one literal first byte: a scan for
    #: it runs at ~1.4 GB/s, where an alternation of starts runs at 20 MB/s
    MULTIBYTE = (
        (b"\xc2", LazyPattern(rb"\xc2[\x80-\x9f]")),
        (b"\xe2", LazyPattern(rb"\xe2(?:\x80[\xaa-\xae]|\x81[\xa6-\xa9])")),
    )
    UNFINISHED = LazyPattern(
        rb"(?:\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b\n]*|[ -/]*)|\xc2|\xe2\x80?|\xe2\x81|\r)\Z"
    )

    def __init__(self) -> None:
        self._held = b""

    def push(self, data: bytes, final: bool = False) -> bytes:
        data, self._held = self._held + data, b""
        if not final and (tail := self.UNFINISHED.search(data[-self.ESCAPE_HOLD :])):
            cut = len(data) - len(tail.group())
            data, self._held = data[:cut], data[cut:]
        if b"\x1b" in data:  # each pass only where it has work: a memchr is ~20 GB/s
            data = self.ESCAPES.sub(b"", data)
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        data = data.translate(None, self.C0)
        for start, pattern in self.MULTIBYTE:
            if start in data:
                data = pattern.sub(b"", data)
        return data

    def close(self) -> bytes:
        return self.push(b"", final=True)


def default_redactor() -> Redactor:
    """The one set of secrets every reader and writer of agent text hides: this process's
    environment, ``hide_also``'s, and every agent's ``env`` in agents.yaml, so a page,
    an accept or a memory promotion hides what only an agent's process had."""
    also = every_agent_env()
    # CPython's raw copy of the environment: hashing it is ~20x cheaper than decoding and
    # testing every variable again, which claims and moves would do for each History line.
    raw = getattr(os.environ, "_data", None)
    return _cached(_own_secrets(None if raw is None else frozenset(raw.items()), also))


def every_agent_env() -> frozenset[tuple[str, str]]:
    """(name, value) of every agent's ``env`` this process knows: ``hide_also``'s and
    agents.yaml's, and what the files ``workspace.copy`` brings into every clone hold.
    Every value long enough is hidden, whatever its name."""
    return frozenset({*_ALSO_HIDDEN.items(), *agents_env(), *copied_env()})


def copied_env() -> frozenset[tuple[str, str]]:
    """(file:NAME, value) of each ``NAME=value`` line of the files config.yaml's
    ``workspace.copy`` names (a ``.env.test``); a stat per file when unchanged."""
    from .. import config
    from ..model.exceptions import OctopoidError

    try:
        root = config.find_project_root()
        entries = tuple(config.load_config()["workspace"]["copy"])
    except (OctopoidError, OSError):
        return frozenset()
    if not entries:
        return frozenset()
    stamps = []
    for entry in entries:
        try:
            found = os.stat(root / entry)
            stamps.append((found.st_mtime_ns, found.st_size))
        except OSError:
            stamps.append((0, -1))
    return _copied_env(root, entries, tuple(stamps))


@lru_cache(maxsize=8)
def _copied_env(root: Path, entries: tuple[str, ...], _stamps: tuple) -> frozenset[tuple[str, str]]:
    from .workspace_rules import copied_secrets

    return frozenset(copied_secrets(list(entries), root).items())


def agents_env() -> frozenset[tuple[str, str]]:
    """(name, value) of every agent's ``env`` in agents.yaml; none outside a project or
    while agents.yaml is invalid (its own error is said elsewhere). A stat when unchanged."""
    from .. import config  # config does not import this module: no cycle
    from ..model.exceptions import OctopoidError

    try:
        path = _agents_file(config.find_project_root())
        stat = os.stat(path)
    except (OctopoidError, OSError):
        return frozenset()
    return _agents_env(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=16)
def _agents_file(root: Path) -> str:
    return os.path.join(root, ".octopoid", "agents.yaml")


@lru_cache(maxsize=8)
def _agents_env(path: str, _mtime_ns: int, _size: int) -> frozenset[tuple[str, str]]:
    from .. import config
    from ..model.exceptions import OctopoidError

    try:
        agents = config.load_agents()["agents"]
    except OctopoidError:
        return frozenset()
    return frozenset(
        (str(k), str(v)) for agent in agents for k, v in (agent.get("env") or {}).items()
    )


@lru_cache(maxsize=4)
def _own_secrets(
    _raw: frozenset[tuple[bytes, bytes]] | None, also: frozenset[tuple[str, str]]
) -> frozenset[tuple[str, str]]:
    """The secrets of this process's environment (the cache key ``_raw`` is its raw form)
    plus every value of ``also`` (agents' ``env``: whatever its name)."""
    return secret_env(os.environ) | secret_env(also, every_value=True)


@lru_cache(maxsize=16)
def _cached(secrets: frozenset[tuple[str, str]]) -> Redactor:
    return Redactor({}, secrets)  # chosen already: each is hidden as it is
