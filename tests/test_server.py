"""`luce-chat serve` through the official `openai` client: a real server subprocess on 127.0.0.1 with the
bundled SmolLM2 (CPU, one thread), its answers checked against the same turns run in-process."""
from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

import luce_engine as le
from luce_engine import Sampling
from luce_tui.conversation import Conversation
from server_support import serve

CTX = 2048
GREEDY = Sampling.chat_default().updated(temperature=0)   # the server's defaults with temperature 0
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server():
    with serve("--max-ctx", str(CTX)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def conv():
    model = le.Model(le.default_model_path(), device="cpu", n_threads=1)
    return Conversation(le.Engine(model, n_ctx=CTX))


def in_process(conv, messages, sampling=GREEDY, max_tokens=24):
    conv.engine.truncate(0)
    return conv.respond(messages, sampling=sampling, max_tokens=max_tokens)


def stream_text(client, **kw):
    chunks = list(client.chat.completions.create(model="any", stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return text, finish, chunks


# -- answers ------------------------------------------------------------------------------------
def test_greedy_answer_equals_in_process_streaming_and_not(client, conv):
    expected = in_process(conv, QUESTION)
    r = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=24)
    assert r.choices[0].message.content == expected.text
    assert r.choices[0].finish_reason == "length" and r.object == "chat.completion"
    text, finish, chunks = stream_text(client, messages=QUESTION, temperature=0, max_tokens=24)
    assert text == expected.text and finish == ["length"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 5   # it streams


def test_a_stream_interval_sends_fast_steps_together(conv):
    """--stream-interval: the first token alone (TTFT), the steps within the interval after it in one
    chunk; the text is the same."""
    expected = in_process(conv, QUESTION)
    with serve("--max-ctx", str(CTX), "--stream-interval", "5000") as s:
        text, finish, chunks = stream_text(s.client(), messages=QUESTION, temperature=0, max_tokens=24)
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert text == expected.text and finish == ["length"]
    assert len(contents) == 2, contents   # the first step's text, then the other 23 tokens' at the end


def test_models_and_health(server, client):
    models = client.models.list().data
    assert [m.id for m in models] == ["SmolLM2-135M-Instruct.Q4_1"]
    health = httpx.get(server.root + "/health").json()
    assert health["status"] == "ok"


def test_usage_counts_and_cached_tokens(client, conv):
    expected = in_process(conv, QUESTION, max_tokens=8)
    r = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=8)
    assert r.usage.prompt_tokens == expected.prompt_tokens and r.usage.completion_tokens == 8
    assert r.usage.total_tokens == expected.prompt_tokens + 8
    again = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=8)
    assert again.usage.prompt_tokens_details.cached_tokens == expected.prompt_tokens - 1   # all but the last
    assert again.model_extra["luce"]["timings"]["prompt_n"] == 1
    chunks = list(client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=8,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8


def test_stop_strings_cut_the_answer(client, conv):
    full = in_process(conv, QUESTION).text
    word = full.split()[2]
    r = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=24, stop=[word, "zzz"])
    assert r.choices[0].message.content == full[:full.index(word)]
    assert r.choices[0].finish_reason == "stop"
    text, finish, _ = stream_text(client, messages=QUESTION, temperature=0, max_tokens=24, stop=word)
    assert text == full[:full.index(word)] and finish == ["stop"]


def test_max_tokens_and_max_completion_tokens_give_length(client):
    r = client.chat.completions.create(model="any", messages=QUESTION, max_completion_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


def test_seed_is_deterministic_and_equals_in_process(client, conv):
    kw = dict(temperature=1.0, top_p=0.9, seed=1234, max_tokens=16)
    a = client.chat.completions.create(model="any", messages=QUESTION, **kw).choices[0].message.content
    b = client.chat.completions.create(model="any", messages=QUESTION, **kw).choices[0].message.content
    assert a == b
    sampling = Sampling.chat_default().updated(temperature=1.0, top_p=0.9, seed=1234)
    assert a == in_process(conv, QUESTION, sampling, max_tokens=16).text
    c = client.chat.completions.create(model="any", messages=QUESTION, **dict(kw, seed=99)).choices[0].message.content
    assert c != a


def test_ten_turn_conversation_prefills_only_new_tokens(client):
    messages = [{"role": "system", "content": "You are brief."}]
    previous_total = 0
    for turn in range(10):
        messages.append({"role": "user", "content": f"Give me one word about the number {turn}."})
        r = client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=8)
        usage, prefilled = r.usage, r.model_extra["luce"]["timings"]["prompt_n"]
        assert prefilled == usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens
        if turn:
            # everything the engine saw last turn (prompt and reply) is reused
            assert usage.prompt_tokens_details.cached_tokens >= previous_total - 1, turn
            assert prefilled < 30, (turn, prefilled)   # the new user turn and the template's markup
        previous_total = usage.prompt_tokens + usage.completion_tokens
        messages.append({"role": "assistant", "content": r.choices[0].message.content})


# -- bad requests -------------------------------------------------------------------------------
@pytest.mark.parametrize("body, param", [
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": QUESTION, "temperature": "hot"}, "temperature"),
    ({"messages": QUESTION, "max_tokens": 0}, "max_tokens"),
    ({"messages": QUESTION, "top_p": 0}, "top_p"),
    ({"messages": QUESTION, "n": 2}, "n"),
    ({"messages": QUESTION, "logit_bias": {"1": 5}}, "logit_bias"),
    ({"messages": QUESTION, "frequency_penalty": 0.5}, "frequency_penalty"),
    ({"messages": QUESTION, "response_format": {"type": "json_schema", "json_schema": {}}}, "response_format"),
    ({"messages": QUESTION, "no_such_field": 1}, "no_such_field"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages[0].content[0]"),
    ({"messages": QUESTION, "tool_choice": "required"}, "tool_choice"),
    ({"messages": QUESTION, "stop": 5}, "stop"),
])
def test_bad_requests_get_a_400_naming_the_field(client, body, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/chat/completions", body={"model": "any", **body}, cast_to=object)
    err = e.value.body
    assert e.value.status_code == 400 and err["param"] == param and param in err["message"]
    assert err["type"] == "invalid_request_error"


def test_malformed_json_and_unknown_routes(server, client):
    r = httpx.post(server.url + "/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(server.url + "/chat/completions", content=b"[1, 2]")
    assert r.status_code == 400 and "object" in r.json()["error"]["message"]
    assert httpx.get(server.url + "/nothing").status_code == 404
    assert "error" in httpx.get(server.url + "/nothing").json()
    # the server carries on
    assert client.chat.completions.create(model="any", messages=QUESTION, max_tokens=2).usage.completion_tokens == 2


def test_prompt_over_the_context_is_a_400_with_the_numbers(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="any", messages=[{"role": "user", "content": "word " * 3000}])
    err = e.value.body
    assert err["code"] == "context_length_exceeded" and f"context holds {CTX}" in err["message"]
    assert "tokens" in err["message"]
    assert client.chat.completions.create(model="any", messages=QUESTION, max_tokens=2).choices[0].message.content


def test_fields_that_change_nothing_are_accepted(client):
    r = client.chat.completions.create(model="gpt-4o", messages=QUESTION, max_tokens=2, store=False, user="u1",
                                       metadata={"k": "v"}, service_tier="auto", n=1, logprobs=False)
    assert r.usage.completion_tokens == 2
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is the capital "},
                                          {"type": "text", "text": "of France?"}]}]
    a = client.chat.completions.create(model="any", messages=parts, temperature=0, max_tokens=6)
    b = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=6)
    assert a.choices[0].message.content == b.choices[0].message.content


