"""`luce-chat --remote URL`: -p and the plain REPL streaming from OpenAI-compatible servers, ours
(`luce-chat serve`, where the answer must equal the in-process one) and llama-cpp-python's own
(`python -m llama_cpp.server`, an independent implementation) on the same GGUF."""
from __future__ import annotations

import subprocess
import sys

import openai
import pytest

import luce_engine as le
from server_support import COMMON, llama_cpp_server, serve

Q = "What is the capital of France?"


def luce(*args, input=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "luce_tui", *args], input=input, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def server():
    with serve("--max-ctx", "2048") as s:
        yield s


def test_p_through_our_server_equals_in_process(server):
    local = luce("-p", Q, "--temp", "0", "--max-tokens", "24", "--max-ctx", "2048", *COMMON)
    remote = luce("--remote", server.url, "-p", Q, "--temp", "0", "--max-tokens", "24", "--stats")
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    assert remote.stdout == local.stdout and remote.stdout.strip()
    stats = remote.stderr.strip().splitlines()[-1]
    assert "generated 24 tok" in stats and "finish: length" in stats and "prompt 37 tok" in stats


def test_plain_repl_keeps_the_conversation_on_the_server(server):
    r = luce("--remote", server.url, "--plain", "--temp", "0", "--max-tokens", "8",
             input="Hello there\nAnd then?\n/stats\n/model\n")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    stats = next(line for line in lines if line.startswith("last reply:"))
    # the second turn reused the first one's context on the server
    reused = int(stats.split("(")[1].split()[0].replace(",", ""))
    assert reused > 20
    assert any("SmolLM2-135M-Instruct" in line and server.url in line for line in lines)


def test_errors_are_clear_one_liners(server):
    r = luce("--remote", "http://127.0.0.1:9/v1", "-p", Q)
    assert r.returncode == 2 and r.stderr.startswith("luce-chat: error: cannot reach the server")
    assert "Traceback" not in r.stderr
    with serve("--max-ctx", "512", "--api-key", "sesame") as s:
        r = luce("--remote", s.url, "-p", Q, "--api-key", "wrong")
        assert r.returncode == 2 and "refused the API key (401)" in r.stderr and "Traceback" not in r.stderr
        ok = luce("--remote", s.url, "-p", Q, "--api-key", "sesame", "--max-tokens", "3")
        assert ok.returncode == 0 and ok.stdout.strip()
    r = luce("--api-key", "k", "-p", Q)
    assert r.returncode == 2 and "--remote" in r.stderr


def test_a_dropped_stream_keeps_the_partial_reply():
    with serve("--max-ctx", "4096") as s:
        p = subprocess.Popen([sys.executable, "-m", "luce_tui", "--remote", s.url, "-p", "Write a long story.",
                              "--max-tokens", "3000", "--temp", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        first = p.stdout.read(5)
        s.proc.kill()   # the server dies mid-stream
        out, err = p.communicate(timeout=30)
    assert p.returncode == 2 and (first + out).strip()
    assert "closed the stream" in err and "Traceback" not in err


def test_p_against_llama_cpp_python_server():
    path = le.default_model_path()
    with llama_cpp_server(path) as url:
        r = luce("--remote", url, "-p", Q, "--temp", "0", "--max-tokens", "16", "--stats")
        assert r.returncode == 0, r.stderr
        # the same request made by the official client gives the same greedy text
        c = openai.OpenAI(base_url=url, api_key="none")
        model = c.models.list().data[0].id
        direct = c.chat.completions.create(model=model, messages=[{"role": "user", "content": Q}], temperature=0,
                                           max_tokens=16, top_p=0.95,
                                           extra_body={"top_k": 40, "min_p": 0.05, "repeat_penalty": 1.05})
        assert r.stdout == direct.choices[0].message.content + "\n"
        assert "generated 16 tok" in r.stderr
        plain = luce("--remote", url, "--plain", "--temp", "0", "--max-tokens", "6", input="Hi\nAnd you?\n")
        assert plain.returncode == 0 and len(plain.stdout.strip().splitlines()) >= 2
