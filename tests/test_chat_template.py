"""engine/chat_template.py against llama-cpp-python's Jinja2ChatFormatter and transformers'
own renderer (``render_jinja_template``, torch-free) on SmolLM2's GGUF template and a
Qwen3-style template with <think> handling."""
from __future__ import annotations

import copy
from datetime import datetime
from pathlib import Path

import llama_cpp
import pytest

from reference import smollm2_path
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

SMOL = Path(smollm2_path())

from luce_engine import chat_template as ct  # noqa: E402


@pytest.fixture(scope="module")
def smol():
    llm = llama_cpp.Llama(model_path=str(SMOL), vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    bos, eos = (llama_cpp.llama_vocab_get_text(vocab, i).decode()
                for i in (llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab)))
    return llm.metadata["tokenizer.chat_template"], bos, eos


def _llama_cpp(template, bos, eos, messages, gen, **kw):
    fmt = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos, add_generation_prompt=gen)
    return fmt(messages=copy.deepcopy(messages), **kw).prompt


def _transformers(template, bos, eos, messages, gen, **kw):
    from transformers.utils.chat_template_utils import render_jinja_template
    rendered, _ = render_jinja_template(
        conversations=[copy.deepcopy(messages)], chat_template=template,
        add_generation_prompt=gen, bos_token=bos, eos_token=eos, **kw)
    return rendered[0]


