"""engine/tokenizer.py against llama.cpp (llama-cpp-python, vocab-only) on SmolLM2's GGUF.

Besides the real SmolLM2-135M-Instruct file, small vocab-only GGUFs are written with SmolLM2's
tokens and merges but another ``tokenizer.ggml.pre`` (qwen2, qwen35) and a few extra tokens of
every type, so each pre-tokenizer regex and each special-token rule is checked against
llama.cpp on the same corpus.
"""
from __future__ import annotations

import ctypes
import random
import time
import unicodedata
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from reference import smollm2_path

SMOL = Path(smollm2_path())

from luce_engine import tokenizer as tk  # noqa: E402


# --------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class A:\n\tdef __init__(self):\n\t\tself.x = {'a': [1, 2, 3]}\n\n\n",
    "for (let i = 0; i < arr.length; i++) {\n  console.log(`item ${i}: ${arr[i]}`);\n}",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![0xFF; 16];\n"
    "    Ok(())\n}",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"héllo\")\n}\n",
    "#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | wc -c; done\n",
    "SELECT u.id, COUNT(*) AS n FROM users u JOIN orders o ON o.uid = u.id GROUP BY 1;",
    "<div class=\"x\">\n  <p>Hello &amp; welcome</p>\n</div>",
    "    \t  mixed_indent = True  # comment\n\t    x += 1\n",
    "if x:\r\n    y = 1\r\nelse:\r\n    y = 2\r\n",
    "λx. x + 1  ;; (define (sq x) (* x x))",
    "a=b&&c||d!=e<=f>=g->h::i...j",
    "    return self._cache[key]  # type: ignore[index]",
]
CJK = [
    "你好，世界！今天天气很好。", "我爱北京天安门。机器学习和深度学习", "日本語のテキストです。カタカナとひらがな。",
    "ｶﾀｶﾅ ﾊﾝｶｸ ﾃｷｽﾄ", "東京都渋谷区１２３－４５６", "한국어 텍스트입니다. 안녕하세요!",
    "中文English混合text测试123", "「引用」『二重』【括弧】〜ー・", "ㄅㄆㄇㄈ 注音符號",
]
EMOJI = [
    "😀😃😄😁", "👍🏽 thumbs up with skin tone", "👨‍👩‍👧‍👦 family ZWJ", "🇯🇵🇺🇸🇩🇪 flags",
    "1️⃣ keycap #️⃣", "❤️ red heart with VS16", "🏳️‍🌈 rainbow flag", "I ❤ 🍕 and 🍣!!!",
    "🧑🏿‍🚀🧑🏻‍🔬", "e😀e😀e",
]
SCRIPTS = [
    "مرحبا بالعالم", "السَّلَامُ عَلَيْكُمْ", "שָׁלוֹם עוֹלָם", "עברית בלי ניקוד",
    "नमस्ते दुनिया", "हिन्दी में क्षत्रिय", "สวัสดีครับ ภาษาไทย", "বাংলা ভাষা", "தமிழ் மொழி",
    "Ελληνικά κείμενο", "Русский текст, ёлка!", "Tiếng Việt có dấu", "ქართული ენა", "Հայերեն",
]
NUMBERS = [
    "1", "12", "123", "1234", "12345678901234567890", "3.14159265358979", "1,000,000.00",
    "-42", "1e-10", "0x1F", "２０２４年", "x² + y³ = ½", "Ⅻ ⅻ", "٠١٢٣٤", "१२३", "v1.2.3-rc4",
    "2024-01-02T03:04:05Z", "$1,299.99", "99%",
]
CONTRACTIONS = [
    "it's", "IT'S", "It'S", "they're", "THEY'RE", "I've", "I'VE", "we'll", "WE'LL", "he'd",
    "HE'D", "I'm", "I'M", "don't", "DON'T", "'s 're 've 'm 'll 'd 't", "'S 'RE 'VE 'M 'LL 'D 'T",
    "'ſ 'K", "rock'n'roll", "it’s curly", "''quoted''",
]
WEB = [
    "https://example.com/path/to/page?query=1&b=%20x#frag",
    "mailto:someone@example.org", "ftp://[::1]:21/file.tar.gz", "C:\\Users\\me\\file.txt",
    "/usr/local/bin/python3.11", "user@host:~$ ls -la",
]
DOCS = [
    '{"name": "Luce", "ok": true, "n": [1, 2.5, null], "nested": {"k": "v"}}',
    '[\n  {\n    "id": 1,\n    "tags": ["a", "b"]\n  }\n]',
    "# Title\n\n## Sub\n\n- item 1\n- item 2\n\n```python\nprint(1)\n```\n",
    "| a | b |\n|---|---|\n| 1 | 2 |", "**bold** _it_ `code` [link](http://x.y)",
    "$$\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}$$", "> quote\n>> nested",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! Are you sure?",
]
SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n"
    "<|im_start|>assistant\n", "<|im_start|><|im_start|>", "<|im_start", "x<|endoftext|>y",
    "<reponame>luce<file_sep>main.py", "< |im_start| >", "<|im_end|>\n\n<|im_end|>",
    "<think>\nreasoning here\n</think>\n\nanswer", "<tool_call>{\"a\": 1}</tool_call>",
    "x <sp> y", "<<a>>>", "<unk> token", "<|eot_id|>", "<|channel|>analysis",
    "<|fim_pad|><|repo_name|>r<|file_sep|>f", "[PAD49159]", "<0x41>",
]
ODD = [
    "", " ", "\n", "\t", "\r", "\r\n", "\x00", "a\x00b", "\x1c\x1d\x1e\x1f", "\x0b\x0c",
    "a\x85b", "a\u00a0b", "a\u2028b\u2029", "a\u3000b", "\ufeffbom", "zero\u200bwidth",
    "soft\u00adhyphen", "\x7f\x80\x9f", "\ue000\uf8ff private", "\U000f0000\U0010fffd",
    "\U0001d400\U0001d7ce math", "\u0378\u0379 unassigned", "aaaa" * 100, "!" * 40, "." * 33,
    "-" * 80 + "\n" + "=" * 80,
]
NON_NFC = [
    "e\u0301", "A\u030a", "Cre\u0300me bru\u0302le\u0301e", "\u1100\u1161\u11a8",
    "ﬁ ﬂ ligatures", "ﾊﾟ", "Ω Å K", "a\u0308\u0301\u0323", "n\u0303o\u0303",
    "cafe\u0301's re\u0301sume\u0301", "ক's কি's", "x\u0301\u0302 'll",  # marks: qwen2 != qwen35
]
NON_NFC += [unicodedata.normalize("NFD", s) for s in ("Tiếng Việt", "한국어", "Ελληνικά")]


