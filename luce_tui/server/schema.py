"""A chat completion request, checked field by field: what the engine can honour becomes a
ChatRequest; what changes nothing is accepted and ignored; what we cannot honour is an APIError
(400) that names the field, never a silent ignore."""

from __future__ import annotations

import dataclasses
import json
import math

from luce_engine import Sampling

ROLES = ("system", "developer", "user", "assistant", "tool")
# Accepted, and without effect on the output (bookkeeping, caching hints, latency hints).
IGNORED = frozenset({"model", "store", "user", "service_tier", "metadata", "prompt_cache_key", "safety_identifier",
                     "cache_prompt", "prediction", "verbosity"})
# Accepted only with their neutral value: (the value that is fine, why another is refused)
NEUTRAL = {
    "n": (1, "only one choice per request is generated"),
    "logprobs": (False, "log probabilities are not returned"),
    "top_logprobs": (None, "log probabilities are not returned"),
    "logit_bias": ({}, "logit biases are not applied by this engine"),
    "frequency_penalty": (0, "the engine has repeat_penalty and presence_penalty, not frequency_penalty"),
    "audio": (None, "audio output is not supported"),
    "web_search_options": (None, "web search is not supported"),
    "functions": (None, "the deprecated `functions` is not supported: use `tools`"),
    "function_call": (None, "the deprecated `function_call` is not supported: use `tool_choice`"),
}


