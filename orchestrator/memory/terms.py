"""The terms a note is indexed by and a query searches by, the same for both memories.

Words are lower-cased and not stemmed: stemming let generic words ("tests", "docs",
"options") match nearly every note (issue 41). English function words, bare numbers and
file extensions are not terms. What looks like code is a term whole: a path
(``httpx/_client.py``, and its file name ``_client.py``: not its folders' words, which would
match everything), and besides its words a dotted, snake_case or CamelCase name
(``Client.send``, ``iter_lines``, ``MemoryStore``) or a name called (``send()``) or in
backticks. Those are a query's most specific terms: ``query_terms``
puts them first and ranking never drops them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import NamedTuple

from ..base.patterns import LazyPattern

WORD, SYMBOL, PATH = 0, 1, 2  # a term's kind: how specific it is
CHUNK_RE = LazyPattern(r"\w[\w./-]*")
PART_RE = LazyPattern(r"[^\W_]+")
PLAIN_RE = LazyPattern(r"[a-z0-9]*")
CAMEL_RE = LazyPattern(r"[a-z0-9][A-Z]|[A-Z]{2}[a-z]")
CAMEL_SPLIT_RE = LazyPattern(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


EXTENSIONS = _words("py pyi md rst txt toml yaml yml json cfg ini html js ts css c h sh lock in")
STOP_WORDS = EXTENSIONS | _words(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    etc few for from further had has have having he her here hers him his how i if in into
    is it its itself just me more most my no nor not now of off on once only or other our
    ours out over own same she should so some such than that the their theirs them then
    there these they this those through to too under until up us very was we were what
    when where which while who whom why will with would you your yours don doesn didn isn
    wasn aren weren won wouldn shouldn couldn hasn haven hadn""",
)
MAX_TERM = 200  # characters of a term kept (a longer "path" is noise, not a key)


class Term(NamedTuple):
    text: str
    kind: int  # WORD, SYMBOL or PATH


def scan(text: str) -> Iterator[Term]:
    """Every term of ``text``, in order, repeats included."""
    for found in CHUNK_RE.finditer(text):
        chunk = found.group().rstrip("./-")
        start, end = found.start(), found.start() + len(chunk)
        called = text.startswith("()", end) or (start > 0 and text[start - 1] == "`")
        if not called and PLAIN_RE.fullmatch(chunk):  # most chunks: a word, nothing to cut
            if len(chunk) > 1 and chunk not in STOP_WORDS and not chunk.isdigit():
                yield Term(chunk[:MAX_TERM], WORD)
            continue
        code = list(_code_terms(chunk, called))
        yield from code
        if any(term.kind == PATH for term in code):
            continue  # a path's folders are no words: "tests", "src" would match everything
        for part in PART_RE.findall(chunk):
            for word in CAMEL_SPLIT_RE.findall(part) if CAMEL_RE.search(part) else [part]:
                word = word.lower()
                if len(word) > 1 and not word.isdigit() and word not in STOP_WORDS:
                    yield Term(word[:MAX_TERM], WORD)


def _code_terms(chunk: str, called: bool) -> Iterator[Term]:
    """A chunk that looks like code, whole (and a path's file name)."""
    lowered = chunk.lower()[:MAX_TERM]
    if "/" in chunk:
        yield Term(lowered, PATH)
        name = chunk.rsplit("/", 1)[1]
        if name and _looks_like_code(name):
            yield Term(name.lower(), PATH if is_file(name) else SYMBOL)
    elif is_file(chunk):
        yield Term(lowered, PATH)
    elif _looks_like_code(chunk):
        yield Term(lowered, SYMBOL)
        if "." in chunk:  # Client.send: also Client, and send_all of Client.send_all
            for part in chunk.split("."):
                if _looks_like_code(part):
                    yield Term(part.lower(), SYMBOL)
    elif called and not chunk.isdigit() and len(chunk) > 1:
        yield Term(lowered, SYMBOL)


def _looks_like_code(chunk: str) -> bool:
    if "." in chunk:
        parts = chunk.split(".")
        return all(parts) and any(len(p) > 1 and not p.isdigit() for p in parts)
    return "_" in chunk.strip("_") or bool(CAMEL_RE.search(chunk))


def is_file(name: str) -> bool:
    return "." in name and name.rsplit(".", 1)[1].lower() in EXTENSIONS


def note_terms(text: str) -> Counter[str]:
    """A note's terms and how often each occurs (its length is their sum)."""
    return Counter(term.text for term in scan(text))


def query_terms(text: str, max_words: int, max_specific: int) -> list[Term]:
    """A query's distinct terms, the most specific first (paths, then names, each in the
    order given), then up to ``max_words`` words in the order given."""
    kinds: dict[str, int] = {}
    for term in scan(text):
        kinds[term.text] = max(kinds.get(term.text, WORD), term.kind)
    specific = [Term(t, k) for t, k in kinds.items() if k != WORD]
    specific.sort(key=lambda term: -term.kind)  # stable: paths, then names, as given
    words = [Term(t, k) for t, k in kinds.items() if k == WORD]
    return specific[:max_specific] + words[:max_words]
