"""Per-user secrets: stored encrypted (Fernet: AES-128-CBC + HMAC-SHA256) in the controller's
database, with the key in a 0600 file of the state directory, outside the database (a copy of
the database alone reveals nothing). Values leave the controller only inside the spec of an
attempt sent to the worker (or pod) that runs it; no API answer carries them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from iris.cluster.controller.db import ControllerDB
from iris.rpc.models import SecretInfo

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

KEY_FILE = "secrets.key"
log = logging.getLogger("iris.secrets")

_SCHEMA = """CREATE TABLE IF NOT EXISTS user_secrets (
    user TEXT NOT NULL,
    name TEXT NOT NULL,
    ciphertext BLOB NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (user, name)
)"""


def load_or_create_secret_key(path: Path) -> bytes:
    """The Fernet key in ``path``, created (mode 0600) when absent."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        return path.read_bytes().strip()
    key = _new_key()
    with os.fdopen(fd, "wb") as f:
        f.write(key + b"\n")
    return key


def _new_key() -> bytes:
    """A Fernet key (32 random bytes, URL-safe base64), made without importing ``cryptography``:
    a controller whose users keep no secrets never loads it (~6 MB and its import time)."""
    return base64.urlsafe_b64encode(os.urandom(32))


def _check_key(key: bytes) -> None:
    """Refuse a damaged key file at start, as Fernet itself would."""
    try:
        ok = len(base64.urlsafe_b64decode(key)) == 32
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"the controller's {KEY_FILE} is not a Fernet key (32 url-safe base64-encoded bytes)"
        )


class SecretStore:
    def __init__(self, db: ControllerDB, key: bytes | None = None) -> None:
        """``key``: a Fernet key (from ``load_or_create_secret_key``); a fresh one when None
        (an in-memory controller's secrets die with it anyway)."""
        self.db = db
        self._key = key or _new_key()
        _check_key(self._key)
        with db.transaction() as cur:
            cur.execute(_SCHEMA)

    @functools.cached_property
    def _fernet(self) -> Fernet:
        from cryptography.fernet import Fernet

        return Fernet(self._key)

    def set(self, user: str, name: str, value: str, now: float) -> None:
        token = self._fernet.encrypt(value.encode("utf-8", "surrogateescape"))
        with self.db.transaction() as cur:
            cur.execute(
                "INSERT INTO user_secrets (user, name, ciphertext, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (user, name) DO UPDATE SET ciphertext = excluded.ciphertext, updated_at = excluded.updated_at",
                (user, name, token, now, now),
            )

    def remove(self, user: str, name: str) -> bool:
        with self.db.transaction() as cur:
            cur.execute("DELETE FROM user_secrets WHERE user = ? AND name = ?", (user, name))
            return cur.rowcount > 0

    def list(self, user: str | None) -> list[SecretInfo]:
        """Names and times (never values), of one user or (None) of everyone."""
        sql = "SELECT user, name, created_at, updated_at FROM user_secrets"
        args: tuple[str, ...] = ()
        if user is not None:
            sql += " WHERE user = ?"
            args = (user,)
        with self.db.read() as cur:
            rows = cur.execute(sql + " ORDER BY user, name", args).fetchall()
        return [
            SecretInfo(name=r["name"], user=r["user"], created_at=r["created_at"], updated_at=r["updated_at"])
            for r in rows
        ]

    def missing(self, user: str, names: Iterable[str]) -> list[str]:
        """Which of ``names`` the user has no secret by."""
        wanted = sorted(set(names))
        if not wanted:
            return []
        with self.db.read() as cur:
            marks = ",".join("?" * len(wanted))
            rows = cur.execute(
                f"SELECT name FROM user_secrets WHERE user = ? AND name IN ({marks})", (user, *wanted)
            ).fetchall()
        have = {r["name"] for r in rows}
        return [n for n in wanted if n not in have]

    def values(self, user: str, names: Iterable[str]) -> dict[str, str]:
        """Decrypted values by name (a secret removed since, or undecryptable, is left out and logged)."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        with self.db.read() as cur:
            marks = ",".join("?" * len(wanted))
            rows = cur.execute(
                f"SELECT name, ciphertext FROM user_secrets WHERE user = ? AND name IN ({marks})",
                (user, *wanted),
            ).fetchall()
        from cryptography.fernet import InvalidToken

        out: dict[str, str] = {}
        for r in rows:
            try:
                out[r["name"]] = self._fernet.decrypt(bytes(r["ciphertext"])).decode(
                    "utf-8", "surrogateescape"
                )
            except InvalidToken:
                log.error(
                    "secret %s of %s cannot be decrypted: the controller's %s changed",
                    r["name"],
                    user,
                    KEY_FILE,
                )
        gone = [n for n in wanted if n not in out]
        if gone:
            log.warning("secret(s) %s of %s are gone: the attempt starts without them", ", ".join(gone), user)
        return out
