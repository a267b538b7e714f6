"""The ``SFRAME_*`` variables: one table (sframe_core/base/settings.py), one
rule, one page of docs (docs/settings.md), and no other reader."""

from __future__ import annotations

import re

import pytest
from helpers import ROOT

from sframe_core.base import settings


def test_docs_table_is_the_settings_table() -> None:
    text = (ROOT / "docs" / "settings.md").read_text()
    rows = re.findall(r"^\| `(SFRAME_[A-Z_]+)` \| (\w+) \| [^|]* \| `?([^|`]*)`? \|", text, re.M)
    assert [(name, kind, default) for name, kind, default in rows] == [
        (s.name, s.kind, s.default or "computed") for s in settings.SETTINGS.values()]


def test_no_other_reader() -> None:
    """Every ``SFRAME_*`` variable the code reads is read through settings.py."""
    readers = []
    for path in [*ROOT.glob("sframe_core/**/*.py"), *ROOT.glob("gdb_plugin/*.py"),
                 *ROOT.glob("lldb_plugin/*.py"), ROOT / "sframe_gdb.py"]:
        if path.name == "settings.py":
            continue
        text = path.read_text()
        if re.search(r"os\.environ(\.get)?[\[(]\s*[\"']SFRAME_", text) or \
                re.search(r"getenv\(\s*[\"']SFRAME_", text):
            readers.append(str(path.relative_to(ROOT)))
    assert readers == []
    names = set()
    for path in [*ROOT.glob("sframe_core/**/*.py"), *ROOT.glob("gdb_plugin/*.py"),
                 *ROOT.glob("lldb_plugin/*.py")]:
        names |= set(re.findall(r"[\"'](SFRAME_[A-Z_]+)[\"']", path.read_text()))
    flags = {"SFRAME_F_FDE_SORTED", "SFRAME_F_FRAME_POINTER", "SFRAME_F_FDE_FUNC_START_PCREL",
             "SFRAME_MAGIC", "SFRAME_ONLY"}
    assert names - flags == set(settings.SETTINGS)


@pytest.mark.parametrize(("text", "on"), [("", True), ("1", True), ("yes", True), ("0", False),
                                          ("off", False), ("No", False), (" FALSE ", False)])
def test_switch(monkeypatch: pytest.MonkeyPatch, text: str, on: bool) -> None:
    monkeypatch.setenv("SFRAME_NATIVE", text)
    assert settings.switch("SFRAME_NATIVE") is on


@pytest.mark.parametrize(("text", "value"), [("", 30.0), ("7", 7.0), ("0", 0.0), ("-1", 30.0),
                                             ("x", 30.0), ("2.5", 2.5)])
def test_number(monkeypatch: pytest.MonkeyPatch, text: str, value: float) -> None:
    monkeypatch.setenv("SFRAME_CACHE_DAYS", text)
    assert settings.number("SFRAME_CACHE_DAYS") == value


def test_number_without_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SFRAME_FOREGROUND_FDES", "many")
    assert settings.number("SFRAME_FOREGROUND_FDES") is None


@pytest.mark.parametrize(("text", "value"), [("", "auto"), ("Foreground", "foreground"),
                                             ("off", "off"), ("later", "auto")])
def test_choice(monkeypatch: pytest.MonkeyPatch, text: str, value: str) -> None:
    monkeypatch.setenv("SFRAME_GDB_SYMBOL_FILES", text)
    assert settings.choice("SFRAME_GDB_SYMBOL_FILES") == value


def test_unknown_name() -> None:
    with pytest.raises(KeyError):
        settings.switch("SFRAME_NOT_A_SETTING")