# -- the API key, the queue, disconnects ----------------------------------------------------------
def test_api_key_is_required_when_set():
    with serve("--max-ctx", "512", "--api-key", "sesame") as s:
        with pytest.raises(openai.AuthenticationError) as e:
            s.client(api_key="wrong").chat.completions.create(model="any", messages=QUESTION, max_tokens=1)
        assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
        assert httpx.get(s.url + "/models").status_code == 401
        r = s.client(api_key="sesame").chat.completions.create(model="any", messages=QUESTION, max_tokens=1)
        assert r.usage.completion_tokens == 1
        assert httpx.get(s.root + "/health").status_code == 200   # for load balancers, no key


def _busy(s) -> dict:
    return httpx.get(s.root + "/health").json()


def _wait(cond, timeout=20.0, what="condition"):
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_queue_is_fifo_and_bounded_and_disconnect_cancels():
    long = dict(model="any", messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
                max_tokens=4000, temperature=0, stream=True)
    with serve("--max-ctx", "4096", "--max-queue", "1") as s:
        c = s.client()
        first = c.chat.completions.create(**long)
        next(iter(first))                                      # running
        results = {}

        def waiting():
            results["second"] = c.chat.completions.create(model="any", messages=QUESTION, max_tokens=3)

        t = threading.Thread(target=waiting)
        t.start()
        _wait(lambda: _busy(s)["waiting"] == 1, what="the second request to queue")
        with pytest.raises(openai.RateLimitError) as e:         # past the queue: 429 with Retry-After
            c.chat.completions.create(model="any", messages=QUESTION, max_tokens=3)
        assert e.value.status_code == 429 and int(e.value.response.headers["retry-after"]) >= 1
        t0 = time.monotonic()
        first.close()                                          # the client leaves: its generation stops
        t.join(30)
        assert results["second"].usage.completion_tokens == 3   # served next, long before 4000 tokens
        assert time.monotonic() - t0 < 15
        _wait(lambda: not _busy(s)["busy"], what="the engine to be idle")
        assert c.chat.completions.create(model="any", messages=QUESTION, max_tokens=2).usage.completion_tokens == 2


