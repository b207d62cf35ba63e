"""`luce-chat serve`: the OpenAI-compatible HTTP API (Starlette) over one engine.

Routes: POST /v1/chat/completions (streaming and not), GET /v1/models, GET /health. Every
request's conversation runs on the one engine thread (worker.py) through the chat core
(Conversation.run_turn), so agents that resend the whole conversation each turn prefill only
what is new: the engine keeps the longest common token prefix of its context and the prompt.
Errors are OpenAI-shaped JSON with the right status; nothing a client sends ends in a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import secrets
import sys
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from luce_engine import ContextFullError, EngineError, GenerationCancelled
from luce_engine.chat_template import ChatTemplateError
from luce_engine.tokenizer import TokenizerError

from luce_tui import events
from luce_tui.conversation import Conversation, ConversationError, PromptTooLong
from luce_tui.server import schema
from luce_tui.server.pflash import ServerPFlash
from luce_tui.server.reply import ReplyAssembler, merge
from luce_tui.server.schema import APIError
from luce_tui.server.states import ServerStates
from luce_tui.server.worker import DONE, EngineWorker, Job, QueueFull

FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length", "cancelled": "stop"}


@dataclasses.dataclass
class ServerOptions:
    api_key: str | None = None     # required as `Authorization: Bearer KEY` when set
    max_queue: int = 8             # requests waiting behind the running one; more get 429
    keepalive_s: float = 10.0      # SSE comment interval while a stream has nothing to send (queue, scoring, prefill)
    model_id: str | None = None    # default: the GGUF's file name
    system: str | None = None      # system prompt for requests that bring none
    max_tokens: int | None = None  # reply limit for requests that set none (None: the context)
    state_dir: str | None = None   # engine state files kept across restarts (states.py); None: none
    state_budget_gib: float = 4.0  # their disk budget (the oldest go first)
    report: object = None          # a problem for the log (one line); default: stderr
    stream_interval_ms: float = 20.0  # steps sooner than this after the last sent one go out with the next (worker.py)


def _stderr(text: str) -> None:
    print(f"luce-chat serve: {text}", file=sys.stderr, flush=True)


def create_app(runtime, sampling, options: ServerOptions | None = None) -> Starlette:
    opts = options or ServerOptions()
    model = runtime.engine.model
    model_id = opts.model_id or Path(model.path).name.removesuffix(".gguf")
    # (the compressor is the conversation's so that a cancel reaches the scorer too; the server's
    # messages have no attachments, ServerPFlash decides what is compressed)
    conv = Conversation(runtime.engine, speculator=runtime.speculator, compressor=runtime.compressor)
    pflash = ServerPFlash(runtime.compressor, model.tokenizer) if runtime.compressor is not None else None
    worker = EngineWorker(conv, max_queue=opts.max_queue)
    report = opts.report or _stderr
    states = (ServerStates(opts.state_dir, runtime.engine, budget_gib=opts.state_budget_gib, report=report,
                           speculator=runtime.speculator) if opts.state_dir and opts.state_budget_gib > 0 else None)
    created = int(time.time())
    tool_format = _tool_format(model.chat_template.source)

    def authorize(request: Request) -> None:
        if opts.api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {opts.api_key}".encode()):
            raise APIError(401, "invalid or missing API key (send Authorization: Bearer KEY)", code="invalid_api_key")

    async def health(request: Request):
        return JSONResponse({"status": "ok", "model": model_id, "busy": worker.current is not None,
                             "waiting": worker.waiting})

    async def models(request: Request):
        authorize(request)
        return JSONResponse({"object": "list", "data": [
            {"id": model_id, "object": "model", "created": created, "owned_by": "luce-chat",
             "luce": {"path": model.path, "arch": model.arch, "n_ctx": runtime.engine.n_ctx,
                      "draft": bool(runtime.speculator), "pflash": runtime.compressor is not None}}]})

    async def chat(request: Request):
        authorize(request)
        req = schema.parse(await request.body(), sampling)
        prefix = _forced_prefix(req, tool_format)
        job = Job(lambda job: _run(conv, pflash, states, report, req, prefix, opts, job), asyncio.get_running_loop(),
                  stream_interval=opts.stream_interval_ms / 1e3)
        try:
            worker.submit(job)
        except QueueFull as e:
            raise APIError(429, f"the server is busy: {e.waiting} requests are waiting (try again shortly)",
                           code="queue_full", headers={"Retry-After": str(1 + e.waiting)}) from None
        reply = _Reply(req, model_id, prefix)
        gone = asyncio.ensure_future(_disconnected(request))   # one watcher for the whole request
        gone.add_done_callback(lambda _: job.interrupt())
        try:
            if req.stream:
                # A reply that starts within one keep-alive interval gets its status as usual (400 for a
                # prompt over the context); one that waits longer (in the queue, PFlash scoring) gets the
                # stream's headers and keep-alives now, so a gateway does not time out on it.
                evs = await _until_started(job, gone, worker, asyncio.get_running_loop().time() + opts.keepalive_s)
                gone.cancel()   # from here Starlette watches the connection (and cancels the stream)
                return StreamingResponse(_sse(job, reply, worker, opts.keepalive_s, evs),
                                         media_type="text/event-stream", background=BackgroundTask(job.sent.set),
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            body = await _collect(job, reply, gone, worker, await _until_started(job, gone, worker))
            return JSONResponse(body, background=BackgroundTask(job.sent.set))
        except BaseException:
            job.sent.set()
            worker.cancel(job)
            raise
        finally:
            gone.cancel()

    async def on_api_error(request: Request, exc: APIError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    async def on_http_error(request: Request, exc: HTTPException):
        return JSONResponse(APIError(exc.status_code, exc.detail or "error").body(), status_code=exc.status_code)

    async def on_error(request: Request, exc: Exception):   # a bug: still JSON, never a traceback to the client
        return JSONResponse(APIError(500, f"internal error: {type(exc).__name__}: {exc}").body(), status_code=500)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        # at shutdown a save under way finishes (appends are crash-safe, but it would be lost)
        await asyncio.to_thread(worker.wait_idle, 10.0)

    app = Starlette(lifespan=lifespan, routes=[
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ], exception_handlers={APIError: on_api_error, HTTPException: on_http_error, Exception: on_error})
    app.state.worker, app.state.conversation, app.state.model_id = worker, conv, model_id
    app.state.states = states
    return app


# -- the engine side ----------------------------------------------------------------------------
def _run(conv: Conversation, pflash: ServerPFlash | None, states: ServerStates | None, report, req: schema.ChatRequest,
         prefix: str, opts: ServerOptions, job: Job) -> None:
    """On the engine thread: one turn of the request's conversation (from a saved prefix when a
    state file shares more of the prompt than the engine's context), then its save."""
    if job.stop.is_set():
        job.emit(events.Error(GenerationCancelled("cancelled before it started")))
        return
    # the request's own system message is in its messages; --system stands in when it has none
    conv.system = opts.system if req.messages[0]["role"] != "system" else None
    messages = req.messages
    if pflash is not None:
        def progress(done: int, total: int) -> bool:
            job.emit(events.ScoringProgress(done, total))
            return not job.stop.is_set()

        messages, job.info["pflash"] = pflash.apply(messages, progress)
    prompt_text = conv.render(messages, tools=req.tools, template_kwargs=req.template_kwargs)
    job.info["thinking"] = prompt_text.rstrip().endswith("<think>") and not prefix
    restore = None
    if states is not None:
        def restore(prompt: list[int], live: int) -> None:
            job.info["restored"] = _guarded(report, "restoring", lambda: states.restore(prompt, live))

    result = conv.run_turn(messages, sampling=req.sampling,
                           max_tokens=req.max_tokens or opts.max_tokens or conv.engine.n_ctx,
                           emit=job.emit, stop=job.stop, stop_strings=req.stop, tools=req.tools,
                           template_kwargs=req.template_kwargs, reply_prefix=prefix, restore=restore)
    if states is not None and result is not None:
        job.after = lambda: _guarded(report, "saving", states.save)


