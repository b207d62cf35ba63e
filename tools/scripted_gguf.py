"""Scripted GGUF models for tests: a real llama-architecture file whose greedy reply to any chat
prompt is a fixed token sequence (a tool call, a think block …), with the chat template you give.

The model is a lookup table built from weights: attention and FFN outputs are zero, so the
residual stream is the current token's embedding; each scripted token's embedding is a one-hot
direction and the output head maps that direction to the next scripted token. So the prompt's
last token (the template's generation prompt ends in "\\n") is followed by script[0], script[i] by
script[i+1], and the last by the end-of-turn token <|im_end|>. Each script piece is one vocabulary
token (after the 256 byte tokens), so it streams as one engine step; pieces must be distinct and
longer than one character.

    write_scripted_gguf(path, ["<tool_call>", '\\n{"name": "f", "arguments": ', ...], template=QWEN3_TOOLS)
"""
from __future__ import annotations

import numpy as np
from gguf import GGUFValueType as VT

from tools.tiny_gguf import TinyConfig, WEIGHT_TYPES, _byte_chars, _Writer, model_kvs

CONTROL = ("<|im_start|>", "<|im_end|>")

# A ChatML template with Qwen3's tool conventions (written for these tests): the tools as JSON in a
# <tools> block of the system turn, the assistant's calls as <tool_call> JSON, tool results as
# <tool_response> blocks in a user turn.
QWEN3_TOOLS = (
    "{% if tools %}<|im_start|>system{{ '\n' }}"
    "{% if messages[0].role == 'system' %}{{ messages[0].content + '\n\n' }}{% endif %}"
    "# Tools\n\nYou may call one or more functions. Function signatures in <tools></tools>:\n<tools>"
    "{% for tool in tools %}{{ '\n' + (tool | tojson) }}{% endfor %}{{ '\n' }}</tools>\n\n"
    "For each call, return a JSON object with the function name and arguments in <tool_call></tool_call>:\n"
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>{{ '\n' }}"
    "{% elif messages[0].role == 'system' %}<|im_start|>system{{ '\n' + messages[0].content }}<|im_end|>{{ '\n' }}"
    "{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}<|im_start|>user{{ '\n' + m.content }}<|im_end|>{{ '\n' }}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant{{ '\n' + m.content }}"
    "{% for c in m.tool_calls or [] %}{% set f = c.function %}"
    "{% if m.content or not loop.first %}{{ '\n' }}{% endif %}<tool_call>{{ '\n' }}{\"name\": \"{{ f.name }}\", "
    "\"arguments\": {% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}"
    "}{{ '\n' }}</tool_call>"
    "{% endfor %}<|im_end|>{{ '\n' }}"
    "{% elif m.role == 'tool' %}<|im_start|>user{{ '\n' }}<tool_response>{{ '\n' + m.content + '\n' }}"
    "</tool_response><|im_end|>{{ '\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\n' }}{% endif %}"
)

# The same conversation rules with Qwen3.5's XML calls: <function=name><parameter=p>value</parameter>.
QWEN35_TOOLS = QWEN3_TOOLS.replace(
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    "<tool_call>\n<function=name>\n<parameter=p>\nvalue\n</parameter>\n</function>\n</tool_call>").replace(
    "<tool_call>{{ '\n' }}{\"name\": \"{{ f.name }}\", "
    "\"arguments\": {% if f.arguments is string %}{{ f.arguments }}{% else %}{{ f.arguments | tojson }}{% endif %}"
    "}{{ '\n' }}</tool_call>",
    "<tool_call>{{ '\n' }}<function={{ f.name }}>{% for k, v in f.arguments | items %}{{ '\n' }}<parameter={{ k }}>"
    "{{ '\n' + (v if v is string else v | tojson) + '\n' }}</parameter>{% endfor %}{{ '\n' }}</function>{{ '\n' }}"
    "</tool_call>")
