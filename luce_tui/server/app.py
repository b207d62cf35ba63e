"""`luce-chat serve`: the OpenAI-compatible HTTP API (Starlette) over one engine.

Routes: POST /v1/chat/completions (streaming and not), GET /v1/models, GET /health. Every
request's conversation runs on the one engine thread (worker.py) through the chat core
(Conversation.run_turn), so agents that resend the whole conversation each turn prefill only
what is new: the engine keeps the longest common token prefix of its context and the prompt.
Errors are OpenAI-shaped JSON with the right status; nothing a client sends ends in a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
from pathlib import Path

from starlette.applications import Starlette
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
from luce_tui.server.reply import ReplyAssembler
from luce_tui.server.schema import APIError
from luce_tui.server.worker import DONE, EngineWorker, Job, QueueFull

FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length", "cancelled": "stop"}


@dataclasses.dataclass
class ServerOptions:
    api_key: str | None = None     # required as `Authorization: Bearer KEY` when set
    max_queue: int = 8             # requests waiting behind the running one; more get 429
    keepalive_s: float = 10.0      # SSE comment interval while a stream has nothing to send
    model_id: str | None = None    # default: the GGUF's file name
    system: str | None = None      # system prompt for requests that bring none
    max_tokens: int | None = None  # reply limit for requests that set none (None: the context)


def create_app(runtime, sampling, options: ServerOptions | None = None) -> Starlette:
    opts = options or ServerOptions()
    model = runtime.engine.model
    model_id = opts.model_id or Path(model.path).name.removesuffix(".gguf")
    # (the compressor is the conversation's so that a cancel reaches the scorer too; the server's
    # messages have no attachments, ServerPFlash decides what is compressed)
    conv = Conversation(runtime.engine, speculator=runtime.speculator, compressor=runtime.compressor)
    pflash = ServerPFlash(runtime.compressor, model.tokenizer) if runtime.compressor is not None else None
    worker = EngineWorker(conv, max_queue=opts.max_queue)
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
        job = Job(lambda job: _run(conv, pflash, req, prefix, opts, job), asyncio.get_running_loop())
        try:
            worker.submit(job)
        except QueueFull as e:
            raise APIError(429, f"the server is busy: {e.waiting} requests are waiting (try again shortly)",
                           code="queue_full", headers={"Retry-After": str(1 + e.waiting)}) from None
        reply = _Reply(req, model_id, prefix)
        gone = asyncio.ensure_future(_disconnected(request))   # one watcher for the whole request
        try:
            await _until_started(job, gone, worker)
            if req.stream:   # from here Starlette watches the connection (and cancels the stream)
                gone.cancel()
                return StreamingResponse(_sse(job, reply, worker, opts.keepalive_s), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
            return JSONResponse(await _collect(job, reply, gone, worker))
        except BaseException:
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

    app = Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ], exception_handlers={APIError: on_api_error, HTTPException: on_http_error, Exception: on_error})
    app.state.worker, app.state.conversation, app.state.model_id = worker, conv, model_id
    return app


# -- the engine side ----------------------------------------------------------------------------
def _run(conv: Conversation, pflash: ServerPFlash | None, req: schema.ChatRequest, prefix: str, opts: ServerOptions,
         job: Job) -> None:
    """On the engine thread: one turn of the request's conversation."""
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
    conv.run_turn(messages, sampling=req.sampling, max_tokens=req.max_tokens or opts.max_tokens or conv.engine.n_ctx,
                  emit=job.emit, stop=job.stop, stop_strings=req.stop, tools=req.tools,
                  template_kwargs=req.template_kwargs, reply_prefix=prefix)


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
class _Reply:
    """A response's identity and its assembled message."""

    def __init__(self, req: schema.ChatRequest, model_id: str, prefix: str):
        self.req, self.model_id, self.prefix = req, model_id, prefix
        self.id, self.created = "chatcmpl-" + secrets.token_hex(12), int(time.time())
        self.asm: ReplyAssembler | None = None
        self.result = None

    def start(self, job: Job) -> None:
        self.job = job
        self.asm = ReplyAssembler(thinking=job.info.get("thinking", False), tools=self.req.tools, prefix=self.prefix)

    def finish_reason(self) -> str:
        if self.asm.calls:
            return "tool_calls"
        return FINISH.get(self.result.finish_reason, "stop")

    def enough_calls(self) -> bool:
        """parallel_tool_calls false: the first complete call ends the reply."""
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
                "pflash": self.job.info.get("pflash")}

    def chunk(self, delta: dict, finish: str | None = None, **extra) -> str:
        spans = delta.pop("_spans", None)
        body = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model_id,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        if spans and any(d for _, d in spans):   # provenance for a luce client's highlighting
            body["luce"] = {"spans": spans}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def message(self) -> dict:
        asm = self.asm
        msg = {"role": "assistant", "content": "".join(asm.content) if asm.content or not asm.calls else None}
        if asm.reasoning:
            msg["reasoning_content"] = "".join(asm.reasoning)
        if asm.calls:
            msg["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in asm.calls]
        return msg


async def _next(job: Job, gone: asyncio.Future | None, timeout: float | None = None):
    """The job's next event; _Gone when `gone` (the disconnect watcher) fires first, TimeoutError
    after `timeout` seconds without one."""
    if not job.events.empty():   # the common case mid-stream: no task, no timer
        return job.events.get_nowait()
    if gone is None:
        return await asyncio.wait_for(job.events.get(), timeout)
    get = asyncio.ensure_future(job.events.get())
    done, _ = await asyncio.wait({get, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if get in done:
        return get.result()
    get.cancel()
    if gone in done:
        raise _Gone()
    raise asyncio.TimeoutError


class _Gone(Exception):
    """The client disconnected."""


async def _next_or_cancel(job: Job, gone: asyncio.Future, worker: EngineWorker):
    """The job's next event; a client that disconnected first cancels the job."""
    try:
        return await _next(job, gone)
    except _Gone:
        worker.cancel(job)
        raise APIError(400, "the client disconnected", code="cancelled") from None


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _until_started(job: Job, gone: asyncio.Future, worker: EngineWorker) -> list:
    """Events up to Started; an Error before it is the response (400 for a prompt over the context...)."""
    seen = []
    while True:
        ev = await _next_or_cancel(job, gone, worker)
        if ev is DONE:
            raise APIError(500, "the request ended without a reply")
        if isinstance(ev, events.Error):
            await _drain(job)
            raise _api_error(ev.error)
        seen.append(ev)
        if isinstance(ev, events.Started):
            return seen


async def _drain(job: Job) -> None:
    while await job.events.get() is not DONE:
        pass


async def _collect(job: Job, reply: _Reply, gone: asyncio.Future, worker: EngineWorker) -> dict:
    reply.start(job)
    while True:
        ev = await _next_or_cancel(job, gone, worker)
        match ev:
            case events.Step():
                reply.asm.feed(ev)
                if reply.enough_calls():
                    worker.cancel(job)
            case events.Finished(result=result):
                reply.result = result
                reply.asm.finish()
            case events.Error(error=error):
                await _drain(job)
                raise _api_error(error)
            case _ if ev is DONE:
                break
    return {"id": reply.id, "object": "chat.completion", "created": reply.created, "model": reply.model_id,
            "choices": [{"index": 0, "message": reply.message(), "finish_reason": reply.finish_reason()}],
            "usage": reply.usage(), "luce": reply.extension()}


async def _sse(job: Job, reply: _Reply, worker: EngineWorker, keepalive_s: float):
    """The stream: the role first, then deltas as steps arrive, the finish, usage if asked, [DONE].
    A client that disconnects cancels the generation (Starlette cancels this generator)."""
    reply.start(job)
    finished = False
    try:
        yield reply.chunk({"role": "assistant", "content": ""})
        while True:
            try:
                ev = await _next(job, None, timeout=keepalive_s)
            except asyncio.TimeoutError:
                yield ": keep-alive\n\n"   # an SSE comment: long prefills do not look like a dead server
                continue
            if ev is DONE:
                break
            match ev:
                case events.Step():
                    for delta in reply.asm.feed(ev):
                        yield reply.chunk(delta)
                    if reply.enough_calls():
                        worker.cancel(job)
                case events.Finished(result=result):
                    reply.result = result
                    for delta in reply.asm.finish():
                        yield reply.chunk(delta)
                    yield reply.chunk({}, reply.finish_reason(), luce=reply.extension())
                    if reply.req.include_usage:
                        body = {"id": reply.id, "object": "chat.completion.chunk", "created": reply.created,
                                "model": reply.model_id, "choices": [], "usage": reply.usage()}
                        yield f"data: {json.dumps(body)}\n\n"
                    finished = True
                case events.Error(error=error):   # after the stream began: an error event, then the end
                    yield f"data: {json.dumps(_api_error(error).body())}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        if not finished:
            worker.cancel(job)