def _whitespace_runs() -> list[str]:
    out = []
    for n in range(1, 13):
        for ws in (" " * n, "\t" * n, "\n" * n, (" \t" * n)[:n], ("\n " * n)[:n], ("\r\n" * n)[:n]):
            out += [ws, f"a{ws}b", f"x{ws}", f"{ws}y"]
    return out


def _random_unicode(seed: int = 1234, count: int = 60) -> list[str]:
    rng = random.Random(seed)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF),
              (0x1100, 0x11FF), (0x2000, 0x2BFF), (0x3000, 0x9FFF), (0xAC00, 0xD7A3),
              (0xE000, 0xFFFD), (0x10000, 0x1FFFF), (0x20000, 0x2FFFF), (0xE0000, 0xE01EF)]
    out = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randint(1, 30)):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)))
            if rng.random() < 0.2:
                chars.append(rng.choice([" ", "  ", "\n", "\t", "'s", "1", "<|im_end|>"]))
        out.append("".join(chars))
    ascii_soup = [chr(c) for c in range(32, 127)] + ["\n", "\t", " "] * 5
    out += ["".join(rng.choice(ascii_soup) for _ in range(rng.randint(1, 60))) for _ in range(20)]
    return out


CORPUS = (CODE + CJK + EMOJI + SCRIPTS + NUMBERS + CONTRACTIONS + WEB + DOCS + SPECIAL + ODD
          + NON_NFC + _whitespace_runs() + _random_unicode())


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 200
    assert all(isinstance(s, str) for s in CORPUS)
    for s in CORPUS:
        s.encode("utf-8")  # no lone surrogates: llama.cpp takes bytes


