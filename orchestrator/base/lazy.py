"""Heavy libraries imported on first use, so commands that never need them never pay.

GitPython costs ~40 ms and runs ``git version`` in a subprocess when imported; ``octopoid
list``, ``status`` and ``show`` never touch git. A lazy module is a real module, in
``sys.modules`` (so ``from . import x`` elsewhere gets it, still lazy), whose body runs at
its first attribute use. A submodule's packages are lazy too (``orchestrator.backends.
claude_code`` does not run ``backends/__init__``), and it is bound in its package.

Not ``importlib.util.LazyLoader``: on Python 3.11 a second thread using the module while
the first runs its body sees it half made (the review page's thread pool did, at its first
requests). Here the body runs under the module's own lock (as an import holds a lock per
module, never one for all) and the module stays lazy until it is whole.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_MAKING = threading.RLock()  # making stand-ins (no module body runs under it)


class _LazyModule(ModuleType):
    """A module whose body has not run; the first attribute use runs it, once."""

    def __getattribute__(self, attr: str) -> Any:
        namespace = object.__getattribute__(self, "__dict__")
        with namespace["__lazy_lock__"]:
            if type(self) is _LazyModule:
                if namespace.get("__lazy_running__"):  # its own body, in this thread
                    return object.__getattribute__(self, attr)
                namespace["__lazy_running__"] = True
                try:
                    namespace["__spec__"].loader.exec_module(self)
                finally:
                    del namespace["__lazy_running__"]
                self.__class__ = ModuleType  # whole now: plain attribute lookups from here
        return getattr(self, attr)


def lazy_import(name: str) -> ModuleType:
    """``name``, imported now if something already did, else at its first use."""
    with _MAKING:
        if name in sys.modules:
            return sys.modules[name]
        parent_name, _, child = name.rpartition(".")
        parent = lazy_import(parent_name) if parent_name else None
        spec = _find_spec(name, parent)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        module = importlib.util.module_from_spec(spec)
        module.__lazy_lock__ = threading.RLock()  # type: ignore[attr-defined]
        module.__class__ = _LazyModule
        sys.modules[name] = module
        if parent is not None:
            # Into the namespace itself: an attribute set on a lazy package would load it.
            object.__getattribute__(parent, "__dict__")[child] = module
        return module


def is_loaded(module: ModuleType) -> bool:
    """Whether a module's body has run (a lazy one's runs at its first use)."""
    return type(module) is not _LazyModule


def _find_spec(name: str, parent: ModuleType | None) -> importlib.machinery.ModuleSpec | None:
    """Where ``name`` is, without running its package when that is lazy and not yet run."""
    if parent is None or type(parent) is not _LazyModule:
        return importlib.util.find_spec(name)
    spec: importlib.machinery.ModuleSpec = object.__getattribute__(parent, "__spec__")
    if spec.submodule_search_locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, spec.submodule_search_locations)
