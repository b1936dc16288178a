"""A bundle cannot write outside its directory: links and escaping names are refused (CVE-2025-4517 class)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from iris.cluster.worker.bundles import BundleCache, BundleError
from iris.cluster.worker.safe_unpack import UnsafeBundle, safe_unpack


def archive(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    path = tmp_path / "bundle.tar.gz"
    with tarfile.open(path, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


def nested_symlink_escape(tmp_path: Path, outside: Path) -> Path:
    """Deeply nested long-named directories, each reachable through a one-letter symlink, then a
    link through that chain whose resolved path exceeds PATH_MAX, then a file written through it:
    the shape that defeats ``filter="data"`` on affected Pythons."""
    long_name = "d" * 247
    steps = "abcdefghijklmnop"
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    prefix = ""
    for step in steps:
        members.append((entry(os.path.join(prefix, long_name), tarfile.DIRTYPE, mode=0o755), None))
        members.append((entry(os.path.join(prefix, step), tarfile.SYMTYPE, link=long_name), None))
        prefix = os.path.join(prefix, long_name)
    deep_link = os.path.join("/".join(steps), "l" * 254)
    members.append((entry(deep_link, tarfile.SYMTYPE, link="../" * len(steps)), None))
    depth = len(Path(tmp_path / "work").resolve().parts)
    members.append(
        (entry("escape", tarfile.SYMTYPE, link=deep_link + "/" + "../" * depth + str(outside)[1:]), None)
    )
    members.append((entry("escape/pwned.txt"), b"written outside the work dir"))
    return archive(tmp_path, members)


def test_crafted_nested_symlink_bundle_is_refused_and_writes_nothing_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    bundle = nested_symlink_escape(tmp_path, outside)
    with pytest.raises(UnsafeBundle, match="link"):
        safe_unpack(bundle, work)
    assert list(outside.iterdir()) == []
    cache = BundleCache(tmp_path / "bundles", "http://127.0.0.1:1")
    with pytest.raises(BundleError, match="only files and directories are allowed"):
        cache.unpack("e" * 64, bundle, work)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("member", "why"),
    [
        (entry("link", tarfile.SYMTYPE, link="/etc/passwd"), "link"),
        (entry("hard", tarfile.LNKTYPE, link="../../etc/passwd"), "link"),
        (entry("fifo", tarfile.FIFOTYPE), "special file"),
        (entry("dev", tarfile.CHRTYPE), "special file"),
    ],
)
def test_links_and_special_files_are_refused(tmp_path: Path, member: tarfile.TarInfo, why: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UnsafeBundle, match=why):
        safe_unpack(archive(tmp_path, [(member, None)]), work)
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("name", ["../escaped.txt", "/tmp/absolute.txt", "a/../../escaped.txt"])
def test_names_that_leave_the_work_dir_are_refused(tmp_path: Path, name: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(UnsafeBundle):
        safe_unpack(archive(tmp_path, [(entry(name), b"bad")]), work)
    assert not (tmp_path / "escaped.txt").exists()


def test_a_link_planted_in_the_work_dir_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "sub").symlink_to(outside)  # e.g. left by an earlier step
    with pytest.raises(UnsafeBundle, match="not a directory"):
        safe_unpack(archive(tmp_path, [(entry("sub/x.txt"), b"x")]), work)
    (work / "f").symlink_to(outside / "target")
    with pytest.raises(OSError):
        safe_unpack(archive(tmp_path, [(entry("f"), b"x")]), work)
    assert list(outside.iterdir()) == []


def test_files_and_directories_unpack_with_their_exec_bit(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    bundle = archive(
        tmp_path,
        [
            (entry("pkg", tarfile.DIRTYPE, mode=0o755), None),
            (entry("pkg/mod.py"), b"X = 1\n"),
            (entry("./run.sh", mode=0o755), b"#!/bin/sh\necho hi\n"),
            (entry("deep/er/file.txt"), b"deep"),
        ],
    )
    assert safe_unpack(bundle, work) == 3
    assert (work / "pkg" / "mod.py").read_text() == "X = 1\n"
    assert os.access(work / "run.sh", os.X_OK) and not os.access(work / "pkg" / "mod.py", os.X_OK)
    assert (work / "deep" / "er" / "file.txt").read_bytes() == b"deep"


def zeros_archive(tmp_path: Path, files: int, size: int) -> Path:
    """A small .tar.gz that unpacks big: ``files`` files of ``size`` zero bytes."""
    path = tmp_path / f"zeros-{files}-{size}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for i in range(files):
            info = tarfile.TarInfo(f"d/f{i}")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    return path


def test_unpacking_is_bounded_in_bytes_and_entries_with_worker_sized_defaults(tmp_path: Path) -> None:
    from iris.cluster.worker.safe_unpack import MAX_BYTES, MAX_MEMBERS

    assert MAX_BYTES >= 10 * 1000**3 and MAX_MEMBERS >= 1_000_000
    bomb = zeros_archive(tmp_path, files=4, size=1 << 20)  # ~4 KB compressed, 4 MiB unpacked
    assert bomb.stat().st_size < 64 * 1024
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UnsafeBundle, match="more than 3000000 bytes"):
        safe_unpack(bomb, out, max_bytes=3_000_000)
    assert sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) <= 3_000_000
    many = tmp_path / "many"
    many.mkdir()
    with pytest.raises(UnsafeBundle, match="more than 3 entries"):
        safe_unpack(zeros_archive(tmp_path, files=5, size=0), many, max_entries=3)
    cache = BundleCache(tmp_path / "cache", "http://127.0.0.1:9", max_unpack_bytes=1000)
    with pytest.raises(
        BundleError, match="could not unpack bundle b: the bundle unpacks to more than 1000 bytes"
    ):
        cache.unpack("b", bomb, many)


def test_unpacking_stops_as_soon_as_its_attempt_ends(tmp_path: Path) -> None:
    from iris.cluster.worker.build_lock import Cancelled

    bomb = zeros_archive(tmp_path, files=50, size=1 << 16)
    out = tmp_path / "out"
    out.mkdir()
    calls = {"n": 0}

    def cancelled() -> bool:  # the attempt is killed after a few files
        calls["n"] += 1
        return calls["n"] > 5

    cache = BundleCache(tmp_path / "cache", "http://127.0.0.1:9")
    with pytest.raises(Cancelled):
        cache.unpack("b", bomb, out, cancelled)
    assert len([f for f in out.rglob("*") if f.is_file()]) < 50
