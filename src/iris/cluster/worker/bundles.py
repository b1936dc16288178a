"""The worker's bundle cache: fetch a workspace bundle from the controller once, verify, unpack.

Bundles live under ``<worker state>/bundles/<sha256>.tar.gz``. Attempts that need the same bundle
at the same time download it once: the first takes a per-bundle file lock, the others wait on it
and then find the file. A file is only ever renamed into place after its hash checked out.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

from iris.cluster.runtime.subprocess_runtime import PreparationError
from iris.cluster.worker.build_lock import Cancelled, hash_lock
from iris.cluster.worker.safe_unpack import MAX_BYTES, MAX_MEMBERS, UnpackCancelled, UnsafeBundle, safe_unpack

BUNDLE_ID = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_KEEP = 64
_CHUNK = 1 << 20


class BundleError(PreparationError):
    """The bundle could not be fetched or unpacked; the message is one sentence for the task log."""


class BundleCache:
    def __init__(
        self,
        directory: Path,
        controller_url: str,
        *,
        token: str | None = None,
        keep: int = DEFAULT_KEEP,
        timeout_s: float = 300.0,
        max_unpack_bytes: int = MAX_BYTES,
        max_unpack_entries: int = MAX_MEMBERS,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.controller_url = controller_url.rstrip("/")
        self._token = token
        self._keep = keep
        self._timeout_s = timeout_s
        self.max_unpack_bytes = max_unpack_bytes
        self.max_unpack_entries = max_unpack_entries

    def path(self, bundle_id: str) -> Path:
        return self.directory / f"{bundle_id}.tar.gz"

    def fetch(
        self,
        bundle_id: str,
        *,
        log: Callable[[str], None] = lambda _line: None,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> Path:
        """The cached archive, downloading (once) and verifying it if needed. Raises BundleError or Cancelled."""
        if not BUNDLE_ID.match(bundle_id):
            raise BundleError(f"could not fetch bundle {bundle_id!r}: not a sha256 bundle id")
        path = self.path(bundle_id)
        if path.exists():
            os.utime(path)
            return path
        with hash_lock(self.directory / f".{bundle_id}.lock", cancelled):
            if path.exists():
                log(f"bundle {bundle_id[:12]} was fetched meanwhile by another attempt")
                os.utime(path)
                return path
            size = self._download(bundle_id, path, cancelled)
            log(f"fetched bundle {bundle_id[:12]} ({size} bytes)")
        self._prune(keep_id=bundle_id)
        return path

    def _download(self, bundle_id: str, path: Path, cancelled: Callable[[], bool]) -> int:
        url = f"{self.controller_url}/api/v1/bundles/{bundle_id}"
        headers = {"authorization": f"Bearer {self._token}"} if self._token else {}
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{bundle_id[:16]}.", suffix=".part")
        digest = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    with httpx.stream("GET", url, headers=headers, timeout=self._timeout_s) as resp:
                        if resp.status_code != 200:
                            resp.read()
                            raise BundleError(
                                f"could not fetch bundle {bundle_id} from {url}: HTTP {resp.status_code} {_error_text(resp)}"
                            )
                        for chunk in resp.iter_bytes(_CHUNK):
                            if cancelled():
                                raise Cancelled()
                            out.write(chunk)
                            digest.update(chunk)
                            size += len(chunk)
                except httpx.HTTPError as exc:
                    raise BundleError(f"could not fetch bundle {bundle_id} from {url}: {exc}") from None
            if digest.hexdigest() != bundle_id:
                raise BundleError(
                    f"could not fetch bundle {bundle_id}: the downloaded bytes hash to {digest.hexdigest()}"
                )
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return size

    def _prune(self, keep_id: str) -> None:
        """Keep the ``keep`` most recently used bundles."""
        entries = []
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".tar.gz") and entry.name != f"{keep_id}.tar.gz":
                try:
                    entries.append((entry.stat().st_mtime, entry.path))
                except FileNotFoundError:
                    continue
        entries.sort(reverse=True)
        for _, stale in entries[max(0, self._keep - 1) :]:
            Path(stale).unlink(missing_ok=True)

    def unpack(
        self, bundle_id: str, archive: Path, destination: Path, cancelled: Callable[[], bool] = lambda: False
    ) -> int:
        """Extract into ``destination``; refuses links and anything that would land outside it, and
        stops past the byte and entry bounds or as soon as the attempt ends (safe_unpack).
        Returns the file count."""
        try:
            return safe_unpack(
                archive,
                destination,
                max_bytes=self.max_unpack_bytes,
                max_entries=self.max_unpack_entries,
                cancelled=cancelled,
            )
        except UnpackCancelled:
            raise Cancelled() from None
        except (UnsafeBundle, tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"could not unpack bundle {bundle_id}: {exc}") from None


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        return str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return resp.text[:200]
