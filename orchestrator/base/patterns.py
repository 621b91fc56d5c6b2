"""Regexes compiled at their first use, not when their module is imported.

Python compiles a regex with a compiler written in Python: ~0.3-1.5 M instructions each, and
a command paid that at import for every pattern of every module it loaded, used or not
(``list`` compiled fifteen and used none; ``enqueue`` ~9 ms of patterns, mostly the
redaction's stream and key-block ones, for a one-line title). A ``LazyPattern`` stands where the
compiled pattern stood: the first method called compiles it, and from then on its methods
are the compiled pattern's own (bound, in the instance's ``__dict__``: no extra call).
Two threads using one first may both compile it; ``re``'s cache makes that one compile.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, Generic

#: What a compiled pattern offers, copied onto a ``LazyPattern`` once it is compiled.
_ATTRIBUTES = (
    "match",
    "fullmatch",
    "search",
    "sub",
    "subn",
    "split",
    "findall",
    "finditer",
    "flags",
    "groups",
    "groupindex",
)


class LazyPattern(Generic[AnyStr]):
    """``re.compile(pattern, flags)``, made at the first use of any of its methods.

    ``pattern`` is there before (a module builds other patterns from it). It is not a
    ``re.Pattern``: its ``compiled`` attribute is (compiled then if no method was used
    yet), to compare with a match's ``re`` or to hand to a function of ``re`` itself."""

    compiled: re.Pattern[AnyStr]

    def __init__(self, pattern: AnyStr, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        """Only for what the instance does not hold yet: the first use compiles. A special
        name is none of its methods (``copy`` and ``pickle`` look some up before
        ``__init__`` has run): looked for here, it is not there."""
        if name.startswith("__"):
            raise AttributeError(name)
        compiled = re.compile(self.pattern, self._flags)
        vars(self).update({attr: getattr(compiled, attr) for attr in _ATTRIBUTES})
        vars(self)["compiled"] = compiled
        return compiled if name == "compiled" else getattr(compiled, name)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"
