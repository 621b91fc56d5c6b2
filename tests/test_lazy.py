"""Lazy imports: loaded once at first use, whole, however many threads use them at once
(the review page's thread pool does, at its first requests)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from orchestrator.base.lazy import is_loaded, lazy_import


def test_sixteen_threads_at_first_use_all_see_the_whole_module(tmp_path: Path, monkeypatch):
    (tmp_path / "slowmod.py").write_text(
        "import time\nLOADS = []\nLOADS.append(1)\ntime.sleep(0.2)\nDONE = 'all of it'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slowmod", raising=False)
    lazy = lazy_import("slowmod")
    assert not is_loaded(lazy)  # its body has not run before its first use
    go, seen = threading.Barrier(16), []

    def use() -> None:
        go.wait(30)
        seen.append(lazy.DONE)

    threads = [threading.Thread(target=use) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert seen == ["all of it"] * 16
    assert sys.modules["slowmod"].LOADS == [1]  # its body ran once


def test_a_patch_through_the_stand_in_reaches_the_real_module(tmp_path, monkeypatch) -> None:
    (tmp_path / "patchmod.py").write_text("def answer():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "patchmod", raising=False)
    lazy = lazy_import("patchmod")
    monkeypatch.setattr(lazy, "answer", lambda: 2)
    assert sys.modules["patchmod"].answer() == 2 and lazy.answer() == 2


def test_a_missing_module_is_said_at_once() -> None:
    import pytest

    with pytest.raises(ModuleNotFoundError):
        lazy_import("no_such_module_anywhere")
