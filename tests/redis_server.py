"""A real ``redis-server`` of a test's own on a free loopback port (no persistence;
``maxmemory`` with ``allkeys-lru`` when asked), that can be SIGKILLed and restarted on the
same port. The ``redis_server`` fixture in ``tests/conftest.py`` starts and stops them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

STARTUP_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """One redis-server process on 127.0.0.1:``port``."""

    def __init__(self, directory: Path, maxmemory: str | None = None) -> None:
        self.directory = directory
        self.port = free_port()
        self.maxmemory = maxmemory
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
        ]  # fmt: skip
        if self.maxmemory is not None:
            args += ["--maxmemory", self.maxmemory, "--maxmemory-policy", "allkeys-lru"]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL: the server dies with everything it held."""
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STARTUP_S)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STARTUP_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STARTUP_S)
            self.process = None