def _guarded(report, what: str, fn):
    """A state file's trouble costs the reuse, never the request (reported; None)."""
    try:
        return fn()
    except Exception as e:
        report(f"{what} the engine state failed: {type(e).__name__}: {e}")
        return None


def _tool_format(template: str) -> str | None:
    if "<function=" in template:
        return "xml"
    if "<tool_call>" in template:
        return "json"
    return None


def _forced_prefix(req: schema.ChatRequest, fmt: str | None) -> str:
    """tool_choice required / a named function: the prompt opens the tool call, so the model must write one."""
    choice = req.tool_choice
    if choice in ("auto", "none"):
        return ""
    if fmt is None:
        raise schema.bad("tool_choice", "this model's chat template has no tool-call format to force (use auto)",
                         "unsupported_value")
    if choice == "required":
        return "<tool_call>\n"
    name = choice["function"]["name"]
    return f"<tool_call>\n<function={name}>\n" if fmt == "xml" else f'<tool_call>\n{{"name": {json.dumps(name)}, "arguments": '


def _api_error(e: BaseException) -> APIError:
    if isinstance(e, APIError):
        return e
    if isinstance(e, PromptTooLong):
        return APIError(400, f"the prompt is {e.prompt_tokens} tokens but the context holds {e.n_ctx} "
                             f"(start the server with a larger --max-ctx, or send less)",
                        param="messages", code="context_length_exceeded")
    if isinstance(e, ContextFullError):
        return APIError(400, str(e), param="messages", code="context_length_exceeded")
    if isinstance(e, (ConversationError, ChatTemplateError, TokenizerError)):
        return APIError(400, str(e), param="messages", code="invalid_prompt")
    if isinstance(e, GenerationCancelled):
        return APIError(400, "the request was cancelled", code="cancelled")
    if isinstance(e, EngineError):
        return APIError(500, f"engine error: {e}", code="engine_error")
    return APIError(500, f"internal error: {type(e).__name__}: {e}")


