"""Packaging the workspace: ignore rules (table + property), git and walker listings, determinism, size limit."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from iris.client.workspace import (
    WorkspaceTooLarge,
    build_bundle,
    is_excluded,
    parse_ignore_lines,
    workspace_files,
)


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        (["*.log"], "a.log", True),
        (["*.log"], "deep/dir/a.log", True),
        (["*.log"], "a.log.txt", False),
        (["*.log", "!keep.log"], "keep.log", False),
        (["*.log", "!keep.log"], "x/keep.log", False),
        (["/build"], "build/out.o", True),
        (["/build"], "src/build/out.o", False),
        (["build/"], "src/build/out.o", True),
        (["build/"], "build", False),  # a file named build: dir-only rule does not apply
        (["docs/*.md"], "docs/a.md", True),
        (["docs/*.md"], "docs/sub/a.md", False),
        (["docs/**/*.md"], "docs/sub/deeper/a.md", True),
        (["**/cache"], "a/b/cache/x", True),
        (["data/**"], "data/x/y.bin", True),
        (["data/**"], "data", False),
        (["?.txt"], "a.txt", True),
        (["?.txt"], "ab.txt", False),
        (["[ab].txt"], "b.txt", True),
        (["[!ab].txt"], "b.txt", False),
        (["[!ab].txt"], "c.txt", True),
        (["# comment", "", "   "], "# comment", False),
        (["\\#literal"], "#literal", True),
        (["secret/", "!secret/ok.txt"], "secret/ok.txt", True),  # no re-include under an excluded dir
        (["*"], ".venv/x", True),
        ([], ".venv/lib/x.py", True),  # always skipped
        ([], "pkg/__pycache__/m.pyc", True),
        ([], ".git/config", True),
        ([], "src/main.py", False),
    ],
)
def test_ignore_rules(patterns: list[str], path: str, excluded: bool) -> None:
    assert is_excluded(parse_ignore_lines(patterns), path) is excluded


def test_rules_of_a_nested_file_apply_below_it_only() -> None:
    rules = parse_ignore_lines(["*.csv"], base="data") + parse_ignore_lines(["/top.txt"], base="sub")
    assert is_excluded(rules, "data/x.csv")
    assert not is_excluded(rules, "x.csv")
    assert is_excluded(rules, "sub/top.txt")
    assert not is_excluded(rules, "sub/deeper/top.txt")
    assert not is_excluded(rules, "top.txt")


names = st.text(alphabet="abcxyz._-", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))


@given(parts=st.lists(names, min_size=1, max_size=4), negate_after=st.booleans())
@settings(max_examples=200, deadline=None)
def test_last_matching_rule_wins_for_a_plain_file(parts: list[str], negate_after: bool) -> None:
    path = "/".join(parts)
    if any(p in (".git", ".venv", "__pycache__") for p in parts):
        return
    rules = parse_ignore_lines(["/" + path] + (["!/" + path] if negate_after else []))
    assert is_excluded(rules, path) is (not negate_after)


def write(root: Path, rel: str, text: str = "x") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_tree(root: Path) -> None:
    write(root, "train.py", "import helper\n")
    write(root, "helper.py", "X = 1\n")
    write(root, "pkg/mod.py")
    write(root, "pkg/__pycache__/mod.cpython-311.pyc")
    write(root, ".venv/bin/python")
    write(root, "out/model.bin")
    write(root, "logs/run.log")
    write(root, "data/big.csv")
    write(root, "data/keep.csv")
    write(root, ".gitignore", "out/\n*.log\n")
    write(root, ".irisignore", "data/*.csv\n!data/keep.csv\n")


EXPECTED = [".gitignore", ".irisignore", "data/keep.csv", "helper.py", "pkg/mod.py", "train.py"]


def test_walker_honours_gitignore_and_irisignore(tmp_path: Path) -> None:
    make_tree(tmp_path)
    assert workspace_files(tmp_path) == EXPECTED


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_work_tree_lists_what_git_lists(tmp_path: Path) -> None:
    make_tree(tmp_path)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, env=env)
    write(tmp_path, "untracked_new.py")  # untracked, not ignored: included
    (tmp_path / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("helper.py\n")  # only git knows this rule
    files = workspace_files(tmp_path)
    assert "helper.py" not in files  # git's own exclude file was honoured: git listed the files
    assert "untracked_new.py" in files
    assert set(files) == (set(EXPECTED) - {"helper.py"}) | {"untracked_new.py"}


def test_same_content_same_bundle_id_whatever_the_mtimes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        make_tree(root)
    os.utime(b / "train.py", (1_000_000, 1_000_000))
    first, second = build_bundle(a), build_bundle(b)
    assert first.bundle_id == second.bundle_id
    assert first.data == second.data
    write(b, "helper.py", "X = 2\n")
    assert build_bundle(b).bundle_id != first.bundle_id


def test_archive_entries_are_sorted_and_normalised(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "train.py").chmod(0o775)
    bundle = build_bundle(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(bundle.data), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == EXPECTED
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, 0, "", "")}
    modes = {m.name: m.mode for m in members}
    assert modes["train.py"] == 0o755 and modes["helper.py"] == 0o644
    assert bundle.file_count == len(EXPECTED)


def test_too_big_names_the_biggest_files(tmp_path: Path) -> None:
    write(tmp_path, "small.py", "x" * 10)
    write(tmp_path, "weights/huge.bin", "x" * 5000)
    write(tmp_path, "medium.dat", "x" * 2000)
    with pytest.raises(WorkspaceTooLarge) as err:
        build_bundle(tmp_path, max_bytes=4000)
    message = err.value.message
    assert "over the 4.0 kB bundle limit" in message
    assert message.index("weights/huge.bin") < message.index("medium.dat") < message.index("small.py")
    assert ".irisignore" in message and message.count(". ") == 0  # one sentence


def test_limit_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "f.bin", "x" * 3000)
    monkeypatch.setenv("IRIS_MAX_BUNDLE_BYTES", "2kB")
    with pytest.raises(WorkspaceTooLarge):
        build_bundle(tmp_path)
    monkeypatch.setenv("IRIS_MAX_BUNDLE_BYTES", "1MB")
    assert build_bundle(tmp_path).file_count == 1


def test_unreadable_files_are_reported_not_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ok.py").write_text("print(1)\n")
    secret = tmp_path / "secret.key"
    secret.write_text("x")
    if os.geteuid() == 0:  # root reads any file: make this one fail to read as it would for a user
        real = Path.read_bytes

        def read_bytes(self: Path) -> bytes:
            if self.name == "secret.key":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", read_bytes)
    else:
        secret.chmod(0)
    with pytest.raises(
        Exception, match=r"cannot read 1 file\(s\) of the workspace .*secret.key \(permission denied\)"
    ):
        build_bundle(tmp_path)
