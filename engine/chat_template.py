"""Render a GGUF's ``tokenizer.chat_template`` as HF transformers' ``apply_chat_template`` does.

Same Jinja semantics as transformers (``transformers.utils.chat_template_utils``): an
``ImmutableSandboxedEnvironment`` with ``trim_blocks``/``lstrip_blocks`` and the ``loopcontrols``
extension, a ``{% generation %}`` block that renders its body, ``tojson`` as plain ``json.dumps``
(no HTML escaping, ``ensure_ascii=False``), and the globals ``raise_exception``,
``strftime_now``, ``dict`` and ``namespace`` (which refuses ``_private`` attributes).  The
template sees ``messages``, ``add_generation_prompt``, ``tools``, ``documents``, ``bos_token``,
``eos_token`` and any extra keyword (``enable_thinking=False`` ...).  As in transformers,
messages are copied into plain JSON-like data first, and a message's reasoning under any of
``reasoning_content`` / ``thinking`` / ``reasoning`` is offered under the first two names too.

Needs only jinja2 (>= 3.1.6, the version transformers accepts for untrusted templates).
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable, Mapping

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplateError", "ChatTemplate", "CHATML_TEMPLATE"]


class ChatTemplateError(ValueError):
    """A chat template that does not compile or fails while rendering."""


# Used when a GGUF has no template: ChatML, what SmolLM2 and the Qwen family speak.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (HF assistant-mask marker): render the body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


class _Namespace(jinja2.utils.Namespace):
    """``namespace()`` that refuses underscore attributes, as transformers' sandbox does."""

    def __init__(*args, **kwargs):  # noqa: N805 - same signature trick as jinja2's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} is not allowed")


class _Dict:
    """``dict(...)`` / ``dict.fromkeys(...)`` without exposing the real type to the template."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def _plain(value: Any) -> Any:
    """Copy caller data into JSON-like types so the template can neither mutate it nor reach
    methods of rich objects; anything else becomes a ``<TypeName>`` placeholder."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    for base in (str, int, float):  # subclasses (str enums, numpy floats...) lose their methods
        if isinstance(value, base):
            return base(value) if base is not str else str.__str__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return f"<{type(value).__name__}>"


def _alias_reasoning(message: Any) -> Any:
    if isinstance(message, dict):
        reasoning = next((message[k] for k in _REASONING_KEYS if message.get(k) is not None), None)
        if reasoning is not None:
            return {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now,
                       dict=_Dict(), namespace=_Namespace)
    return env


class ChatTemplate:
    """A compiled chat template.

    ``ChatTemplate(template_str, bos_token, eos_token)``; ``template_str`` None or blank means
    the GGUF has no template, and ChatML is used instead (:data:`CHATML_TEMPLATE`)::

        <|im_start|>{role}\\n{content}<|im_end|>\\n   for every message, then
        <|im_start|>assistant\\n                      if add_generation_prompt

    ``is_fallback`` tells which one is in use.  Compile errors raise :class:`ChatTemplateError`
    here; render errors (including the template's own ``raise_exception``) in :meth:`render`.
    """

    def __init__(self, template_str: str | None, bos_token: str = "", eos_token: str = ""):
        self.is_fallback = template_str is None or not template_str.strip()
        self.source = CHATML_TEMPLATE if self.is_fallback else template_str
        self.bos_token, self.eos_token = bos_token or "", eos_token or ""
        try:
            self._template = _environment().from_string(self.source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template does not compile (line {e.lineno}): "
                                    f"{e.message}") from None

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> "ChatTemplate":
        """From anything with ``chat_template``, ``bos_token`` and ``eos_token`` attributes."""
        return cls(tokenizer.chat_template, tokenizer.bos_token, tokenizer.eos_token)

    def render(self, messages: Iterable[Mapping[str, Any]], add_generation_prompt: bool = True,
               *, tools: list | None = None, documents: list | None = None,
               **variables: Any) -> str:
        """The prompt text for ``messages`` (dicts with ``role`` and ``content``)."""
        msgs = [_alias_reasoning(m) for m in _plain(list(messages))]
        if not all(isinstance(m, dict) for m in msgs):
            raise ChatTemplateError("chat messages must be mappings with 'role' and 'content'")
        context = {"bos_token": self.bos_token, "eos_token": self.eos_token, **_plain(variables)}
        try:
            return self._template.render(messages=msgs, tools=_plain(tools),
                                         documents=_plain(documents),
                                         add_generation_prompt=add_generation_prompt, **context)
        except jinja2.TemplateError as e:  # includes raise_exception and sandbox violations
            raise ChatTemplateError(f"chat template failed to render: {e}") from None
        except Exception as e:  # e.g. TypeError from `'a' + none` inside the template
            raise ChatTemplateError(f"chat template failed to render: "
                                    f"{type(e).__name__}: {e}") from None