# --------------------------------------------------------------------------------------
# reference helpers
# --------------------------------------------------------------------------------------

def _llama(path: Path) -> llama_cpp.Llama:
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


def _ref_detok(llm: llama_cpp.Llama, ids: list[int], special: bool) -> bytes:
    vocab = llm._model.vocab
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    size = 64 + 32 * len(ids)
    for _ in range(2):
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, special)
        if n >= 0:
            return buf.raw[:n]
        size = -n + 1
    raise AssertionError("llama_detokenize kept asking for more room")


def _ref_piece(llm: llama_cpp.Llama, tid: int, special: bool) -> bytes:
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, tid, buf, 256, 0, special)
    assert n >= 0
    return buf.raw[:n]


def _mismatches(ours, theirs, texts, limit=5):
    bad = [(t, o, r) for t, o, r in zip(texts, ours, theirs) if o != r]
    return "\n".join(f"{t!r}:\n  ours  {o}\n  llama {r}" for t, o, r in bad[:limit]), len(bad)


# --------------------------------------------------------------------------------------
# vocab-only GGUFs with other pre-tokenizers
# --------------------------------------------------------------------------------------

# Appended to SmolLM2's vocabulary: one of each token type and every llama.cpp override rule.
EXTRA_TOKENS = [
    ("<think>", 4), ("</think>", 4), ("<tool_call>", 4), ("</tool_call>", 4),
    ("<|fim_pad|>", 3), ("<|repo_name|>", 3), ("<|file_sep|>", 3),
    ("<|eot_id|>", 1),      # NORMAL, but llama.cpp turns it into an EOG control token
    ("[PAD49159]", 5),      # UNUSED hole
    (" <sp> ", 4),          # user-defined with spaces, matched and printed raw
    ("<<a", 4), ("a>>>", 4),  # overlapping: llama.cpp cuts the longer one first
    ("<0x41>", 6),          # BYTE
    ("<unk>", 2),           # UNKNOWN: special like CONTROL
    ("<|channel|>", 3),     # gpt-oss rule: always USER_DEFINED
]


@pytest.fixture(scope="session")
def smol_meta():
    return tk.read_tokenizer_metadata(SMOL)


