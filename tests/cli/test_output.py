"""Output paths: checked before any work, written atomically, nothing left on failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hycache.cli.output import check_distinct, check_output_path, write_atomically
from hycache.errors import ConfigError


def test_writable_file_paths_pass(tmp_path: Path) -> None:
    assert check_output_path(str(tmp_path / "r.json")) == tmp_path / "r.json"
    (tmp_path / "old.json").write_text("{}")
    assert check_output_path(str(tmp_path / "old.json")) == tmp_path / "old.json"


def test_unwritable_paths_are_refused(tmp_path: Path) -> None:
    cases = {
        str(tmp_path): "is a directory",
        f"{tmp_path}/new/": "names a directory",
        str(tmp_path / "missing" / "r.json"): "does not exist",
        "": "empty",
    }
    for text, reason in cases.items():
        with pytest.raises(ConfigError, match=reason):
            check_output_path(text)
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="not writable"):
            check_output_path(str(locked / "r.json"))


def test_two_options_naming_one_file(tmp_path: Path) -> None:
    check_distinct({"--json": tmp_path / "a", "--report": None})
    with pytest.raises(ConfigError, match="--report and --json name the same file"):
        check_distinct({"--json": tmp_path / "a", "--report": tmp_path / "." / "a"})


def test_atomic_write_replaces_the_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_atomically(target, "first")
    write_atomically(target, ["sec", "ond"])
    assert target.read_text() == "second" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask


def _failing() -> Iterator[str]:
    yield "partial content"
    raise RuntimeError("disk on fire")


def test_a_failure_mid_write_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "new.json"
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_atomically(target, _failing())
    assert list(tmp_path.iterdir()) == []
    old = tmp_path / "old.json"
    old.write_text("old")
    with pytest.raises(RuntimeError):
        write_atomically(old, _failing())
    assert old.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["old.json"]


def test_an_os_error_names_the_path(tmp_path: Path) -> None:
    """The directory vanished after the check: a typed error, nothing left behind."""
    gone = tmp_path / "gone"
    gone.mkdir()
    target = check_output_path(str(gone / "r.json"))
    gone.rmdir()
    with pytest.raises(ConfigError, match=r"gone/r\.json: cannot write"):
        write_atomically(target, "x")
    assert list(tmp_path.iterdir()) == []
