"""``hycache serve`` as a process: help without torch, input errors, SIGTERM drains and exits 0."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from hycache.cli.main import main

from .conftest import HOST, MODEL


def test_serve_help_imports_neither_torch_nor_the_web_stack() -> None:
    code = (
        "import sys\n"
        "from hycache.cli.main import main\n"
        "assert main(['serve', '--help']) == 0\n"
        "heavy = [m for m in ('torch', 'fastapi', 'uvicorn', 'transformers') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--device-capacity" in out.stdout and "HEAVY []" in out.stdout


def test_serve_input_errors(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve"]) == 2
    assert "exactly one of --arch" in capsys.readouterr().err
    assert main(["serve", "--arch", "qwen3_5", "--model", str(model_dir)]) == 2
    assert main(["serve", "--model", str(model_dir), "--set", "vllm.block_size=8"]) == 2
    assert "is not run" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--model", str(model_dir), "--port", str(port)]) == 2
    assert "cannot listen" in capsys.readouterr().err
    assert main(["serve", "--model", str(tmp_path), "--port", "0"]) == 2
    assert "config.json" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
def test_sigterm_finishes_the_stream_in_flight_and_exits_0(model_dir: Path) -> None:
    port = _free_port()
    url = f"http://{HOST}:{port}"
    argv = [sys.executable, "-m", "hycache.cli.main", "serve", "--model", str(model_dir)]
    argv += ["--served-model-name", MODEL, "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the server did not come up"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        body = {"model": MODEL, "prompt": "hello " * 20, "max_tokens": 120, "stream": True}
        body["temperature"] = 0
        body["ignore_eos"] = True
        tokens: list[int] = []
        finish: list[str | None] = []
        started = threading.Event()

        def read() -> None:
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    choice = json.loads(line[6:])["choices"][0]
                    tokens.extend(choice["token_ids"])
                    finish.append(choice["finish_reason"])
                    started.set()

        reader = threading.Thread(target=read)
        reader.start()
        assert started.wait(30)
        proc.send_signal(signal.SIGTERM)
        reader.join(60)
        assert len(tokens) == 120 and finish[-1] == "length"  # the stream in flight finished
        assert proc.wait(60) == 0
        with pytest.raises(httpx.TransportError):  # and nothing listens any more
            httpx.get(f"{url}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