# -- the response side --------------------------------------------------------------------------
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode   # json.dumps(ensure_ascii=False), without a new encoder a call
_TAIL_JSON = '{}, "finish_reason": null}]}'              # how a chunk's JSON ends after its delta (an empty one here)
_TAIL = _TAIL_JSON[2:] + "\n\n"


class _Reply:
    """A response's identity and its assembled message."""

    def __init__(self, req: schema.ChatRequest, model_id: str, prefix: str):
        self.req, self.model_id, self.prefix = req, model_id, prefix
        self.id, self.created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
        self.asm: ReplyAssembler | None = None
        self.result = None
        self._head: str | None = None   # `data: {"id": …, "delta": ` of the plain chunks

    def start(self, job: Job) -> None:
        self.job = job
        self.asm = ReplyAssembler(thinking=job.info.get("thinking", False), tools=self.req.tools, prefix=self.prefix,
                                  max_calls=None if self.req.parallel_tool_calls else 1)

    def finish_reason(self) -> str:
        reason = FINISH.get(self.result.finish_reason, "stop")
        if self.asm.calls and reason != "length":   # a call cut off by max_tokens is not a finished call
            return "tool_calls"
        return reason

    def missing_call(self) -> APIError | None:
        """tool_choice required / named: the prompt opened the call, but what the model wrote in it
        is not a call we could parse. An error, not the text as if it were an answer."""
        if not self.prefix or self.asm.calls:
            return None
        text = self.prefix + "".join(self.asm.content)
        return APIError(500, f"tool_choice {json.dumps(self.req.tool_choice)} needs a tool call, but the model wrote "
                             f"no valid one (finish: {self.result.finish_reason}): {text[:300]!r}",
                        param="tool_choice", code="tool_call_missing")

    def enough_calls(self) -> bool:
        """parallel_tool_calls false: the first complete call ends the reply (the assembler drops
        what follows it, also what already arrived; this stops the engine)."""
        return not self.req.parallel_tool_calls and bool(self.asm.tools) and self.asm.tools.complete_calls >= 1

    def usage(self) -> dict:
        r = self.result
        return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.generated_tokens,
                "total_tokens": r.prompt_tokens + r.generated_tokens,
                "prompt_tokens_details": {"cached_tokens": r.reused_tokens}}

    def extension(self) -> dict:
        r = self.result
        return {"timings": {"prompt_n": r.prefill_tokens, "prompt_ms": round(r.prefill_ms, 3),
                            "prompt_per_second": round(r.prefill_tps, 2), "predicted_n": r.generated_tokens,
                            "predicted_ms": round(r.decode_ms, 3), "predicted_per_second": round(r.decode_tps, 2)},
                "reused_tokens": r.reused_tokens, "finish": r.finish_reason, "n_steps": r.n_steps,
                "n_drafted": r.n_drafted, "n_accepted": r.n_accepted, "accept_length": r.accept_length,
                "pflash": self.job.info.get("pflash"), "restored": self._restored()}

    def _restored(self) -> dict | None:
        """The saved prefix this request's context came from (a state file), part of reused_tokens."""
        r = self.job.info.get("restored")
        return None if r is None else {"n_tokens": r.n_tokens, "ms": round(r.ms, 3), "file": r.file}

    def chunk(self, delta: dict, finish: str | None = None, **extra) -> str:
        spans = delta.pop("_spans", None)
        drafted = spans is not None and any(d for _, d in spans)
        if finish is None and not extra and not drafted:
            # the chunk of nearly every token: the same bytes as below, with only the delta encoded
            if self._head is None:
                self._head = "data: " + _ENCODE(self._body({}, None))[:-len(_TAIL_JSON)]
            return self._head + _ENCODE(delta) + _TAIL
        body = self._body(delta, finish, **extra)
        if drafted:   # provenance for a luce client's highlighting
            body["luce"] = {"spans": spans}
        return f"data: {_ENCODE(body)}\n\n"

    def _body(self, delta: dict, finish: str | None, **extra) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model_id,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}

    def message(self) -> dict:
        asm = self.asm
        msg = {"role": "assistant", "content": "".join(asm.content) if asm.content or not asm.calls else None}
        if asm.reasoning:
            msg["reasoning_content"] = "".join(asm.reasoning)
        if asm.calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in asm.calls]
        return msg