class APIError(Exception):
    """An OpenAI-shaped error: {"error": {"message", "type", "param", "code"}} with an HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers or {}
        self.type = type or {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                             429: "rate_limit_error"}.get(status, "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(param: str, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code=code)


@dataclasses.dataclass
class ChatRequest:
    messages: list[dict]
    sampling: Sampling
    max_tokens: int | None
    stop: list[str]
    stream: bool = False
    include_usage: bool = False
    tools: list[dict] | None = None
    tool_choice: str | dict = "auto"     # auto | none | required | {"type": "function", "function": {"name"}}
    parallel_tool_calls: bool = True
    template_kwargs: dict = dataclasses.field(default_factory=dict)


def parse(raw: bytes, defaults: Sampling) -> ChatRequest:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    known = {"messages", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "repetition_penalty",
             "repeat_penalty", "max_tokens", "max_completion_tokens", "stop", "stream", "stream_options", "tools",
             "tool_choice", "parallel_tool_calls", "reasoning_effort", "chat_template_kwargs", "response_format",
             "modalities"} | IGNORED | set(NEUTRAL)
    for key in body:
        if key not in known:
            raise bad(key, "this field is not supported by this server", "unsupported_field")
    for key, (ok, why) in NEUTRAL.items():
        if key in body and body[key] not in (ok, None) and not (ok == {} and body[key] == {}):
            raise bad(key, why, "unsupported_value")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise bad("response_format", "only {\"type\": \"text\"} is supported (no JSON mode or schema)", "unsupported_value")
    if body.get("modalities") not in (None, ["text"]):
        raise bad("modalities", "only [\"text\"] is supported", "unsupported_value")

    tools = _tools(body.get("tools"))
    choice = body.get("tool_choice", "auto" if tools else "none")
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": …}}")
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict) and isinstance(choice["function"].get("name"), str):
        if not any(t["function"]["name"] == choice["function"]["name"] for t in tools or ()):
            raise bad("tool_choice", f"names the function {choice['function']['name']!r}, which is not in tools")
    else:
        raise bad("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": …}}")
    if choice != "none" and choice != "auto" and not tools:
        raise bad("tool_choice", "needs tools")

    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise bad("chat_template_kwargs", "must be an object")
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in ("none", "minimal", "low", "medium", "high"):
            raise bad("reasoning_effort", "must be none, minimal, low, medium or high")
        kwargs = {"enable_thinking": effort not in ("none", "minimal"), **kwargs}

    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise bad("stream_options", "must be an object")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    return ChatRequest(
        messages=_messages(body.get("messages")),
        sampling=_sampling(body, defaults),
        max_tokens=_int(max_tokens, param, 1) if max_tokens is not None else None,
        stop=_stop(body.get("stop")),
        stream=_bool(body.get("stream", False), "stream"),
        include_usage=_bool(stream_options.get("include_usage", False), "stream_options.include_usage"),
        tools=tools if choice != "none" else None,
        tool_choice=choice,
        parallel_tool_calls=_bool(body.get("parallel_tool_calls", True), "parallel_tool_calls"),
        template_kwargs=kwargs)


def _bool(v, param: str) -> bool:
    if not isinstance(v, bool):
        raise bad(param, f"must be true or false, got {json.dumps(v)}", "invalid_type")
    return v


def _int(v, param: str, lo: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(param, f"must be an integer, got {json.dumps(v)}", "invalid_type")
    if lo is not None and v < lo:
        raise bad(param, f"must be >= {lo}, got {v}")
    return v


def _float(v, param: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise bad(param, f"must be a number, got {json.dumps(v)}", "invalid_type")
    return float(v)


def _sampling(body: dict, defaults: Sampling) -> Sampling:
    changes = {}
    for key, field in (("temperature", "temperature"), ("top_p", "top_p"), ("min_p", "min_p"),
                       ("presence_penalty", "presence_penalty"), ("repetition_penalty", "repeat_penalty"),
                       ("repeat_penalty", "repeat_penalty")):
        if body.get(key) is not None:
            changes[field] = _float(body[key], key)
    if body.get("top_k") is not None:
        changes["top_k"] = _int(body["top_k"], "top_k", 0)
    if body.get("seed") is not None:
        seed = _int(body["seed"], "seed")
        changes["seed"] = seed % (1 << 64)   # OpenAI's seeds may be negative: the same bits
    try:
        return defaults.updated(**changes)
    except ValueError as e:   # Sampling's own range checks name the field
        field = str(e).split()[0]
        param = {"repeat_penalty": "repetition_penalty" if "repetition_penalty" in body else "repeat_penalty"}.get(field, field)
        raise bad(param, str(e)) from None


def _stop(v) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v] if v else []
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return [s for s in v if s]
    raise bad("stop", "must be a string or a list of strings", "invalid_type")


def _text(content, param: str, *, allow_none: bool = False) -> str | None:
    """A message content: a string, or a list of text parts (joined)."""
    if content is None and allow_none:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad(f"{param}[{j}]", f"only text parts are supported, got {kind!r}", "unsupported_content")
            out.append(part["text"])
        return "".join(out)
    raise bad(param, "must be a string or a list of text parts", "invalid_type")


def _messages(v) -> list[dict]:
    if not isinstance(v, list) or not v:
        raise bad("messages", "must be a non-empty list of messages", "invalid_type")
    out = []
    for i, m in enumerate(v):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(p, "must be an object", "invalid_type")
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"{p}.role", f"unknown role {json.dumps(role)} (expected one of {', '.join(ROLES)})")
        msg = {"role": "system" if role == "developer" else role}
        calls = m.get("tool_calls") if role == "assistant" else None
        msg["content"] = _text(m.get("content"), f"{p}.content", allow_none=role == "assistant") or ""
        if calls:
            msg["tool_calls"] = _tool_calls(calls, p)
        if role == "tool":
            if m.get("tool_call_id") is not None:
                if not isinstance(m["tool_call_id"], str):
                    raise bad(f"{p}.tool_call_id", "must be a string", "invalid_type")
                msg["tool_call_id"] = m["tool_call_id"]
        if isinstance(m.get("name"), str):
            msg["name"] = m["name"]
        for key in ("reasoning_content", "reasoning"):
            if role == "assistant" and isinstance(m.get(key), str):
                msg["reasoning_content"] = m[key]
        out.append(msg)
    return out


def _tool_calls(calls, p: str) -> list[dict]:
    if not isinstance(calls, list):
        raise bad(f"{p}.tool_calls", "must be a list", "invalid_type")
    out = []
    for j, c in enumerate(calls):
        q = f"{p}.tool_calls[{j}]"
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(q, "must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", "invalid_type")
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:   # templates iterate the arguments as a mapping (transformers' convention)
                parsed = json.loads(args) if args.strip() else {}
                args = parsed if isinstance(parsed, dict) else args
            except ValueError:
                pass
        out.append({"id": c.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}})
    return out


def _tools(v) -> list[dict] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise bad("tools", "must be a list", "invalid_type")
    out = []
    for i, t in enumerate(v):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad(f"tools[{i}]", "must be {\"type\": \"function\", \"function\": {\"name\": …, \"parameters\": …}}",
                      "invalid_type")
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
            raise bad(f"tools[{i}].function.parameters", "must be a JSON schema object", "invalid_type")
        out.append({"type": "function", "function": fn})
    return out or None
