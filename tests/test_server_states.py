"""`luce-chat serve` keeps its prefix reuse across restarts in engine state files (--state-dir):
real server processes with the bundled SmolLM2 through the official `openai` client, stopped,
killed with SIGKILL while a state file is written, and started again on the same directory;
their greedy replies are compared with a server that never restarted."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import luce_engine as le
from luce_tui.conversation import Conversation
from luce_tui.server.states import ServerStates
from server_support import serve
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

CTX = 2048
MAX = 16   # every reply is cut by max_tokens: the saved context is exactly prompt + reply
STORY = ("Here is a note about the history of the city of Lyon, its rivers, its silk weavers and its "
         "food, which the reader should keep in mind for the questions that follow. ") * 6


def conversation(first: str, replies: list[str], questions: list[str]) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": first}]
    for reply, q in zip(replies, questions):
        msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": q}]
    return msgs


FIRST = STORY + "What is the note about?"
NEXT = ["Name one river of the city.", "And what did the weavers make?"]


def ask(client, messages, stream=False, max_tokens=MAX):
    """(text, usage, luce extension) of one greedy request."""
    if not stream:
        r = client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=max_tokens)
        return r.choices[0].message.content, r.usage, r.model_extra["luce"]
    text, usage, luce = [], None, None
    for c in client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=max_tokens,
                                            stream=True, stream_options={"include_usage": True}):
        if c.choices:
            text.append(c.choices[0].delta.content or "")
            luce = (c.model_extra or {}).get("luce") or luce
        if c.usage:
            usage = c.usage
    return "".join(text), usage, luce


@pytest.fixture(scope="module")
def reference():
    """The three turns on a server that keeps its context in memory only and never restarts."""
    replies, usages = [], []
    with serve("--max-ctx", str(CTX)) as s:
        c = s.client()
        for turn in range(3):
            text, usage, _ = ask(c, conversation(FIRST, replies, NEXT[:turn]))
            replies.append(text)
            usages.append(usage)
    assert all(u.completion_tokens == MAX for u in usages)
    return replies, usages


def state_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".state"))


def test_a_restarted_server_continues_from_its_saved_prefix(tmp_path, reference):
    replies, usages = reference
    with serve("--max-ctx", str(CTX), "--state-dir", str(tmp_path)) as s:
        text, usage, luce = ask(s.client(), conversation(FIRST, [], []), stream=True)
        assert text == replies[0] and luce["restored"] is None
    assert state_files(tmp_path) == ["1.state"]   # SIGTERM: the save after the reply is complete

    with serve("--max-ctx", str(CTX), "--state-dir", str(tmp_path)) as s:   # a new process
        text, usage, luce = ask(s.client(), conversation(FIRST, replies[:1], NEXT[:1]), stream=True)
        assert text == replies[1]   # greedy: the same reply as the server that never stopped
        turn1 = usages[0].prompt_tokens + usages[0].completion_tokens
        assert usage.prompt_tokens_details.cached_tokens == turn1 == luce["restored"]["n_tokens"]
        assert usages[1].prompt_tokens_details.cached_tokens == turn1   # what the live context gives
        assert luce["timings"]["prompt_n"] == usage.prompt_tokens - turn1   # only the new tokens
        assert luce["restored"]["file"] == "1.state" and luce["restored"]["ms"] > 0
        # the next turn extends the live context: nothing to load
        text, usage, luce = ask(s.client(), conversation(FIRST, replies[:2], NEXT[:2]))
        assert text == replies[2] and luce["restored"] is None
        assert usage.prompt_tokens_details.cached_tokens == usages[1].prompt_tokens + MAX
    assert state_files(tmp_path) == ["1.state"]   # appended to, not a file per turn
    assert not any("ignored" in line for line in s.stderr)


def kill_during_a_write(proc, d: Path, timeout: float = 30.0) -> bool:
    """SIGKILL the server the moment a state file's temporary appears (a full write under way);
    True if it was caught, False if the write was over before we saw it (then killed anyway)."""
    deadline = time.monotonic() + timeout
    caught = False
    while time.monotonic() < deadline:
        if any(".tmp-" in n for n in os.listdir(d)):
            caught = True
            break
        if any(n.endswith(".state") for n in os.listdir(d)):
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return caught


def test_sigkill_while_saving_loads_no_half_file(tmp_path, reference):
    replies, usages = reference
    caught = 0
    for attempt in range(3):
        d = tmp_path / f"run{attempt}"
        d.mkdir()
        with serve("--max-ctx", str(CTX), "--state-dir", str(d)) as s:
            assert ask(s.client(), conversation(FIRST, [], []))[0] == replies[0]
            caught += kill_during_a_write(s.proc, d)
        temporaries = [n for n in os.listdir(d) if ".tmp-" in n]
        with serve("--max-ctx", str(CTX), "--state-dir", str(d)) as s:
            assert not any(".tmp-" in n for n in os.listdir(d))   # a dead writer's temporary is removed
            text, usage, luce = ask(s.client(), conversation(FIRST, replies[:1], NEXT[:1]))
            assert text == replies[1]
            if temporaries:   # killed in the write: nothing complete to load, all is prefilled
                assert luce["restored"] is None and usage.prompt_tokens_details.cached_tokens == 0
            else:
                assert luce["restored"]["n_tokens"] == usages[0].prompt_tokens + MAX
        if caught:
            break
    assert caught, "the state write was never caught under way (too fast to kill in it)"


def test_foreign_and_damaged_files_are_reported_once_and_kept(tmp_path, reference):
    replies, usages = reference
    model = le.Model(le.default_model_path(), device="cpu", n_threads=1)
    eng = le.Engine(model, n_ctx=CTX)
    prompt = Conversation(eng).encode(conversation(FIRST, replies[:1], NEXT[:1]))   # as the server encodes it
    # every file below holds a prefix of the prompt, so only the checks keep the server from using it
    other = le.Engine(model, n_ctx=1024)   # another context size
    other.prefill(prompt[:40])
    other.save_state(tmp_path / "5.state")
    eng.prefill(prompt[:60])
    eng.save_state(tmp_path / "6.state")
    data = bytearray((tmp_path / "6.state").read_bytes())
    data[len(data) // 2] ^= 0xFF   # inside the K/V rows: the header and the token ids still read
    (tmp_path / "6.state").write_bytes(bytes(data))
    (tmp_path / "7.state").write_bytes(b"not a state file at all" * 100)
    q8 = le.Engine(model, n_ctx=CTX, cache_type_k="q8_0", cache_type_v="q8_0")   # another KV type
    q8.prefill(prompt[:50])
    q8.save_state(tmp_path / "8.state")
    tiny = le.Model(write_tiny_gguf(tmp_path / "tiny.gguf", TinyConfig(tokenizer_from=le.default_model_path())),
                    device="cpu", n_threads=1)   # another model with the same tokenizer
    tiny_eng = le.Engine(tiny, n_ctx=CTX)
    tiny_eng.prefill(prompt[:70])
    tiny_eng.save_state(tmp_path / "9.state")
    eng.truncate(0)
    eng.prefill(prompt[:80])
    eng.save_state(tmp_path / "10.state")
    data = (tmp_path / "10.state").read_bytes()
    (tmp_path / "10.state").write_bytes(data[:len(data) * 3 // 4])   # truncated (a copy cut short)
    before = {n: (tmp_path / n).read_bytes() for n in state_files(tmp_path)}
    with serve("--max-ctx", str(CTX), "--state-dir", str(tmp_path)) as s:
        for _ in range(3):   # each unusable file is tried at most once, then left alone
            text, usage, luce = ask(s.client(), conversation(FIRST, replies[:1], NEXT[:1]))
            assert text == replies[1]
            assert luce["restored"] is None and usage.prompt_tokens_details.cached_tokens in (0, usage.prompt_tokens - 1)
        time.sleep(0.5)   # the log lines of the loads
        lines = list(s.stderr)
    log = "".join(lines)
    for name in before:
        assert sum(f"/{name} " in line for line in lines) == 1, log   # once, however many requests
        assert (tmp_path / name).read_bytes() == before[name]   # kept as it was
    for name in ("5", "8", "9"):
        assert f"{name}.state was saved by another model or context" in log
    assert set(state_files(tmp_path)) == set(before) | {"11.state"}   # a new file, not over one
    assert "Traceback" not in log


def test_the_disk_budget_evicts_the_oldest_and_restore_takes_the_longest_prefix(tmp_path):
    model = le.Model(le.default_model_path(), device="cpu", n_threads=1)
    eng = le.Engine(model, n_ctx=512)
    tok = model.tokenizer
    convs = [tok.encode(f"{w} " * 30, parse_special=False) for w in ("apple", "river", "stone")]
    log: list[str] = []
    states = ServerStates(tmp_path, eng, budget_gib=1.0, report=log.append)
    eng.prefill(convs[0])
    assert states.save() == 1
    size = (tmp_path / "1.state").stat().st_size
    states.budget = int(2.5 * size)   # two files fit, three do not
    for sid, ids in enumerate(convs[1:], 2):
        time.sleep(0.01)
        eng.truncate(0)
        eng.prefill(ids)
        assert states.save() == sid
    assert state_files(tmp_path) == ["2.state", "3.state"] and not log   # the oldest went
    eng.prefill(tok.encode(" more", parse_special=False))
    assert states.save() == 3 and state_files(tmp_path) == ["2.state", "3.state"]   # appended
    # a fresh process: the file that shares most with the prompt is loaded, and only when it beats
    # what the live context shares
    eng2 = le.Engine(model, n_ctx=512)
    again = ServerStates(tmp_path, eng2, budget_gib=1.0, report=log.append)
    prompt = convs[1] + tok.encode(" question", parse_special=False)
    r = again.restore(prompt, 0)
    assert r.file == "2.state" and r.n_tokens == len(convs[1]) and eng2.tokens == convs[1]
    assert again.restore(prompt, len(convs[1])) is None
    assert again.restore(convs[2][:10], 0).n_tokens == 10 and eng2.tokens == convs[2][:10]   # cut back
    assert not log


@pytest.fixture(scope="module")
def hybrid_model(tmp_path_factory):
    """A tiny qwen35 (DeltaNet hybrid) with SmolLM2's tokenizer: random weights, real file."""
    return write_tiny_gguf(tmp_path_factory.mktemp("hybrid") / "hybrid.gguf",
                           TinyConfig(arch="qwen35", n_layer=4, head_dim=32, tokenizer_from=le.default_model_path()))


