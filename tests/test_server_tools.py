"""Tool calls and reasoning through `luce-chat serve`: scripted models (tools/scripted_gguf.py) write a
known reply token by token with a tool-calling chat template; the `openai` client checks the parsed
calls and the fragments they stream in."""
from __future__ import annotations

import json

import openai
import pytest

from server_support import serve
from tools.scripted_gguf import CHATML, QWEN3_TOOLS, QWEN35_TOOLS, write_scripted_gguf

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
JSON_SCRIPT = ["Let me check.", "<tool_call>", '\n{"name": "get_weather", "arguments": ', '{"city": ', '"Paris", ',
               '"days": 3', '}}\n', "</tool_call>"]
XML_SCRIPT = ["<tool_call>", "\n<function=get_weather>", "\n<parameter=city>", "\nPar", "is", "\n</parameter>",
              "\n<parameter=days>", "\n3\n", "</parameter>", "\n</function>", "\n</tool_call>"]


def _server(tmp_path_factory, name, script, template, *flags):
    # --stream-interval 0: a scripted model's tokens come microseconds apart, and these tests are
    # about what each token's step sends (the default would merge them, tested below)
    path = write_scripted_gguf(tmp_path_factory.mktemp("scripted") / f"{name}.gguf", script, template=template)
    return serve("--target", path, "--max-ctx", "1024", *(flags or ("--stream-interval", "0")))


@pytest.fixture(scope="module")
def json_server(tmp_path_factory):
    with _server(tmp_path_factory, "json-tools", JSON_SCRIPT, QWEN3_TOOLS) as s:
        yield s


