"""Simulated worker daemons for controller benchmarks: many workers, one asyncio loop.

Each simulated worker listens on its own loopback port and answers the real Reconcile RPC the
way an idle, infinitely fast machine would: every attempt it is asked to run succeeds at once
(its process "ran" and is released), and stops are acknowledged as released. Only the worker
side is simulated; the controller under test is the real one.

Run the fleet in its own process (``SimulatedFleetProcess``, or ``python -m
iris.testing.simulated_workers``) when measuring: in the controller's process it would compete
for the GIL with the controller's own threads, as real workers never do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field


@dataclass
class SimulatedFleet:
    count: int
    host: str = "127.0.0.1"
    ports: list[int] = field(default_factory=list)
    reconciles: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _servers: list[asyncio.AbstractServer] = field(default_factory=list)

    def worker_id(self, index: int) -> str:
        return f"sim-{index}"

    def address(self, index: int) -> str:
        return f"{self.host}:{self.ports[index]}"

    def start(self) -> SimulatedFleet:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._serve_all())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="simulated-workers", daemon=True)
        self._thread.start()
        ready.wait(60)
        return self

    async def _serve_all(self) -> None:
        for index in range(self.count):
            server = await asyncio.start_server(
                self._handler(self.worker_id(index)), self.host, 0, backlog=64
            )
            self._servers.append(server)
            self.ports.append(server.sockets[0].getsockname()[1])

    def _handler(self, worker_id: str):  # noqa: ANN202 - an asyncio connection callback
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":", 1)[1])
                    body = await reader.readexactly(length) if length else b""
                    payload = (
                        self._reconcile(worker_id, body)
                        if head.startswith(b"POST /reconcile")
                        else b'{"ok": true}'
                    )
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                        + str(len(payload)).encode()
                        + b"\r\n\r\n"
                        + payload
                    )
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        return handle

    def _reconcile(self, worker_id: str, body: bytes) -> bytes:
        self.reconciles += 1
        request = json.loads(body)
        observations = []
        for desired in request["attempts"]:
            if desired["intent"] == "run":
                observations.append(
                    {
                        "attempt_uid": desired["attempt_uid"],
                        "state": "SUCCEEDED",
                        "exit_code": 0,
                        "runtime_released": True,
                    }
                )
            else:
                observations.append(
                    {"attempt_uid": desired["attempt_uid"], "state": "KILLED", "runtime_released": True}
                )
        return json.dumps(
            {"worker_id": worker_id, "observations": observations, "health": {"healthy": True}}
        ).encode()

    def stop(self) -> None:
        if self._loop is None:
            return
        for server in self._servers:
            self._loop.call_soon_threadsafe(server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)


class SimulatedFleetProcess:
    """The same fleet in a child process; ``address(i)`` and ``worker_id(i)`` as on ``SimulatedFleet``."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.ports: list[int] = []
        self._proc: subprocess.Popen[str] | None = None

    def worker_id(self, index: int) -> str:
        return f"sim-{index}"

    def address(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index]}"

    def start(self) -> SimulatedFleetProcess:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "iris.testing.simulated_workers", "--count", str(self.count)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        self.ports = json.loads(self._proc.stdout.readline())["ports"]
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGTERM)
            self._proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve N simulated workers; prints their ports as JSON.")
    parser.add_argument("--count", type=int, required=True)
    args = parser.parse_args()
    fleet = SimulatedFleet(args.count).start()
    print(json.dumps({"ports": fleet.ports}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