def test_a_restarted_hybrid_server_continues_from_its_saved_prefix(tmp_path, hybrid_model):
    """A hybrid target takes a file only whole (its recurrent state cannot be cut back); the follow-up
    after a restart prefills only its new tokens and answers as a server that never stopped, and a
    retry of it reuses the restored context as the live server reuses its turn checkpoint."""
    flags = ("--target", hybrid_model, "--max-ctx", "1024")
    first = [{"role": "user", "content": FIRST}]

    def follow(reply: str) -> list[dict]:
        return first + [{"role": "assistant", "content": reply}, {"role": "user", "content": NEXT[0]}]

    with serve(*flags) as s:   # the reference: never restarted, no state files
        c = s.client()
        reply1, usage1, _ = ask(c, first, max_tokens=1)   # one token: its text reads back as that token
        reply2, usage2, _ = ask(c, follow(reply1), max_tokens=8)
    turn1 = usage1.prompt_tokens + usage1.completion_tokens
    assert usage2.prompt_tokens_details.cached_tokens == turn1, "the reply did not read back as its tokens"

    with serve(*flags, "--state-dir", str(tmp_path)) as s:
        assert ask(s.client(), first, max_tokens=1)[0] == reply1
    assert state_files(tmp_path) == ["1.state"]
    with serve(*flags, "--state-dir", str(tmp_path)) as s:
        c = s.client()
        text, usage, luce = ask(c, follow(reply1), max_tokens=8, stream=True)
        assert text == reply2
        assert usage.prompt_tokens_details.cached_tokens == turn1 == luce["restored"]["n_tokens"]
        assert luce["timings"]["prompt_n"] == usage.prompt_tokens - turn1
        text, usage, luce = ask(c, follow(reply1), max_tokens=8)   # the same request again (a retry)
        assert text == reply2 and luce["restored"] is None
        assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1
    assert not any("ignored" in line for line in s.stderr)