def _tool_stream(client, **kw):
    chunks = list(client.chat.completions.create(model="any", messages=ASK, tools=TOOLS, stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    content = "".join(d.content or "" for d in deltas)
    calls = [tc for d in deltas for tc in d.tool_calls or ()]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    return content, calls, finish


def test_json_tool_call_streams_name_then_argument_fragments(json_server):
    content, calls, finish = _tool_stream(json_server.client())
    assert content == "Let me check."
    assert calls[0].id.startswith("call_") and calls[0].function.name == "get_weather" and calls[0].index == 0
    fragments = [c.function.arguments for c in calls[1:]]
    assert len(fragments) >= 3                        # as the tokens arrived, not in one piece at the end
    assert all(c.index == 0 and c.id is None for c in calls[1:])
    assert json.loads("".join(fragments)) == {"city": "Paris", "days": 3}
    assert finish == ["tool_calls"]


def test_merged_steps_give_the_same_call(tmp_path_factory):
    """A long --stream-interval merges the fast steps: the parsed call is the same. How many
    fragments go out depends on when the loop comes back from its last write (a busy machine picks
    up the held steps sooner), so only the upper bound is fixed here; the merging itself is
    test_server_units' test of merge()."""
    with _server(tmp_path_factory, "json-tools-merged", JSON_SCRIPT, QWEN3_TOOLS, "--stream-interval", "5000") as s:
        content, calls, finish = _tool_stream(s.client())
    assert content == "Let me check." and finish == ["tool_calls"]
    assert calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
    fragments = [c.function.arguments for c in calls[1:]]
    assert 1 <= len(fragments) <= 4 and json.loads("".join(fragments)) == {"city": "Paris", "days": 3}


def test_json_tool_call_round_trip(json_server):
    c = json_server.client()
    r = c.chat.completions.create(model="any", messages=ASK, tools=TOOLS)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and msg.content == "Let me check."
    (call,) = msg.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    # the result goes back as a tool message; the template renders both, and the context is reused
    follow = ASK + [{"role": "assistant", "content": msg.content, "tool_calls": [call.model_dump()]},
                    {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny"}'}]
    r2 = c.chat.completions.create(model="any", messages=follow, tools=TOOLS)
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens + 20
    assert r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens
    assert r2.choices[0].message.tool_calls[0].function.name == "get_weather"


def test_tool_choice_none_returns_the_text(json_server):
    r = json_server.client().chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content == "".join(JSON_SCRIPT)
    assert r.choices[0].finish_reason == "stop"


def test_parallel_tool_calls_false_stops_after_the_first(tmp_path_factory):
    two = ["<tool_call>", '\n{"name": "a", "arguments": {}}\n', "</tool_call>", "\n<tool_call>",
           '\n{"name": "b", "arguments": {}}\n', "</tool_call>\n"]
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in "ab"]
    with _server(tmp_path_factory, "two-calls", two, QWEN3_TOOLS) as s:
        c = s.client()
        both = c.chat.completions.create(model="any", messages=ASK, tools=tools).choices[0].message.tool_calls
        assert [t.function.name for t in both] == ["a", "b"] and len({t.id for t in both}) == 2
        one = c.chat.completions.create(model="any", messages=ASK, tools=tools, parallel_tool_calls=False)
        assert [t.function.name for t in one.choices[0].message.tool_calls] == ["a"]
        # streamed too, also when the second call's text arrived with the first (dropped, not sent)
        chunks = list(c.chat.completions.create(model="any", messages=ASK, tools=tools, parallel_tool_calls=False,
                                                stream=True))
        names = [tc.function.name for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or ()
                 if tc.function.name]
        assert names == ["a"]


def test_xml_tool_call_streams_as_json_arguments(tmp_path_factory):
    with _server(tmp_path_factory, "xml-tools", XML_SCRIPT, QWEN35_TOOLS) as s:
        content, calls, finish = _tool_stream(s.client())
        assert content == "" and finish == ["tool_calls"]
        assert calls[0].function.name == "get_weather"
        fragments = [c.function.arguments for c in calls[1:]]
        assert len(fragments) >= 4
        assert json.loads("".join(fragments)) == {"city": "Paris", "days": 3}   # typed by the tool's schema
        r = s.client().chat.completions.create(model="any", messages=ASK, tools=TOOLS)
        assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Paris", "days": 3}


def test_reasoning_content_streams_apart_from_the_answer(tmp_path_factory):
    script = ["<think>", "The user asks", " about France.", "</think>", "\n\nParis", " is the capital."]
    with _server(tmp_path_factory, "thinking", script, CHATML) as s:
        c = s.client()
        r = c.chat.completions.create(model="any", messages=ASK)
        msg = r.choices[0].message
        assert msg.model_extra["reasoning_content"] == "The user asks about France."
        assert msg.content == "Paris is the capital."
        chunks = list(c.chat.completions.create(model="any", messages=ASK, stream=True))
        deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
        reasoning = [d.model_extra.get("reasoning_content") for d in deltas if d.model_extra.get("reasoning_content")]
        assert "".join(reasoning) == "The user asks about France." and len(reasoning) >= 2
        assert "".join(d.content or "" for d in deltas) == "Paris is the capital."


def test_named_tool_choice_opens_the_call_in_the_prompt(tmp_path_factory):
    """tool_choice naming a function: the prompt ends in `<tool_call>\\n<function=NAME>\\n`, so the model
    continues inside the call (this scripted model writes only the parameters and the closing tags)."""
    params = ["<parameter=city>", "\nParis\n", "</parameter>", "\n</function>", "\n</tool_call>"]
    with _server(tmp_path_factory, "xml-params", params, QWEN35_TOOLS) as s:
        c = s.client()
        auto = c.chat.completions.create(model="any", messages=ASK, tools=TOOLS)
        assert auto.choices[0].message.tool_calls is None          # not a call without its opening
        forced = c.chat.completions.create(model="any", messages=ASK, tools=TOOLS,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
        (call,) = forced.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
        assert forced.choices[0].finish_reason == "tool_calls"
        # streamed, the call's id and name (written by the prompt) come first, then the arguments
        _, calls, finish = _tool_stream(c, tool_choice={"type": "function", "function": {"name": "get_weather"}})
        assert calls[0].function.name == "get_weather" and calls[0].id.startswith("call_") and finish == ["tool_calls"]
        assert json.loads("".join(t.function.arguments for t in calls[1:])) == {"city": "Paris"}
        with pytest.raises(Exception) as e:
            c.chat.completions.create(model="any", messages=ASK, tools=TOOLS,
                                      tool_choice={"type": "function", "function": {"name": "nope"}})
        assert e.value.status_code == 400 and e.value.body["param"] == "tool_choice"


def test_reasoning_effort_and_template_kwargs_reach_the_template(tmp_path_factory):
    """A template that writes an empty think block itself when enable_thinking is false (as Qwen3's
    does): reasoning_effort none, or chat_template_kwargs, turn thinking off in the prompt."""
    template = CHATML.replace("<|im_start|>assistant{{ '\n' }}{% endif %}",
                              "<|im_start|>assistant{{ '\n' }}{% if enable_thinking is defined and not "
                              "enable_thinking %}<think>{{ '\n\n' }}</think>{{ '\n\n' }}{% endif %}{% endif %}")
    assert template != CHATML
    script = ["<think>", "Hmm.", "</think>", "\n\nParis."]
    empty_block = len("<think>\n\n</think>\n\n")   # byte tokens
    with _server(tmp_path_factory, "effort", script, template) as s:
        c = s.client()
        on = c.chat.completions.create(model="any", messages=ASK)
        assert on.choices[0].message.model_extra["reasoning_content"] == "Hmm."
        assert on.choices[0].message.content == "Paris."
        off = c.chat.completions.create(model="any", messages=ASK, reasoning_effort="none")
        kw = c.chat.completions.create(model="any", messages=ASK,
                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        high = c.chat.completions.create(model="any", messages=ASK, reasoning_effort="high")
        assert off.usage.prompt_tokens == kw.usage.prompt_tokens == on.usage.prompt_tokens + empty_block
        assert high.usage.prompt_tokens == on.usage.prompt_tokens
        with pytest.raises(Exception) as e:
            c.chat.completions.create(model="any", messages=ASK, reasoning_effort="extreme")
        assert e.value.status_code == 400 and e.value.body["param"] == "reasoning_effort"


# -- tool_choice required / a named function, end to end -----------------------------------------
JSON_BODY = ['{"name": "get_weather", "arguments": ', '{"city": ', '"Paris", ', '"days": 2', '}}\n', "</tool_call>"]


def test_tool_choice_required_forces_the_call(tmp_path_factory):
    """A model that, left alone, writes the call's JSON without its <tool_call> opening (so: text).
    tool_choice required opens the call in the prompt; the model's continuation is then a call,
    streamed as name and argument fragments, finish_reason tool_calls."""
    with _server(tmp_path_factory, "json-body", JSON_BODY, QWEN3_TOOLS) as s:
        c = s.client()
        auto = c.chat.completions.create(model="any", messages=ASK, tools=TOOLS)
        assert auto.choices[0].message.tool_calls is None and auto.choices[0].message.content == "".join(JSON_BODY)
        r = c.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="required")
        (call,) = r.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris", "days": 2}
        assert r.choices[0].finish_reason == "tool_calls" and not r.choices[0].message.content
        content, calls, finish = _tool_stream(c, tool_choice="required")
        assert content == "" and finish == ["tool_calls"]
        assert calls[0].function.name == "get_weather" and calls[0].id.startswith("call_")
        fragments = [t.function.arguments for t in calls[1:]]
        assert len(fragments) >= 3 and json.loads("".join(fragments)) == {"city": "Paris", "days": 2}
        # cut off by max_tokens inside the call: finish_reason length, not a finished call
        cut = c.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=2)
        assert cut.choices[0].finish_reason == "length"


def test_named_json_tool_choice_writes_the_name_in_the_prompt(tmp_path_factory):
    """Qwen3's JSON form: a named function's call is opened up to its arguments (`"arguments": `);
    this model writes only the arguments object after that space. tool_choice required does not
    open it that far, and this model then writes no valid call: a clear error naming tool_choice,
    never its text passed off as the answer."""
    args = ['{"city": "Rome"}', "}\n", "</tool_call>"]
    path = write_scripted_gguf(tmp_path_factory.mktemp("scripted") / "json-args.gguf", args, template=QWEN3_TOOLS,
                               after=" ")
    named = {"type": "function", "function": {"name": "get_weather"}}
    with serve("--target", path, "--max-ctx", "1024") as s:
        c = s.client()
        r = c.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice=named)
        (call,) = r.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Rome"}
        assert r.choices[0].finish_reason == "tool_calls"
        content, calls, finish = _tool_stream(c, tool_choice=named)
        assert calls[0].function.name == "get_weather" and finish == ["tool_calls"]
        assert json.loads("".join(t.function.arguments for t in calls[1:])) == {"city": "Rome"}
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=4)
        assert e.value.body["code"] == "tool_call_missing" and e.value.body["param"] == "tool_choice"
        with pytest.raises(openai.APIError) as e:            # streamed: an error event instead of the finish
            _tool_stream(c, tool_choice="required", max_tokens=4)
        assert "needs a tool call" in e.value.message
        assert c.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice=named).choices[0].message.tool_calls


def test_tool_choice_required_with_the_xml_format(tmp_path_factory):
    body = ["<function=get_weather>", "\n<parameter=city>", "\nOslo\n", "</parameter>", "\n</function>", "\n</tool_call>"]
    with _server(tmp_path_factory, "xml-body", body, QWEN35_TOOLS) as s:
        c = s.client()
        assert c.chat.completions.create(model="any", messages=ASK, tools=TOOLS).choices[0].message.tool_calls is None
        content, calls, finish = _tool_stream(c, tool_choice="required")
        assert calls[0].function.name == "get_weather" and finish == ["tool_calls"]
        assert json.loads("".join(t.function.arguments for t in calls[1:])) == {"city": "Oslo"}


def test_tool_choice_that_cannot_be_forced_is_a_400(tmp_path_factory):
    """A chat template without a tool-call format: required cannot be honoured, so it is refused."""
    with _server(tmp_path_factory, "no-tools", ["Plain", " text."], CHATML) as s:
        with pytest.raises(openai.BadRequestError) as e:
            s.client().chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="required")
        assert e.value.body["param"] == "tool_choice" and "no tool-call format" in e.value.body["message"]
