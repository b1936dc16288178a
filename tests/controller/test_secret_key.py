"""The secrets key is made and checked without loading ``cryptography``; encryption loads it on
first use, and the key works with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from iris.cluster.controller.db import ControllerDB
from iris.cluster.controller.secrets import KEY_FILE, SecretStore, load_or_create_secret_key


def test_a_made_key_encrypts_and_decrypts_and_survives_a_restart(tmp_path: Path) -> None:
    db = ControllerDB(tmp_path / "c.db")
    store = SecretStore(db, load_or_create_secret_key(tmp_path / KEY_FILE))
    store.set("alice", "HF", "hf_secret", now=1.0)
    again = SecretStore(db, load_or_create_secret_key(tmp_path / KEY_FILE))
    assert again.values("alice", ["HF"]) == {"HF": "hf_secret"}
    db.close()


def test_a_damaged_key_file_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_bytes(b"not-a-key\n")
    db = ControllerDB(tmp_path / "c.db")
    with pytest.raises(ValueError, match="not a Fernet key"):
        SecretStore(db, load_or_create_secret_key(tmp_path / KEY_FILE))
    db.close()


def test_a_controller_without_secrets_does_not_load_cryptography(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from iris.cluster.controller.backend import BackendDescriptor, BackendKind\n"
        "from iris.cluster.controller.controller import create_controller\n"
        f"c = create_controller(BackendDescriptor('t', BackendKind.WORKER), state_dir={str(tmp_path)!r})\n"
        "c.stop()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cryptography', 're2')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