def test_a_restored_hybrid_context_cuts_back_to_its_end_without_recomputing_it(tmp_path, hybrid_model):
    """A loaded context has no turn checkpoint of its own; restore() takes one at its end, so an edit
    or retry of the turn after it recomputes only what follows the file, as on the live engine."""
    model = le.Model(hybrid_model, device="cpu", n_threads=1)
    tok = model.tokenizer
    saved = tok.encode("word " * 100, parse_special=False)
    more = tok.encode(" and then a few more words", parse_special=False)
    live = le.Engine(model, n_ctx=512)
    live.prefill(saved)
    live.checkpoint()   # the turn boundary, as the chat core takes it
    log: list[str] = []
    assert ServerStates(tmp_path, live, budget_gib=1.0, report=log.append).save() == 1

    eng = le.Engine(model, n_ctx=512)
    states = ServerStates(tmp_path, eng, budget_gib=1.0, report=log.append)
    assert states.restore(saved[:50], 0) is None   # only part of the file: the state cannot be cut back
    assert states.restore(saved, 0) is None        # all of the prompt: nothing left to evaluate after it
    assert eng.tokens == []
    assert states.restore(saved + more, 0).n_tokens == len(saved) and eng.tokens == saved
    greedy = le.Sampling(temperature=0)
    replies = []
    for e in (live, eng):
        e.prefill(more)
        e.checkpoint()
        replayed = e.stats()["n_replayed_tokens"]
        e.truncate(len(saved) + 2)   # a retry of the turn after the file
        assert e.stats()["n_replayed_tokens"] - replayed == 2
        replies.append([t for r in e.generate(more[2:], sampling=greedy, max_tokens=6) for t in r.tokens])
    assert replies[0] == replies[1] and not log
