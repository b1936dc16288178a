"""Signed controller→worker requests: HMAC-SHA256 with a per-worker secret, a timestamp and a nonce.

The controller holds one random master key; a worker's secret is ``HMAC(master, address)``, handed
to the worker in its registration answer (over the controller API, which authenticates workers
when tokens are configured). Every request the controller sends a worker carries::

    X-Iris-Timestamp: <unix seconds>   X-Iris-Nonce: <32 hex>   X-Iris-Signature: <64 hex>

where the signature covers the method, the request target (path and query), the timestamp, the
nonce and the SHA-256 of the body. The worker accepts a request only inside a bounded clock window
and only once per nonce, so a captured request cannot be replayed, and it rejects an unsigned one
before reading its body.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

TIMESTAMP_HEADER = "x-iris-timestamp"
NONCE_HEADER = "x-iris-nonce"
SIGNATURE_HEADER = "x-iris-signature"
SIGNED_HEADERS = (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)

# Kerberos and MUNGE use five minutes: wide enough for ordinary clock skew between machines.
DEFAULT_WINDOW_S = 300.0
DEFAULT_MAX_NONCES = 500_000
_NONCE_CHARS = frozenset("0123456789abcdef")


def new_master_key() -> bytes:
    return secrets.token_bytes(32)


def load_or_create_key(path: Path) -> bytes:
    """A 32-byte key kept in ``path`` (mode 0600, created on first use): it survives restarts and
    lives outside the database, so a copy of the database does not carry it."""
    try:
        key = bytes.fromhex(path.read_text().strip())
        if len(key) == 32:
            return key
    except (OSError, ValueError):
        pass  # missing or unreadable: a new key (workers pick it up when they register again)
    key = new_master_key()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, key.hex().encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return key


def worker_secret(master_key: bytes, address: str) -> bytes:
    """The secret the controller shares with the worker it dials at ``address``."""
    return hmac.new(master_key, b"iris-worker-rpc\x00" + address.encode(), hashlib.sha256).digest()


def _signature(secret: bytes, method: str, target: str, timestamp: str, nonce: str, body: bytes) -> str:
    message = "\n".join((method.upper(), target, timestamp, nonce, hashlib.sha256(body).hexdigest()))
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def sign_request(
    secret: bytes, method: str, target: str, body: bytes | None, *, now: float | None = None
) -> dict[str, str]:
    """Headers that authenticate one request to ``target`` (path plus ``?query``, as sent)."""
    timestamp = f"{time.time() if now is None else now:.3f}"
    nonce = secrets.token_hex(16)
    return {
        TIMESTAMP_HEADER: timestamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: _signature(secret, method, target, timestamp, nonce, body or b""),
    }


class RequestVerifier:
    """Checks signed requests against the secret this worker got at registration (thread-safe).

    Nonces seen inside the window are remembered (bounded: when the table is full of unexpired
    nonces, requests are refused until some expire, which only a flood of valid requests can cause).
    """

    def __init__(self, *, window_s: float = DEFAULT_WINDOW_S, max_nonces: int = DEFAULT_MAX_NONCES) -> None:
        self.window_s = window_s
        self._max_nonces = max_nonces
        self._secrets: tuple[bytes, ...] = ()
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return bool(self._secrets)

    def set_secret(self, secret: bytes) -> None:
        """The secret from the latest registration; the previous one stays valid beside it, so
        requests signed just before a re-registration are not refused."""
        with self._lock:
            if not self._secrets or self._secrets[0] != secret:
                self._secrets = (secret, *self._secrets[:1])

    def verify(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes, *, now: float | None = None
    ) -> str | None:
        """None when the request is authentic and fresh; otherwise one sentence saying why not."""
        timestamp = headers.get(TIMESTAMP_HEADER, "")
        nonce = headers.get(NONCE_HEADER, "")
        signature = headers.get(SIGNATURE_HEADER, "")
        if not (timestamp and nonce and signature):
            return "this worker only obeys its controller: the request is not signed"
        if len(nonce) != 32 or not _NONCE_CHARS.issuperset(nonce) or len(signature) != 64:
            return "the request signature is malformed"
        try:
            sent_at = float(timestamp)
        except ValueError:
            return "the request timestamp is not a number"
        now = time.time() if now is None else now
        if not abs(now - sent_at) <= self.window_s:
            return f"the request timestamp is more than {self.window_s:g}s away from this worker's clock"
        with self._lock:
            candidates = self._secrets
        if not candidates:
            return "this worker has not registered with a controller yet"
        if not any(
            hmac.compare_digest(signature, _signature(s, method, target, timestamp, nonce, body))
            for s in candidates
        ):
            return "the request signature is not valid for this worker"
        with self._lock:
            self._expire(now)
            if nonce in self._seen:
                return "the request was already received once (replay refused)"
            if len(self._seen) >= self._max_nonces:
                return "too many requests inside the replay window"
            self._seen[nonce] = sent_at + self.window_s
        return None

    def _expire(self, now: float) -> None:
        # A nonce whose timestamp has left the window can go: the clock check refuses its replay.
        # Insertion order is close to expiry order, so the oldest are at the front.
        while self._seen:
            nonce, expires = next(iter(self._seen.items()))
            if expires >= now:
                break
            del self._seen[nonce]
        if len(self._seen) >= self._max_nonces:
            for nonce in [n for n, expires in self._seen.items() if expires < now]:
                del self._seen[nonce]
