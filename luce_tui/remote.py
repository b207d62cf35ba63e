"""`--remote URL`: the conversation on any OpenAI-compatible server instead of the in-process engine.

RemoteConversation has the chat core's turn interface (run_turn emitting the events of events.py,
messages, system, cancel, reset, retry_history), so -p, the plain REPL and the app drive it as they
drive Conversation. Messages go out as the server expects them: the system prompt first, each
attachment rendered into its message as text (conversation.render_content). The reply streams
back over SSE: content deltas become Steps (with their drafted spans when the server is luce-chat,
from its `luce` extension), reasoning_content becomes a `<think>` block, and the usage and timings
the server reports (luce's or llama.cpp's) fill the TurnResult. Sampling goes as the standard
fields plus top_k, min_p and repeat_penalty, which llama.cpp, vLLM and luce-chat accept.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Callable

import httpx

from luce_tui import events
from luce_tui.conversation import ConversationError, TurnResult, render_content

FINISH = {"stop": "eos", "length": "length", "tool_calls": "eos", "content_filter": "stop"}


class RemoteError(Exception):
    """The server could not be reached, refused the request, or broke the stream (the text says which)."""


class RemoteModel:
    """What the front ends show about the model: its id on the server (GET /v1/models)."""

    def __init__(self, url: str, name: str, n_ctx: int | None = None):
        self.url, self.name, self.path, self.n_ctx = url, name, url, n_ctx
        self.arch, self.device = "remote", url
        self.n_ctx_train = n_ctx or 0
        self.tokenizer = None   # the server tokenizes; attachment sizes are estimates (attachments.from_text)


class RemoteEngine:
    """What the app reads of its engine, for a model on a server: the context size when the server
    says it (else 0: unknown, and the client-side budget checks are skipped; the server still
    refuses a prompt that does not fit), and the tokens its last reply left in use."""

    def __init__(self, conv: "RemoteConversation"):
        self.conv, self.model = conv, conv.model
        self.totals = {"n_prefill_tokens": 0, "prefill_ms": 0.0, "n_decode_tokens": 0, "decode_ms": 0.0}

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx or 0

    @property
    def n_past(self) -> int:
        last = self.conv.last
        return last.prompt_tokens + last.generated_tokens if last is not None and self.conv.messages else 0

    def stats(self) -> dict:
        return dict(self.totals)

    def count(self, result: TurnResult) -> None:
        t = self.totals
        t["n_prefill_tokens"] += result.prefill_tokens
        t["prefill_ms"] += result.prefill_ms
        t["n_decode_tokens"] += result.generated_tokens
        t["decode_ms"] += result.decode_ms


class RemoteConversation:
    def __init__(self, url: str, *, api_key: str | None = None, model: str | None = None,
                 system: str | None = None, timeout: float = 600.0):
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.system = system
        self.messages: list[dict] = []
        self.last: TurnResult | None = None
        self.compressor = None
        self._stop: threading.Event | None = None
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0), headers=self.headers)
        self.model = self._model(model)
        self.engine = RemoteEngine(self)

    # -- the server ----------------------------------------------------------------------------
    def _model(self, name: str | None) -> RemoteModel:
        """The model to ask for: --model, else the server's first (its n_ctx too when it says)."""
        data = self._get("/models").get("data") or []
        if name is None:
            if not data:
                raise RemoteError(f"{self.url} lists no models; name one with --model")
            name = data[0].get("id")
        info = next((m for m in data if m.get("id") == name), {})
        n_ctx = (info.get("luce") or {}).get("n_ctx") or (info.get("meta") or {}).get("n_ctx_train")
        return RemoteModel(self.url, name, n_ctx)

    def _get(self, path: str) -> dict:
        try:
            r = self._http.get(self.url + path)
        except httpx.HTTPError as e:
            raise RemoteError(f"cannot reach the server at {self.url}: {e}") from None
        _check(r, self.url)
        try:
            return r.json()
        except ValueError:
            raise RemoteError(f"{self.url}{path} did not answer with JSON (is it an OpenAI-compatible /v1 URL?)") from None

    # -- the chat core's interface -------------------------------------------------------------
    def chat_messages(self, history: list[dict] | None = None) -> list[dict]:
        history = self.messages if history is None else history
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [{"role": m["role"], "content": render_content(m)} for m in history]

    def render(self, history: list[dict] | None = None, add_generation_prompt: bool = True, **_) -> str:
        """The messages as text (the server applies its own template; this is only for display decisions)."""
        return "\n".join(m["content"] for m in self.chat_messages(history))

    def reset(self) -> None:
        self.messages, self.last = [], None

    def cancel(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def retry_history(self) -> list[dict]:
        if not self.messages or self.messages[-1]["role"] != "assistant":
            raise ConversationError("there is no reply to retry yet")
        return self.messages[:-1]

    def compress_attachments(self, history, progress=None):
        return None   # PFlash runs where the model runs; attachments go as text

    def prefill_history(self, progress=None, stop=None) -> int:
        return 0      # a resumed chat goes to the server whole with its next message

    def run_turn(self, history: list[dict], *, sampling, max_tokens: int, emit: Callable[[events.Event], object],
                 stop: threading.Event | None = None, clock: Callable[[], float] = time.monotonic,
                 admit=None, **_) -> TurnResult | None:
        """One reply from the server, as the same events Conversation.run_turn emits."""
        stop = stop or threading.Event()
        self._stop = stop
        body = {"model": self.model.name, "messages": self.chat_messages(history), "stream": True,
                "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
                "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
                "min_p": sampling.min_p, "repeat_penalty": sampling.repeat_penalty}
        if sampling.presence_penalty:
            body["presence_penalty"] = sampling.presence_penalty
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        try:
            return self._stream(history, body, emit, stop, clock)
        finally:
            self._stop = None

    def _stream(self, history, body, emit, stop, clock) -> TurnResult | None:
        t0 = clock()
        text, usage, timings, luce = [], {}, {}, {}
        reason, n_chunks, thinking, first_t = None, 0, False, None
        try:
            with self._http.stream("POST", self.url + "/chat/completions", json=body) as r:
                if r.status_code != 200:
                    r.read()
                    _check(r, self.url)
                emit(events.Started(0, 0, clock()))
                for line in r.iter_lines():
                    if stop.is_set():
                        reason = "cancelled"
                        break
                    if not line.startswith("data:"):
                        continue   # SSE comments (keep-alive) and blank lines
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise RemoteError(f"the server reported an error mid-stream: "
                                          f"{(chunk['error'] or {}).get('message', chunk['error'])}")
                    usage = chunk.get("usage") or usage
                    timings = chunk.get("timings") or timings   # llama.cpp's
                    luce = chunk.get("luce", {}).get("timings") and chunk["luce"] or luce
                    for choice in chunk.get("choices") or ():
                        delta = choice.get("delta") or {}
                        piece = ""
                        if delta.get("reasoning_content"):
                            piece = ("" if thinking else "<think>") + delta["reasoning_content"]
                            thinking = True
                        if delta.get("content"):
                            piece += ("</think>\n\n" if thinking else "") + delta["content"]
                            thinking = False
                        if piece:
                            n_chunks += 1
                            first_t = first_t or clock()
                            spans = chunk.get("luce", {}).get("spans")
                            spans = ([(s[0], bool(s[1])) for s in spans] if spans and "".join(s[0] for s in spans)
                                     == piece else [(piece, False)])
                            text.append(piece)
                            emit(events.Step([], [d for _, d in spans], piece, spans, t=clock()))
                        reason = choice.get("finish_reason") or reason
        except RemoteError as e:
            if not text:
                emit(events.Error(e, clock()))
                return None
            reason = "dropped"
        except (httpx.HTTPError, ValueError) as e:   # unreachable, or the stream broke
            if not text:
                emit(events.Error(RemoteError(f"cannot reach the server at {self.url}: {e}"), clock()))
                return None
            reason = "dropped"   # the partial reply is kept
        return self._finish(history, "".join(text), reason, usage, timings, luce, n_chunks, t0, first_t, emit, clock)

    def _finish(self, history, reply, reason, usage, timings, luce, n_chunks, t0, first_t, emit, clock) -> TurnResult:
        end = clock()
        prompt = usage.get("prompt_tokens") or 0
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        lt = luce.get("timings") or {}
        result = TurnResult(
            text=reply, finish_reason=FINISH.get(reason, reason or "eos"), prompt_tokens=prompt, reused_tokens=cached,
            prefill_tokens=lt.get("prompt_n", timings.get("prompt_n", max(prompt - cached, 0))),
            prefill_ms=lt.get("prompt_ms", timings.get("prompt_ms", ((first_t or end) - t0) * 1e3)),
            generated_tokens=usage.get("completion_tokens") or timings.get("predicted_n") or n_chunks,
            decode_ms=lt.get("predicted_ms", timings.get("predicted_ms", (end - (first_t or end)) * 1e3)),
            n_steps=luce.get("n_steps", 0), n_drafted=luce.get("n_drafted", 0), n_accepted=luce.get("n_accepted", 0),
            compression=luce.get("pflash"))
        self.messages = history + [{"role": "assistant", "content": reply}]
        self.last = result
        self.engine.count(result)
        emit(events.Finished(result, clock()))
        return result


def _check(r: httpx.Response, url: str) -> None:
    """An HTTP error status as a RemoteError in the server's own words."""
    if r.status_code < 400:
        return
    try:
        err = r.json().get("error")
        message = err.get("message") if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        message = r.text[:200]
    if r.status_code == 401:
        raise RemoteError(f"the server at {url} refused the API key (401): {message} (--api-key sets it)")
    raise RemoteError(f"the server at {url} answered {r.status_code}: {message}")
