"""``pods/exec`` over a websocket with Kubernetes' channel protocol (v5/v4.channel.k8s.io).

Each binary message starts with a channel byte: 0 stdin, 1 stdout, 2 stderr, 3 error (a
``Status`` sent once the command ends), 255 close (v5: "no more stdin"). The process itself
comes from the exec handler the kubelet simulator registers with the server.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from iris.testing.fake_apiserver.websocket import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    encode_frame,
    read_message,
)

ExecHandler = Callable[[dict[str, Any], str, list[str], bool], "subprocess.Popen[bytes]"]
"""(pod, container, argv, with_stdin) -> a started process; raise ApiError when it cannot run."""

SUBPROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


def exit_status(argv: list[str], returncode: int) -> dict[str, Any]:
    if returncode == 0:
        return {"metadata": {}, "status": "Success"}
    code = returncode if returncode >= 0 else 128 - returncode
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {argv}, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class ExecSession:
    """Pumps one process's streams through one websocket until it exits (or the client leaves)."""

    def __init__(
        self, reader: BinaryIO, writer: BinaryIO, process: subprocess.Popen[bytes], argv: list[str]
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._process = process
        self._argv = argv
        self._write_lock = threading.Lock()

    def _send(self, opcode: int, payload: bytes) -> None:
        with self._write_lock:
            self._writer.write(encode_frame(opcode, payload))
            self._writer.flush()

    def _pump(self, stream: BinaryIO | None, channel: int) -> None:
        if stream is None:
            return
        try:
            for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
                self._send(OP_BINARY, bytes([channel]) + chunk)
        except OSError:
            pass

    def _receive(self) -> None:
        """Client -> process: stdin data, "close stdin", pings; a closed socket kills the command."""
        stdin = self._process.stdin
        try:
            while True:
                opcode, payload = read_message(self._reader)
                if opcode == OP_CLOSE:
                    break
                if opcode == OP_PING:
                    self._send(OP_PONG, payload)
                elif opcode == OP_BINARY and payload:
                    channel, data = payload[0], payload[1:]
                    if channel == STDIN and stdin is not None and data:
                        stdin.write(data)
                        stdin.flush()
                    elif channel == CLOSE and stdin is not None:
                        stdin.close()
                        stdin = None
        except (EOFError, OSError, ValueError):
            pass
        if self._process.poll() is None:
            self._process.kill()

    def run(self) -> None:
        pumps = [
            threading.Thread(target=self._pump, args=(self._process.stdout, STDOUT), daemon=True),
            threading.Thread(target=self._pump, args=(self._process.stderr, STDERR), daemon=True),
        ]
        for pump in pumps:
            pump.start()
        threading.Thread(target=self._receive, daemon=True).start()
        returncode = self._process.wait()
        for pump in pumps:
            pump.join(timeout=5)
        try:
            self._send(OP_BINARY, bytes([ERROR]) + json.dumps(exit_status(self._argv, returncode)).encode())
            self._send(OP_CLOSE, (1000).to_bytes(2, "big"))
        except OSError:
            pass
