"""A command's name resolves to the file the child's own PATH search would run."""

from __future__ import annotations

import os
from pathlib import Path

from iris.cluster.runtime.exec_path import resolve_executable


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_first_directory_holding_an_executable_of_that_name_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    (first / "tool").write_text("not executable")
    executable(second / "tool")
    (first / "other").mkdir()  # a directory of that name is not a command
    search = f"{first}{os.pathsep}{second}"
    assert resolve_executable("tool", search) == f"{second}/tool"
    assert resolve_executable("missing", search) is None


def test_a_remembered_file_that_went_away_is_searched_for_again(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    later = executable(second / "tool")
    search = f"{first}{os.pathsep}{second}"
    assert resolve_executable("tool", search) == str(later)
    earlier = executable(first / "tool")
    later.unlink()
    assert resolve_executable("tool", search) == str(earlier)
    earlier.unlink()
    assert resolve_executable("tool", search) is None


def test_names_with_a_slash_and_relative_search_paths_are_left_to_the_child(tmp_path: Path) -> None:
    executable(tmp_path / "tool")
    assert resolve_executable("./tool", str(tmp_path)) is None
    assert resolve_executable(str(tmp_path / "tool"), str(tmp_path)) is None
    assert resolve_executable("tool", f"bin{os.pathsep}{tmp_path}") is None
    assert resolve_executable("", str(tmp_path)) is None
    assert resolve_executable("true", os.defpath) in ("/usr/bin/true", "/bin/true")