class _Gone(Exception):
    """The client disconnected."""


async def _take(job: Job, gone: asyncio.Future | None, deadline: float | None = None) -> list:
    """The job's events that have arrived, waiting for one if none has; [] once the loop's clock
    passes `deadline`; _Gone when `gone` (the disconnect watcher, which interrupts the wait) fired."""
    while True:
        evs = job.take()
        if evs:
            return evs
        if gone is not None and gone.done():
            raise _Gone()
        if deadline is None:
            await job.wait()
            continue
        left = deadline - job.loop.time()
        if left <= 0:
            return []
        await job.wait(left)


async def _take_or_cancel(job: Job, gone: asyncio.Future, worker: EngineWorker, deadline: float | None = None) -> list:
    """_take; a client that disconnected first cancels the job."""
    try:
        return await _take(job, gone, deadline)
    except _Gone:
        worker.cancel(job)
        raise APIError(400, "the client disconnected", code="cancelled") from None


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _until_started(job: Job, gone: asyncio.Future, worker: EngineWorker,
                         deadline: float | None = None) -> list | None:
    """Wait for Started: the events from it on (a batch may hold more), or None at `deadline` (the
    request still waits in the queue, or PFlash is scoring). An Error before Started is the
    response (400 for a prompt over the context ...)."""
    while True:
        evs = await _take_or_cancel(job, gone, worker, deadline)
        if not evs:
            return None
        for i, ev in enumerate(evs):
            if ev is DONE:
                raise APIError(500, "the request ended without a reply")
            if isinstance(ev, events.Error):
                await _drain(job, evs[i + 1:])
                raise _api_error(ev.error)
            if isinstance(ev, events.Started):
                return evs[i:]


async def _drain(job: Job, evs: list) -> None:
    """Until the job's DONE (after its Error), so the engine thread has let go of the job."""
    while DONE not in evs:
        evs = await _take(job, None)


async def _collect(job: Job, reply: _Reply, gone: asyncio.Future, worker: EngineWorker, evs: list) -> dict:
    while True:
        for i, ev in enumerate(evs):
            match ev:
                case events.Started():
                    reply.start(job)
                case events.Step():
                    reply.asm.feed(ev)
                    if reply.enough_calls():
                        worker.cancel(job)
                case events.Finished(result=result):
                    reply.result = result
                    reply.asm.finish()
                    if (missing := reply.missing_call()) is not None:
                        await _drain(job, evs[i + 1:])
                        raise missing
                case events.Error(error=error):
                    await _drain(job, evs[i + 1:])
                    raise _api_error(error)
                case _ if ev is DONE:
                    return {"id": reply.id, "object": "chat.completion", "created": reply.created,
                            "model": reply.model_id,
                            "choices": [{"index": 0, "message": reply.message(), "finish_reason": reply.finish_reason()}],
                            "usage": reply.usage(), "luce": reply.extension()}
        evs = await _take_or_cancel(job, gone, worker)


