"""Text a person typed, checked before octopoid stores it.

Below the queue so that every face can check its input (``memory search``'s query, a
review comment) without importing the queue's store and state machine for one function.
"""

from __future__ import annotations

from ..model.exceptions import InvalidInput
from .patterns import LazyPattern

SURROGATE_RE = LazyPattern("[\ud800-\udfff]")
#: Control characters other than tab and line ends: terminal escapes, binary data.
CONTROL_RE = LazyPattern("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def clean_text(value: str, what: str) -> str:
    """``value`` when octopoid can store it; otherwise ``InvalidInput`` naming ``what``.

    Refused: bytes that are not UTF-8 (click's surrogate escapes), NUL and other control
    characters. Tabs and line ends are kept.
    """
    bad = SURROGATE_RE.search(value)
    if bad:
        code = ord(bad.group())  # surrogateescape turns an undecodable byte b into U+DC00 + b
        what_is_bad = f"byte 0x{code - 0xDC00:02x}" if code >= 0xDC80 else f"U+{code:04X}"
        raise InvalidInput(
            f"{what} is not UTF-8 text ({what_is_bad} at character {bad.start() + 1}): "
            "check the encoding of your terminal or file"
        )
    if "\0" in value:
        at = value.index("\0") + 1
        raise InvalidInput(f"{what} contains a NUL byte at character {at} (binary data?)")
    bad = CONTROL_RE.search(value)
    if bad:
        raise InvalidInput(
            f"{what} contains a control character, U+{ord(bad.group()):04X} at character "
            f"{bad.start() + 1}: remove it"
        )
    return value


def ascii_int(value: str) -> int | None:
    """``value``'s number when it is 1 to 20 ASCII digits, else None. ``isdigit`` alone
    passes ``²``, which ``int`` refuses, and ``١٢``, which it reads; ``int`` refuses over
    4,300 digits too: each would be a traceback on hostile input. 20 digits hold any
    64-bit count (``PID_START`` is the longest header: 2**63 - 1, 19 digits)."""
    return int(value) if len(value) <= 20 and value.isascii() and value.isdigit() else None