SYS = {"role": "system", "content": "You are a terse assistant."}
CONVERSATIONS = {
    "system+user": [SYS, {"role": "user", "content": "What is 2+2?"}],
    "user only": [{"role": "user", "content": "Hello!"}],
    "multi-turn": [SYS, {"role": "user", "content": "Hi"},
                   {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke.\nA short one."}],
    "unicode": [{"role": "user", "content": "日本語で答えて 😀 — naïve café, مرحبا"},
                {"role": "assistant", "content": "はい！👨‍👩‍👧"},
                {"role": "user", "content": "ok\t\n"}],
    "jinja-looking": [{"role": "user",
                       "content": "{{ x }} {% if y %}z{% endif %} {# c #} <|im_end|>"}],
    "empty content": [{"role": "user", "content": ""}],
}


@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_smollm2_template_matches_references(smol, name, gen):
    template, bos, eos = smol
    messages = CONVERSATIONS[name]
    before = copy.deepcopy(messages)
    ours = ct.ChatTemplate(template, bos, eos).render(messages, add_generation_prompt=gen)
    assert ours == _llama_cpp(template, bos, eos, messages, gen)
    assert ours == _transformers(template, bos, eos, messages, gen)
    assert messages == before  # the caller's messages are never touched
    assert ours.endswith("<|im_start|>assistant\n") == gen


def test_smollm2_template_text(smol):
    template, bos, eos = smol
    assert (bos, eos) == ("<|im_start|>", "<|im_end|>")
    out = ct.ChatTemplate(template, bos, eos).render([{"role": "user", "content": "Hi"}])
    assert out == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                   "Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\n")


# A Qwen3-style ChatML template (written for this test): tools as JSON, the last user query
# found with a namespace, reasoning kept only after it, tool calls/responses, enable_thinking.
QWEN3_STYLE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- '# Tools\\n\\nYou may call these functions:\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' + tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query=messages|length - 1, searching=true) %}
{%- for message in messages[::-1] %}
    {%- set idx = messages|length - 1 - loop.index0 %}
    {%- if ns.searching and message.role == 'user' and not message.content.startswith('<tool_response>') %}
        {%- set ns.searching = false %}
        {%- set ns.last_query = idx %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'system' and loop.first %}
    {%- elif message.role in ['user', 'system'] %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content }}
        {%- endif %}
        {%- for call in message.tool_calls or [] %}
            {%- if call.function is defined %}{%- set call = call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' + call.name + '", "arguments": ' }}
            {{- call.arguments if call.arguments is string else call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city <b>now</b>",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
QWEN_CONVERSATIONS = {
    "thinking in content": [SYS, {"role": "user", "content": "2+2?"},
                            {"role": "assistant", "content": "<think>\nsimple sum\n</think>\n\n4"},
                            {"role": "user", "content": "and 3+3?"}],
    "reasoning_content": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello",
                           "reasoning_content": "greet back"}],
    "tool round trip": [
        SYS, {"role": "user", "content": "Weather in Paris and Köln?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Köln"}'}}]},
        {"role": "tool", "content": "18°C sunny"}, {"role": "tool", "content": "12°C rain"},
        {"role": "assistant", "content": "<think>both done</think>Paris 18°C, Köln 12°C."}],
    "unicode": [{"role": "user", "content": "你好 {{ x }} 😀"}],
}


@pytest.mark.parametrize("extra", [{}, {"enable_thinking": False}, {"tools": TOOLS}],
                         ids=["plain", "no-think", "tools"])
@pytest.mark.parametrize("gen", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", list(QWEN_CONVERSATIONS))
def test_qwen3_style_template_matches_references(name, gen, extra):
    messages = QWEN_CONVERSATIONS[name]
    template = ct.ChatTemplate(QWEN3_STYLE, "", "<|im_end|>")
    ours = template.render(messages, add_generation_prompt=gen, **extra)
    assert ours == _llama_cpp(QWEN3_STYLE, "", "<|im_end|>", messages, gen, **extra)
    assert ours == _transformers(QWEN3_STYLE, "", "<|im_end|>", messages, gen, **extra)


def test_qwen3_style_think_handling():
    t = ct.ChatTemplate(QWEN3_STYLE, "", "<|im_end|>")
    out = t.render(QWEN_CONVERSATIONS["thinking in content"])
    assert "simple sum" not in out  # reasoning before the last user query is dropped
    assert "<|im_start|>assistant\n4<|im_end|>\n" in out
    out = t.render(QWEN_CONVERSATIONS["reasoning_content"], add_generation_prompt=False)
    assert out.endswith("<|im_start|>assistant\n<think>\ngreet back\n</think>\n\nhello<|im_end|>\n")
    assert t.render([{"role": "user", "content": "x"}], enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # reasoning under another name reaches the template as reasoning_content, as in transformers
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo", "thinking": "hm"}]
    assert t.render(msgs, False) == _transformers(QWEN3_STYLE, "", "<|im_end|>", msgs, False)
    assert "<think>\nhm\n</think>" in t.render(msgs, False)


@pytest.mark.parametrize("template", [
    "{{ messages | tojson }}|{{ tools | tojson(indent=2) }}",
    "{% for m in messages %}{% if loop.index0 == 1 %}{% break %}{% endif %}{{ m.content }}"
    "{% endfor %}",
    "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
    "  {% if true %}\n    x\n  {% endif %}\n{{ bos_token }}|{{ eos_token }}",
    "{% set d = dict(a=1, b=[1, 2]) %}{{ d | tojson }}{{ dict.fromkeys(['x'], 0) | tojson }}",
])
def test_jinja_semantics_match_references(template):
    messages = [{"role": "user", "content": "<b>é</b> & \"q\""},
                {"role": "assistant", "content": "ok"}]
    ours = ct.ChatTemplate(template, "<s>", "</s>").render(messages, tools=TOOLS)
    assert ours == _transformers(template, "<s>", "</s>", messages, True, tools=TOOLS)
    if "dict" not in template:  # llama-cpp-python does not provide dict()
        assert ours == _llama_cpp(template, "<s>", "</s>", messages, True, tools=TOOLS)


def test_strftime_now():
    t = ct.ChatTemplate("{{ strftime_now('%Y') }}")
    assert t.render([]) == str(datetime.now().year)


def test_fallback_is_chatml():
    for missing in (None, "", "  \n"):
        t = ct.ChatTemplate(missing, "", "")
        assert t.is_fallback
        msgs = [SYS, {"role": "user", "content": "Hi"}]
        assert t.render(msgs) == ("<|im_start|>system\nYou are a terse assistant.<|im_end|>\n"
                                  "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
        assert t.render(msgs, add_generation_prompt=False).endswith("Hi<|im_end|>\n")
    assert not ct.ChatTemplate("{{ 1 }}").is_fallback


def test_for_tokenizer():
    class Tok:
        chat_template = "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"
        bos_token, eos_token = "<s>", "</s>"
    out = ct.ChatTemplate.for_tokenizer(Tok).render([{"role": "user", "content": "x"}])
    assert out == "<s>x</s>"


@pytest.mark.parametrize("template, needle", [
    ("{% for m in messages %}{{ m.content }}", "compile"),
    ("{{ messages[0].content ", "compile"),
    ("{% generation %}x", "compile"),
])
def test_template_that_does_not_compile(template, needle):
    with pytest.raises(ct.ChatTemplateError, match=needle) as e:
        ct.ChatTemplate(template, "", "")
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("template, needle", [
    ("{{ raise_exception('Conversation roles must alternate') }}", "roles must alternate"),
    ("{{ messages[0].content + 1 }}", "TypeError"),
    ("{{ messages.append(1) }}", "render"),                 # immutable sandbox
    ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "render"),
    ("{% set ns = namespace(_x=1) %}", "_x"),
    ("{{ messages[5].content.upper() }}", "render"),         # undefined attribute of undefined
])
def test_template_that_fails_to_render(template, needle):
    msgs = [{"role": "user", "content": "hi"}]
    t = ct.ChatTemplate(template, "", "")
    with pytest.raises(ct.ChatTemplateError, match=needle):
        t.render(msgs)
    assert msgs == [{"role": "user", "content": "hi"}]


def test_unknown_role_in_qwen_template():
    with pytest.raises(ct.ChatTemplateError, match="Unexpected message role: narrator"):
        ct.ChatTemplate(QWEN3_STYLE).render([{"role": "narrator", "content": "x"}])


def test_messages_must_be_mappings():
    with pytest.raises(ct.ChatTemplateError, match="mappings"):
        ct.ChatTemplate(None).render(["just a string"])