def test_non_streaming_disconnect_cancels():
    # greedy: the story runs past 120 tokens (over 2 s on one thread), where a sampled one could end
    # within the client's 1 s and the request would not be cut (seen once in CI)
    with serve("--max-ctx", "4096") as s:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.url + "/chat/completions", timeout=1.0, json={
                "messages": [{"role": "user", "content": "Write a very long story."}], "max_tokens": 4000,
                "temperature": 0})
        _wait(lambda: not _busy(s)["busy"], timeout=10, what="the cancelled request to stop")


def test_draft_through_the_server_equals_in_process_and_streams_provenance():
    """--draft default --spec chain: the server's reply is the in-process speculative reply (same loader, same
    engine), and its stream carries which text came from accepted drafts."""
    from luce_tui import cli, config, userconfig
    from luce_tui.remote import RemoteConversation

    # --spec chain: auto would rightly decode plainly on a CPU, and this test is about drafted text
    flags = ["--max-ctx", str(CTX), "--draft", "default", "--spec", "chain", "--device", "cpu", "--threads", "1"]
    args = cli.build_parser().parse_args(flags)
    userconfig.merge(args, {})
    runtime = cli.load(config.engine_settings(args))
    local = Conversation(runtime.engine, speculator=runtime.speculator).respond(QUESTION, sampling=GREEDY, max_tokens=48)
    assert local.n_accepted > 0
    with serve(*flags) as s:
        c = s.client()
        r = c.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=48)
        assert r.choices[0].message.content == local.text
        assert r.model_extra["luce"]["n_accepted"] == local.n_accepted and r.model_extra["luce"]["accept_length"]
        chunks = list(c.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=48,
                                                stream=True))
        spans = [sp for ch in chunks for sp in (ch.model_extra.get("luce") or {}).get("spans", [])]
        assert any(drafted for _, drafted in spans)
        # a luce client sees the same provenance (the app highlights it)
        remote, steps = RemoteConversation(s.url), []
        remote.run_turn(QUESTION, sampling=GREEDY, max_tokens=48, emit=steps.append)
        drafted_text = "".join(t for ev in steps if hasattr(ev, "spans") for t, d in ev.spans if d)
        assert drafted_text and remote.messages[-1]["content"] == local.text


def test_hybrid_model_reuses_the_prefix_across_requests(tmp_path):
    """A qwen35 (DeltaNet hybrid) target: its recurrent state cannot be cut back, so follow-ups reuse
    the context through the turn checkpoints; each turn still prefills only its new tokens."""
    from tools.tiny_gguf import TinyConfig, write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "hybrid.gguf", TinyConfig(arch="qwen35", n_layer=4, head_dim=32,
                                                                tokenizer_from=le.default_model_path()))
    with serve("--target", path, "--max-ctx", "1024") as s:
        c, messages = s.client(), []
        for turn in range(4):
            messages.append({"role": "user", "content": f"Turn {turn}: say something."})
            r = c.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=6)
            if turn:
                assert r.usage.prompt_tokens_details.cached_tokens >= previous, turn
                assert r.model_extra["luce"]["timings"]["prompt_n"] < 25
            previous = r.usage.prompt_tokens
            messages.append({"role": "assistant", "content": r.choices[0].message.content})
        # an edited earlier turn rewinds to the checkpoint before it; the answer equals a fresh server's
        edited = messages[:2] + [{"role": "user", "content": "Turn 1, edited."}]
        again = c.chat.completions.create(model="any", messages=edited, temperature=0, max_tokens=6)
    with serve("--target", path, "--max-ctx", "1024") as fresh:
        first = fresh.client().chat.completions.create(model="any", messages=edited, temperature=0, max_tokens=6)
    assert again.choices[0].message.content == first.choices[0].message.content