KEEPALIVE = ": keep-alive\n\n"   # an SSE comment: clients skip it, proxies and gateways see a live stream


async def _sse(job: Job, reply: _Reply, worker: EngineWorker, keepalive_s: float, evs: list | None):
    """The stream: the role first, then deltas as steps arrive, the finish, usage if asked, [DONE].
    evs: the events from Started on, or None when the reply has not started yet (the request waits
    in the queue or PFlash is scoring): then a keep-alive goes first and errors before Started
    come as an error event. A keep-alive follows every `keepalive_s` seconds in which nothing else
    was sent (a long prefill, a tool call's text held back, a wait in the queue). What has arrived
    together goes out in one write; with a stream interval the deltas of steps in a row as one
    chunk where they merge (content with content, one call's argument fragments with each other). A client that disconnects cancels the generation (Starlette
    cancels this generator)."""
    loop = job.loop
    finished = False
    alarm = _Alarm(loop, keepalive_s, job.interrupt)   # one timer an interval, not one a token
    try:
        if evs is None:
            yield KEEPALIVE
            evs = []
        alarm.reset()
        while True:
            while not evs and not alarm.due():
                await job.wait()
                evs = job.take()
            parts, done = [], False
            deltas: list[dict] = []   # of the steps in a row: one chunk for the lot where they merge
            for ev in evs:
                if deltas and type(ev) is not events.Step:
                    parts.extend(reply.chunk(d) for d in merge(deltas))
                    deltas = []
                if ev is DONE:
                    done = True
                    break
                match ev:
                    case events.Started():
                        reply.start(job)
                        parts.append(reply.chunk({"role": "assistant", "content": ""}))
                        parts.extend(reply.chunk(delta) for delta in reply.asm.opening)
                    case events.Step():
                        if job.stream_interval:
                            deltas += reply.asm.feed(ev)
                        else:   # --stream-interval 0: a chunk for every step
                            parts.extend(reply.chunk(d) for d in reply.asm.feed(ev))
                        if reply.enough_calls():
                            worker.cancel(job)
                    case events.Finished(result=result):
                        reply.result = result
                        rest = reply.asm.finish()
                        finished = True
                        if (missing := reply.missing_call()) is not None:
                            parts.append(f"data: {json.dumps(missing.body())}\n\n")
                            continue
                        for delta in rest:
                            parts.append(reply.chunk(delta))
                        parts.append(reply.chunk({}, reply.finish_reason(), luce=reply.extension()))
                        if reply.req.include_usage:
                            body = {"id": reply.id, "object": "chat.completion.chunk", "created": reply.created,
                                    "model": reply.model_id, "choices": [], "usage": reply.usage()}
                            parts.append(f"data: {json.dumps(body)}\n\n")
                    case events.Error(error=error):   # after the stream began: an error event, then the end
                        parts.append(f"data: {json.dumps(_api_error(error).body())}\n\n")
            if deltas:
                parts.extend(reply.chunk(d) for d in merge(deltas))
            evs = []
            if parts:
                yield "".join(parts) if len(parts) > 1 else parts[0]
                alarm.reset()
            elif alarm.due():   # progress events only, or nothing at all, for an interval
                yield KEEPALIVE
                alarm.reset()
            if done:
                break
        yield "data: [DONE]\n\n"
    finally:
        alarm.cancel()
        if not finished:
            worker.cancel(job)


class _Alarm:
    """Calls `wake` once `interval` seconds have passed since the last reset(), and again every
    interval after that; reset() only notes the time (a timer that fires early sets itself again
    for the remainder)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float, wake):
        self.loop, self.interval, self.wake = loop, interval, wake
        self.last = loop.time()
        self.timer = loop.call_at(self.last + interval, self._fire)

    def reset(self) -> None:
        self.last = self.loop.time()

    def due(self) -> bool:
        return self.loop.time() - self.last >= self.interval

    def _fire(self) -> None:
        at, now = self.last + self.interval, self.loop.time()
        if at <= now:
            self.wake()
            at = now + self.interval
        self.timer = self.loop.call_at(at, self._fire)

    def cancel(self) -> None:
        self.timer.cancel()
