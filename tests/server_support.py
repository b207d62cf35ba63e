"""A real `luce-chat serve` in a subprocess on 127.0.0.1 (a free port, picked by the server itself)."""
from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

COMMON = ["--device", "cpu", "--threads", "1"]


class Server:
    def __init__(self, proc: subprocess.Popen, url: str):
        self.proc, self.url = proc, url   # url: http://127.0.0.1:PORT/v1
        self.stderr: list[str] = []

    def client(self, **kw):
        import openai

        return openai.OpenAI(base_url=self.url, api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)

    @property
    def root(self) -> str:
        return self.url.removesuffix("/v1")


@contextlib.contextmanager
def serve(*flags: str, timeout: float = 60.0):
    """Start the server with flags (besides COMMON) and yield a Server; stop it afterwards. Without
    --state-dir it keeps no state files (a module's server starts before the tests' data directory
    is set up, and must not reuse what an earlier run saved)."""
    if "--state-dir" not in flags:
        flags = (*flags, "--no-state-cache")
    proc = subprocess.Popen([sys.executable, "-m", "luce_tui", "serve", "--port", "0", *COMMON, *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url, lines = None, []
    deadline = time.monotonic() + timeout
    while url is None:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the server did not start:\n" + "".join(lines))
            continue
        lines.append(line)
        m = re.search(r"on (http://[\d.]+:\d+/v1)", line)
        url = m.group(1) if m else None
    server = Server(proc, url)
    server.stderr = lines
    # keep reading stderr so the server never blocks on a full pipe; what it says stays in .stderr
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    try:
        yield server
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# `python -m llama_cpp.server` with llama.cpp's extra buffer types off (reference.py): on CPUs with
# AMX llama.cpp takes its AMX matmul, which crashes on batches of SmolLM2's prompts (seen on a Xeon
# with AMX, llama-cpp-python 0.3.36: every streamed reply cut off).
_SERVER_WITHOUT_EXTRA_BUFFERS = (
    "import runpy, sys\n"
    f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
    "from reference import llama_without_extra_buffers\n"
    "with llama_without_extra_buffers():\n"
    "    runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)\n")


@contextlib.contextmanager
def llama_cpp_server(model_path: str, *, n_ctx: int = 2048, timeout: float = 60.0):
    """llama-cpp-python's own OpenAI server (`python -m llama_cpp.server`) on the same GGUF: an
    independent implementation of the API. Yields its /v1 URL."""
    import httpx

    from reference import cpu_has_amx

    port = free_port()
    launch = ["-c", _SERVER_WITHOUT_EXTRA_BUFFERS] if cpu_has_amx() else ["-m", "llama_cpp.server"]
    proc = subprocess.Popen([sys.executable, *launch, "--model", model_path, "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if httpx.get(url + "/models", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("llama_cpp.server did not start")
            time.sleep(0.2)
        yield url
    finally:
        stop(proc)
