"""Heavy libraries imported on first use, so commands that never need them never pay.

GitPython costs ~40 ms and runs ``git version`` in a subprocess when imported; ``octopoid
list``, ``status`` and ``show`` never touch git. A lazy module is a real module whose body
runs at its first attribute access (``importlib.util.LazyLoader``).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """``name``, imported now if something already did, else at its first use."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