def _write_vocab_gguf(path: Path, meta: dict, *, pre: str, model: str = "gpt2",
                      extra=EXTRA_TOKENS, add_bos=None, add_eos=None, template=None):
    tokens = list(meta["tokenizer.ggml.tokens"]) + [t for t, _ in extra]
    types = list(map(int, meta["tokenizer.ggml.token_type"])) + [ty for _, ty in extra]
    w = gguf.GGUFWriter(str(path), "llama")
    # a llama with no tensors: enough for llama.cpp to load the vocabulary only
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(meta["tokenizer.ggml.merges"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    if template is not None:
        w.add_chat_template(template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


VARIANTS = {  # name -> GGUF writer kwargs (None = the real SmolLM2 file)
    "smollm2": None,
    "smollm-extra": dict(pre="smollm", add_bos=True, add_eos=True),
    "qwen2": dict(pre="qwen2"),
    "qwen35": dict(pre="qwen35", add_bos=False),
}


@pytest.fixture(scope="session")
def variant_paths(tmp_path_factory, smol_meta):
    d = tmp_path_factory.mktemp("vocab")
    return {name: SMOL if kw is None else _write_vocab_gguf(d / f"{name}.gguf", smol_meta, **kw)
            for name, kw in VARIANTS.items()}


@pytest.fixture(scope="session")
def pair(variant_paths):
    cache = {}

    def get(name):
        if name not in cache:
            path = variant_paths[name]
            cache[name] = (tk.Tokenizer.from_gguf(path), _llama(path))
        return cache[name]
    return get


# --------------------------------------------------------------------------------------
# metadata reader
# --------------------------------------------------------------------------------------

def test_reader_matches_gguf_reader(smol_meta):
    r = gguf.GGUFReader(SMOL)
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        ours = smol_meta[key]
        ref = field.contents()
        if isinstance(ours, np.ndarray):
            assert ours.tolist() == list(ref), key
        else:
            assert ours == ref, key
    assert smol_meta["general.architecture"] == "llama"
    assert not any(k.startswith("llama.") for k in smol_meta)  # only what we asked for


def test_build_time():
    t = time.perf_counter()
    tok = tk.Tokenizer.from_gguf(SMOL)
    elapsed = time.perf_counter() - t
    print(f"\nSmolLM2 tokenizer built in {elapsed * 1000:.0f} ms")
    assert tok.n_vocab == 49152
    assert elapsed < 2.0


# --------------------------------------------------------------------------------------
# parity with llama.cpp
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("parse_special", [True, False], ids=["special", "plain"])
def test_ids_match_llama_cpp(pair, variant, parse_special):
    tok, llm = pair(variant)
    ours = [tok.encode(s, parse_special=parse_special) for s in CORPUS]
    ref = [llm.tokenize(s.encode(), add_bos=False, special=parse_special) for s in CORPUS]
    msg, n_bad = _mismatches(ours, ref, CORPUS)
    assert n_bad == 0, f"{n_bad}/{len(CORPUS)} strings differ:\n{msg}"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_add_special_matches_llama_cpp(pair, variant):
    tok, llm = pair(variant)
    texts = ["", "hello", "<|im_start|>user\nhi<|im_end|>\n", " 12 "]
    for s in texts:
        ref = llm.tokenize(s.encode(), add_bos=True, special=True)
        assert tok.encode(s, add_special=True) == ref
    assert tok.add_bos == bool(llama_cpp.llama_vocab_get_add_bos(llm._model.vocab))
    assert tok.add_eos == bool(llama_cpp.llama_vocab_get_add_eos(llm._model.vocab))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_decode_matches_llama_cpp(pair, variant):
    tok, llm = pair(variant)
    # SmolLM2 has no token for a few bytes (0x04, 0x1d, 0xf1, ...): llama.cpp drops them
    byte_tokens = {tok.token_to_piece(i) for i in range(tok.n_vocab)}
    for s in CORPUS:
        ids = tok.encode(s)
        for skip in (False, True):
            assert tok.decode_bytes(ids, skip_special=skip) == _ref_detok(llm, ids, not skip), s
        if all(bytes([b]) in byte_tokens for b in s.encode()):
            assert tok.decode(ids) == s  # otherwise byte-level BPE is lossless


@pytest.mark.parametrize("variant", ["smollm2", "qwen2"])
def test_every_piece_matches_llama_cpp(pair, variant):
    tok, llm = pair(variant)
    for special in (True, False):
        bad = [i for i in range(tok.n_vocab)
               if tok.token_to_piece(i, special=special) != _ref_piece(llm, i, special)]
        assert not bad, [(i, tok.token_text(i)) for i in bad[:10]]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_special_ids_match_llama_cpp(pair, variant):
    tok, llm = pair(variant)
    vocab = llm._model.vocab
    assert tok.n_vocab == llama_cpp.llama_vocab_n_tokens(vocab)
    assert tok.bos_id == llama_cpp.llama_vocab_bos(vocab)
    assert tok.eos_id == llama_cpp.llama_vocab_eos(vocab)
    ref_eog = {i for i in range(tok.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    assert tok.eog_ids == ref_eog
    bad = [i for i in range(tok.n_vocab)
           if tok.token_attr(i) != llama_cpp.llama_vocab_get_attr(vocab, i)]
    assert not bad, [(i, tok.token_text(i), tok.token_attr(i)) for i in bad[:10]]


def test_smollm2_properties(pair):
    tok, llm = pair("smollm2")
    assert (tok.bos_id, tok.eos_id) == (1, 2)
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tok.eog_ids == {0, 2, 4}  # <|endoftext|>, <|im_end|>, <reponame> (FIM repo)
    assert tok.chat_template == llm.metadata["tokenizer.chat_template"]
    assert tok.pre == "smollm" and not tok.add_bos


def test_special_token_rules(pair):
    tok, _ = pair("qwen2")
    v = tok.token_id
    # user-defined tokens are cut out even without parse_special; control ones are not
    assert tok.encode("<think>x</think>", parse_special=False)[0] == v("<think>")
    assert v("<|im_start|>") not in tok.encode("<|im_start|>", parse_special=False)
    # longest text first, over the whole text (not leftmost-longest)
    assert tok.encode("<<a>>>")[-1] == v("a>>>")
    assert v("<|eot_id|>") in tok.eog_ids and tok.is_control(v("<|eot_id|>"))
    assert not tok.is_control(v("<|channel|>"))
    assert tok.decode([v("<0x41>"), v("[PAD49159]"), v("<unk>")]) == "A<unk>"
    assert tok.decode([v("<unk>"), v(" <sp> ")], skip_special=True) == " <sp> "


# --------------------------------------------------------------------------------------
# streaming
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ["smollm2", "qwen35"])
def test_stream_decoder_matches_full_decode(pair, variant):
    tok, _ = pair(variant)
    for s in CORPUS:
        ids = tok.encode(s)
        for skip in (False, True):
            sd = tok.stream_decoder(skip_special=skip)
            parts = [sd.push(i) for i in ids]
            tail = sd.flush()
            assert "".join(parts) + tail == tok.decode(ids, skip_special=skip)
            assert not any("\ufffd" in p for p in parts), s  # valid text: never a half char
            assert tail == ""


def test_stream_decoder_holds_split_characters(pair):
    tok, _ = pair("smollm2")
    ids = tok.encode("😀")
    assert len(ids) > 1  # one emoji, several byte tokens
    sd = tok.stream_decoder()
    assert [sd.push(i) for i in ids] == [""] * (len(ids) - 1) + ["😀"]
    sd.push(ids[0])
    assert sd.flush() == "\ufffd"  # an unfinished character is flushed as U+FFFD
    assert sd.feed(ids) == "😀"  # and the decoder is reusable after flush


# --------------------------------------------------------------------------------------
# transformers wrapper and errors
# --------------------------------------------------------------------------------------

def test_hf_tokenizer_wrapper(pair):
    tok, _ = pair("smollm2")
    hf = tok.hf_tokenizer
    assert hf.bos_token == "<|im_start|>" and hf.eos_token == "<|im_end|>"
    for s in CODE + CJK + SPECIAL[:8] + CONTRACTIONS:
        assert hf.encode(s, add_special_tokens=False) == tok.encode(s), s
        assert hf.decode(tok.encode(s)) == s


@pytest.mark.parametrize("kw, needle", [
    (dict(pre="llama-bpe"), "'llama-bpe'"),
    (dict(pre="smollm", model="llama"), "'llama'"),
])
def test_unsupported_tokenizer(tmp_path, smol_meta, kw, needle):
    path = _write_vocab_gguf(tmp_path / "x.gguf", smol_meta, extra=[], **kw)
    with pytest.raises(tk.TokenizerError, match=needle) as e:
        tk.Tokenizer.from_gguf(path)
    assert str(path) in str(e.value)
    assert isinstance(e.value, ValueError)


def test_bad_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("just some prose, not a model\n")
    with pytest.raises(tk.TokenizerError, match="magic"):
        tk.Tokenizer.from_gguf(text)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(SMOL.read_bytes()[:300_000])  # ends inside tokenizer.ggml.tokens
    with pytest.raises(tk.TokenizerError, match="truncated"):
        tk.Tokenizer.from_gguf(cut)
    with pytest.raises(tk.TokenizerError, match="cannot read"):
        tk.Tokenizer.from_gguf(tmp_path / "missing.gguf")


def test_bad_metadata(smol_meta):
    base = {k: v for k, v in smol_meta.items()}
    with pytest.raises(tk.TokenizerError, match="tokenizer.ggml.merges"):
        tk.Tokenizer({k: v for k, v in base.items() if k != "tokenizer.ggml.merges"})
    dup = dict(base, **{"tokenizer.ggml.tokens": base["tokenizer.ggml.tokens"][:-1] + ["a"]})
    with pytest.raises(tk.TokenizerError, match="duplicate"):
        tk.Tokenizer(dup)
    with pytest.raises(tk.TokenizerError, match="out of range"):
        tk.Tokenizer(base).decode([10**6])
