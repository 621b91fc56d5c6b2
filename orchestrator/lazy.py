"""Heavy libraries imported on first use, so commands that never need them never pay.

GitPython costs ~40 ms and runs ``git version`` in a subprocess when imported; ``octopoid
list``, ``status`` and ``show`` never touch git. A lazy module is a real module whose body
runs at its first attribute access (``importlib.util.LazyLoader``). A submodule's packages
are lazy too (``orchestrator.backends.claude_code`` does not run ``backends/__init__``), and
it is bound in its package, as an import binds it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType


def lazy_import(name: str) -> ModuleType:
    """``name``, imported now if something already did, else at its first use."""
    if name in sys.modules:
        return sys.modules[name]
    parent_name, _, child = name.rpartition(".")
    parent = lazy_import(parent_name) if parent_name else None
    spec = _find_spec(name, parent)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    if parent is not None:
        # Into the namespace itself: an attribute set on a lazy package would load it.
        object.__getattribute__(parent, "__dict__")[child] = module
    return module


def _find_spec(name: str, parent: ModuleType | None) -> importlib.machinery.ModuleSpec | None:
    """Where ``name`` is, without running its package when that is lazy and not yet run."""
    if parent is None or not isinstance(parent, importlib.util._LazyModule):
        return importlib.util.find_spec(name)
    spec: importlib.machinery.ModuleSpec = object.__getattribute__(parent, "__spec__")
    if spec.submodule_search_locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, spec.submodule_search_locations)