assert QWEN35_TOOLS.count("<function=") == 2

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role + '\n' + m.content }}<|im_end|>{{ '\n' }}{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant{{ '\n' }}{% endif %}")


def _tokenizer(script: list[str], template: str) -> tuple[list, int, dict[str, int]]:
    chars = _byte_chars()
    tokens, types = list(chars), [1] * 256
    ids = {}
    for piece in script:
        if len(piece) < 2 or piece in ids:
            raise ValueError(f"script pieces must be distinct and longer than one character: {piece!r}")
        ids[piece] = len(tokens)
        tokens.append("".join(chars[b] for b in piece.encode("utf-8")))
        types.append(1)
    for c in CONTROL:
        ids[c] = len(tokens)
        tokens.append(c)
        types.append(3)
    kvs = [
        ("tokenizer.ggml.model", "gpt2", VT.STRING, None),
        ("tokenizer.ggml.pre", "smollm", VT.STRING, None),
        ("tokenizer.ggml.tokens", tokens, VT.ARRAY, VT.STRING),
        ("tokenizer.ggml.token_type", types, VT.ARRAY, VT.INT32),
        ("tokenizer.ggml.merges", [], VT.ARRAY, VT.STRING),
        ("tokenizer.ggml.bos_token_id", ids["<|im_start|>"], VT.UINT32, None),
        ("tokenizer.ggml.eos_token_id", ids["<|im_end|>"], VT.UINT32, None),
        ("tokenizer.ggml.add_bos_token", False, VT.BOOL, None),
        ("tokenizer.ggml.add_space_prefix", False, VT.BOOL, None),
        ("tokenizer.chat_template", template, VT.STRING, None),
    ]
    return kvs, len(tokens), ids


def write_scripted_gguf(path, script: list[str], *, template: str = CHATML, after: str = "\n") -> str:
    """A model whose greedy reply to a prompt ending in `after` (one character: its byte token) is
    "".join(script), then end of turn. After any other token it writes byte token 0 (zero logits)."""
    cfg = TinyConfig(n_embd=64, n_layer=1, n_head=4, n_head_kv=2, head_dim=16, n_ff=64, n_ctx_train=16384)
    tok_kvs, n_vocab, ids = _tokenizer(script, template)
    if len(after.encode("utf-8")) != 1:
        raise ValueError(f"after must be one ASCII character, got {after!r}")
    chain = [ord(after)] + [ids[p] for p in script] + [ids["<|im_end|>"]]
    E = cfg.n_embd
    if len(chain) - 1 > E:
        raise ValueError(f"at most {E} script pieces")
    emb = np.zeros((n_vocab, E), np.float32)
    head = np.zeros((n_vocab, E), np.float32)
    for k, (src, dst) in enumerate(zip(chain, chain[1:])):
        emb[src, k] = 1.0
        head[dst, k] = 10.0
    rng = np.random.default_rng(0)
    q_dim, kv_dim = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    small = lambda rows, cols: (0.1 * rng.standard_normal((rows, cols))).astype(np.float32)  # noqa: E731
    tensors = [
        ("token_embd.weight", emb),
        ("blk.0.attn_norm.weight", np.ones(E, np.float32)),
        ("blk.0.attn_q.weight", small(q_dim, E)),
        ("blk.0.attn_k.weight", small(kv_dim, E)),
        ("blk.0.attn_v.weight", small(kv_dim, E)),
        ("blk.0.attn_output.weight", np.zeros((E, q_dim), np.float32)),   # attention adds nothing
        ("blk.0.ffn_norm.weight", np.ones(E, np.float32)),
        ("blk.0.ffn_gate.weight", small(cfg.n_ff, E)),
        ("blk.0.ffn_up.weight", small(cfg.n_ff, E)),
        ("blk.0.ffn_down.weight", np.zeros((E, cfg.n_ff), np.float32)),   # neither does the FFN
        ("output_norm.weight", np.ones(E, np.float32)),
        ("output.weight", head),
    ]
    w = _Writer(str(path), "llama")
    for key, val, vt, *sub in model_kvs(cfg, "llama", n_vocab, WEIGHT_TYPES["f32"][1]):
        w.add_key_value(key, val, vt, sub_type=sub[0] if sub else None)
    for key, val, vt, sub in tok_kvs:
        w.add_key_value(key, val, vt, sub_type=sub)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


__all__ = ["write_scripted_gguf", "QWEN3_TOOLS", "QWEN35_TOOLS", "CHATML"]
