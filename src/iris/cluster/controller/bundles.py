"""The controller's bundle store: workspace archives kept by content hash under ``<state>/bundles``.

A bundle is written once (``PUT``, verified against its sha256) and read by workers and pod init
containers (``GET``). A user reads, checks for (``HEAD``) and submits jobs with only the bundles
they uploaded themselves (``bundle_owners``); another user's bundle answers as a missing one. Checking for one (``HEAD``) or fetching it counts as a use: garbage
collection only removes bundles that no unfinished job names and that nobody used for an hour.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from iris.cluster.controller import store
from iris.rpc.errors import InvalidArgument, NotFound

BUNDLE_ID = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_MAX_UPLOAD_BYTES = 512 * 1000**2
GC_MIN_AGE_S = 3600.0
GC_INTERVAL_S = 60.0


def check_bundle_id(bundle_id: str) -> str:
    if not BUNDLE_ID.match(bundle_id):
        raise InvalidArgument(f"{bundle_id!r} is not a bundle id (the sha256 of the archive, 64 hex digits)")
    return bundle_id


def bundles_to_delete(
    stored: Iterable[tuple[str, float]], referenced: set[str], now: float, min_age_s: float = GC_MIN_AGE_S
) -> list[str]:
    """Of the stored (bundle id, last use) pairs, those no live job names and unused for ``min_age_s``."""
    return sorted(b for b, used in stored if b not in referenced and now - used >= min_age_s)


class BundleStore:
    """Files ``<directory>/<sha256>.tar.gz``. Without a directory, a private temp dir (made on first use)."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._directory = Path(directory) if directory is not None else None
        self.max_upload_bytes = max_upload_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._next_gc = 0.0

    @property
    def directory(self) -> Path:
        with self._lock:
            if self._directory is None:
                self._directory = Path(tempfile.mkdtemp(prefix="iris-bundles-"))
            self._directory.mkdir(parents=True, exist_ok=True)
            return self._directory

    def path(self, bundle_id: str) -> Path:
        return self.directory / f"{check_bundle_id(bundle_id)}.tar.gz"

    def exists(self, bundle_id: str) -> bool:
        """Whether the bundle is stored; a positive answer counts as a use (it delays collection)."""
        path = self.path(bundle_id)
        try:
            os.utime(path)
        except FileNotFoundError:
            return False
        return True

    def open_path(self, bundle_id: str) -> Path:
        """The stored file, for reading; raises NotFound."""
        if not self.exists(bundle_id):
            raise NotFound(f"bundle {bundle_id} is not on this controller (never uploaded, or collected)")
        return self.path(bundle_id)

    def put(self, bundle_id: str, data: bytes) -> bool:
        """Store ``data`` under its hash; True if new. InvalidArgument if the hash does not match."""
        path = self.path(bundle_id)
        if len(data) > self.max_upload_bytes:
            raise InvalidArgument(
                f"the bundle is {len(data)} bytes, over this controller's {self.max_upload_bytes}-byte limit"
            )
        actual = hashlib.sha256(data).hexdigest()
        if actual != bundle_id:
            raise InvalidArgument(f"the uploaded bytes hash to {actual}, not to the bundle id {bundle_id}")
        if self.exists(bundle_id):
            return False
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{bundle_id[:16]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return True

    def stored(self) -> list[tuple[str, float]]:
        """(bundle id, last use time) of every stored bundle."""
        out: list[tuple[str, float]] = []
        for entry in os.scandir(self.directory):
            name = entry.name
            if name.endswith(".tar.gz") and BUNDLE_ID.match(name[: -len(".tar.gz")]):
                try:
                    out.append((name[: -len(".tar.gz")], entry.stat().st_mtime))
                except FileNotFoundError:
                    continue
        return out

    def collect(self, referenced: set[str], now: float | None = None) -> list[str]:
        """Delete bundles that no live job refers to and that were unused for an hour."""
        now = self._clock() if now is None else now
        doomed = bundles_to_delete(self.stored(), referenced, now)
        for bundle_id in doomed:
            self.path(bundle_id).unlink(missing_ok=True)
        return doomed

    def maybe_collect(self, db: Any, now: float, interval_s: float = GC_INTERVAL_S) -> list[str]:
        """Run ``collect`` at most once per ``interval_s`` of ``now`` (the control loop's clock).

        Ages are measured on this store's clock (wall time by default), like the files' mtimes.
        """
        if self._next_gc - interval_s <= now < self._next_gc:
            return []
        self._next_gc = now + interval_s
        if self._directory is None:
            return []  # nothing was ever stored
        with db.read() as cur:
            referenced = referenced_bundles(cur)
        doomed = self.collect(referenced)
        if doomed:
            with db.transaction() as cur:
                store.forget_bundle_owners(cur, doomed)
        return doomed


def referenced_bundles(cur: Any) -> set[str]:
    """Bundle ids named by jobs that have not finished."""
    return store.referenced_bundles(cur)
