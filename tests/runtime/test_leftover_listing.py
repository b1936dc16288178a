"""A uid's leftovers in shared temporary directories: the remembered listing that spares a release
from stat-ing every entry of /tmp never spares a file the uid left after it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from iris.cluster.runtime import isolation
from iris.cluster.runtime.isolation import remove_leftovers_of

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="giving files to task uids needs root (CI runs as root)"
)

ALICE, BOB = 61_901, 61_902


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A /tmp of our own: world-writable and sticky, with a root-owned world-writable subdirectory."""
    root = tmp_path / "tmp"
    (root / "x11").mkdir(parents=True)
    for directory in (root, root / "x11"):
        directory.chmod(0o1777)
    return root


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts full listings (each stats every entry); the remembered ones are this test's own."""
    monkeypatch.setattr(isolation, "_listings", {})
    calls: list[int] = []
    real = isolation._scrub_listing

    def counted(*args: object, **kwargs: object) -> tuple[str, ...]:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(isolation, "_scrub_listing", counted)
    yield calls


def leave(path: Path, uid: int) -> None:
    path.write_text("secret\n")
    os.chown(path, uid, uid)


def test_an_unchanged_directory_is_listed_once(
    shared: Path, listings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(isolation, "_SETTLED_NS", 0)  # these directories changed a moment ago
    leave(shared / "alices", ALICE)
    remove_leftovers_of(BOB, roots=[shared])
    first = len(listings)
    assert first == 2  # the directory and its shared subdirectory
    remove_leftovers_of(BOB, roots=[shared])
    assert len(listings) == first  # nothing changed and bob owned nothing: no second look
    assert (shared / "alices").exists()


def test_files_left_after_the_listing_are_removed(
    shared: Path, listings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(isolation, "_SETTLED_NS", 0)
    leave(shared / "alices", ALICE)
    remove_leftovers_of(BOB, roots=[shared])  # remembered: alice owns one entry, bob none
    leave(shared / "bobs", BOB)
    leave(shared / "x11" / "bobs-too", BOB)  # the top directory's ctime does not change for this one
    remove_leftovers_of(BOB, roots=[shared])
    assert not (shared / "bobs").exists()
    assert not (shared / "x11" / "bobs-too").exists()
    remove_leftovers_of(ALICE, roots=[shared])  # she is among the remembered owners: listed again
    assert not (shared / "alices").exists()


def test_a_listing_taken_right_after_a_change_is_not_trusted(shared: Path, listings: list[int]) -> None:
    leave(shared / "alices", ALICE)  # the directory changed just now
    remove_leftovers_of(BOB, roots=[shared])
    remove_leftovers_of(BOB, roots=[shared])
    assert len(listings) == 4  # both calls listed both directories in full