def _data(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("data: ")]


def test_keepalive_comments_during_a_long_prefill():
    with serve("--max-ctx", "4096", "--keepalive", "0.1") as s:
        body = {"messages": [{"role": "user", "content": "word " * 1200}], "max_tokens": 2, "stream": True}
        with httpx.stream("POST", s.url + "/chat/completions", json=body, timeout=60) as r:
            lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    first = json.loads(_data(lines)[0][6:])
    assert first["choices"][0]["delta"]["role"] == "assistant"
    # the prefill (~1,200 tokens on one thread) is far longer than the interval: comments after the role
    assert ": keep-alive" in lines[lines.index(_data(lines)[0]):lines.index("data: [DONE]")]


def test_keepalive_comments_while_a_stream_waits_in_the_queue():
    """A streaming request behind a running one gets its headers and a keep-alive every interval
    while it waits (agent gateways time out on a silent connection), then its reply as usual; one
    that leaves while waiting is dropped from the queue."""
    long = dict(model="any", messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
                max_tokens=4000, temperature=0, stream=True)
    body = {"messages": QUESTION, "max_tokens": 3, "temperature": 0, "stream": True}
    with serve("--max-ctx", "4096", "--keepalive", "0.2") as s:
        c = s.client()
        first = c.chat.completions.create(**long)
        next(iter(first))                                      # running
        with httpx.stream("POST", s.url + "/chat/completions", json=body, timeout=60) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            lines, stamps = r.iter_lines(), []
            for line in lines:
                assert line in (": keep-alive", ""), line   # nothing but comments while it waits
                if line:
                    stamps.append(time.monotonic())
                if len(stamps) == 4:
                    break
            assert _busy(s)["waiting"] == 1
            assert 0.4 < stamps[-1] - stamps[0] < 10, stamps   # at the interval (3 × 0.2 s), not a burst
            first.close()                                      # the running one leaves: this one is served
            rest = [line for line in lines if line]
        data = _data(rest)
        assert json.loads(data[0][6:])["choices"][0]["delta"]["role"] == "assistant" and rest[-1] == "data: [DONE]"
        chunks = [json.loads(d[6:]) for d in data[:-1]]
        text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
        assert text == c.chat.completions.create(model="any", messages=QUESTION, max_tokens=3,
                                                 temperature=0).choices[0].message.content
        assert [ch["choices"][0]["finish_reason"] for ch in chunks][-1] == "length"
        # a waiting stream whose client leaves is dropped: the queue empties while the first still runs
        first = c.chat.completions.create(**long)
        next(iter(first))
        with httpx.stream("POST", s.url + "/chat/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()                                 # (one iterator: dropping one closes the stream)
            assert next(line for line in lines if line) == ": keep-alive"
            assert _busy(s)["waiting"] == 1
        _wait(lambda: _busy(s)["waiting"] == 0, what="the waiting stream to leave the queue")
        assert _busy(s)["busy"]
        first.close()


def test_a_prompt_over_the_context_after_a_wait_is_an_error_event():
    """Once a waiting stream has its headers (status 200), a refusal comes as an OpenAI error event;
    the official client raises it."""
    long = dict(model="any", messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
                max_tokens=4000, temperature=0, stream=True)
    with serve("--max-ctx", "512", "--keepalive", "0.1") as s:
        c = s.client()
        first = c.chat.completions.create(**long)
        next(iter(first))
        errors = []

        def over():
            try:
                list(c.chat.completions.create(model="any", stream=True,
                                               messages=[{"role": "user", "content": "word " * 1000}]))
            except openai.APIError as e:
                errors.append(e)

        t = threading.Thread(target=over)
        t.start()
        _wait(lambda: _busy(s)["waiting"] == 1, what="the request to queue")
        time.sleep(0.3)                                        # past one interval: the stream is open
        first.close()
        t.join(30)
        assert errors and "context holds 512" in errors[0].message
        assert c.chat.completions.create(model="any", messages=QUESTION, max_tokens=2).usage.completion_tokens == 2
