"""compress(): attachment + question → kept target-token spans, across tokenizers.

A tiny random qwen3 scorer with a byte-level vocabulary scores; the target tokenizer is SmolLM2's
(49K tokens), so every span goes scorer tokens → bytes → target tokens."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import GenerationCancelled, Model, Scorer
from luce_engine.pflash_selection import SelectionConfig, token_byte_offsets
from luce_engine.pflash import CompressionConfig, compress
from luce_engine.tokenizer import Tokenizer
from reference import DEVICE, THREADS, smollm2_path
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

TEXT = ("Quarterly notes. " + " ".join(f"Item {i} costs {i * 37 % 1000} euros, 東京 {i} 🚀." for i in range(60))
        + "\ndef total(xs):\n    return sum(x * 2 for x in xs)\n"
        + " ".join(f"Row {i}: {i * 7919 % 10007} units shipped to café №{i}." for i in range(60)))
QUESTION = "\n\nWhich item costs 296 euros?"


@pytest.fixture(scope="module")
def scorer(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("s") / "s.gguf", TinyConfig(arch="qwen3", n_vocab=400, head_dim=32))
    return Scorer(Model(path, device=DEVICE, n_threads=THREADS), n_batch=256, sparse_threshold=1024, sparse_window=512)


@pytest.fixture(scope="module")
def target_tok():
    return Tokenizer.from_gguf(smollm2_path())


def kept_bytes(tok, ids, spans):
    off = token_byte_offsets(ids, tok.token_to_piece)
    covered = np.zeros(int(off[-1]), dtype=bool)
    for s, e in spans:
        covered[off[s]:off[e]] = True
    return covered


def test_spans_cover_the_scorer_selection_across_tokenizers(scorer, target_tok):
    # anchors off: with a byte-level scorer vocabulary 4-grams are 4 characters, rarely distinctive
    cfg = CompressionConfig(keep_ratio=0.1, selection=SelectionConfig(anchor_n=0))
    c = compress(TEXT, QUESTION, scorer, target_tok, cfg)
    tgt = target_tok.encode(TEXT, parse_special=False)
    assert c.target_tokens == tgt and c.n_original == len(tgt)
    assert c.scorer_tokens == len(scorer.tokenizer.encode(TEXT, parse_special=False)) != len(tgt)
    # spans are ordered, disjoint, inside the attachment, and the kept tokens are exactly theirs
    assert all(0 <= s < e <= len(tgt) for s, e in c.spans)
    assert all(a[1] < b[0] for a, b in zip(c.spans, c.spans[1:]))
    assert c.kept_tokens == [t for s, e in c.spans for t in tgt[s:e]] and c.n_kept == len(c.kept_tokens)
    # every byte the scorer kept is kept in target tokens, and not much more (one token per edge)
    doc = scorer.tokenizer.encode(TEXT, parse_special=False)
    want = kept_bytes(scorer.tokenizer, doc, c.selection.spans)
    got = kept_bytes(target_tok, tgt, c.spans)
    assert got[want].all()
    assert got.sum() <= want.sum() + 2 * len(c.selection.spans) * 16
    # kept spans are whole characters: each decodes as strict UTF-8
    for s, e in c.spans:
        target_tok.decode_bytes(tgt[s:e]).decode("utf-8")
    assert 0.05 < c.ratio < 0.2 and c.scorer_ms > 0 and c.total_ms >= c.scorer_ms
    assert c.summary() == f"compressed {c.n_original:,} → {c.n_kept:,} tokens ({c.ratio:.0%})"


def test_same_tokenizer_keeps_the_selection_as_is(scorer):
    c = compress(TEXT, QUESTION, scorer, scorer.tokenizer, CompressionConfig(keep_ratio=0.2))
    assert c.spans == list(c.selection.spans)
    assert c.n_original == c.scorer_tokens


def test_anchors_force_the_question_ngrams(scorer, target_tok):
    cfg = CompressionConfig(keep_ratio=0.02, selection=SelectionConfig(head_chunks=0, tail_chunks=0))
    c = compress(TEXT, "\n\nWhat does def total(xs) return?", scorer, target_tok, cfg)
    assert "def total(xs)" in c.kept_text(target_tok)
    assert c.selection.anchored


def test_summary_format_and_trivial_inputs(scorer, target_tok):
    c = compress("short text", "", scorer, target_tok)   # no question: the attachment's end is the tail
    assert c.n_kept == c.n_original > 0
    empty = compress("", "a question", scorer, target_tok)
    assert empty.n_original == empty.n_kept == 0 and empty.ratio == 1.0
    c.target_tokens, c.spans = list(range(183_412)), [(0, 9_170)]
    assert c.summary() == "compressed 183,412 → 9,170 tokens (5%)"


def test_cancel_propagates(scorer, target_tok):
    with pytest.raises(GenerationCancelled):
        compress(TEXT, QUESTION, scorer, target_tok, progress=lambda done, total: False)


# -- in a conversation: only the attachment is compressed, once, and the prompt stays reusable ------

@pytest.fixture(scope="module")
def chat_engine(tmp_path_factory):
    from luce_engine import Engine

    path = write_tiny_gguf(tmp_path_factory.mktemp("t") / "t.gguf", TinyConfig(tokenizer_from=smollm2_path()))
    return Engine(Model(path, device=DEVICE, n_threads=THREADS), n_ctx=4096)


def conversation(engine, scorer, **policy):
    from luce_engine.pflash import AttachmentCompressor
    from luce_tui.conversation import Conversation

    return Conversation(engine, system="You answer from the attached files.",
                        compressor=AttachmentCompressor(scorer, engine.model.tokenizer, **policy))


def message(text=TEXT, **extra):
    return {"role": "user", "content": "Which item costs 296 euros?",
            "attachments": [dict({"name": "prices.txt", "text": text}, **extra)]}


def test_conversation_compresses_only_the_attachment(chat_engine, scorer, target_tok):
    from luce_engine import Sampling

    conv = conversation(chat_engine, scorer, mode="auto", threshold=1000, keep_ratio=0.1)
    full = conv.encode([message()])
    r = conv.reply(message(), sampling=Sampling(), max_tokens=4)
    att = conv.messages[0]["attachments"][0]
    assert att["text"] == TEXT and att["compressed"] and att["compression"]["n_kept"] < att["compression"]["n_original"]
    assert r.compression.startswith("compressed ") and r.compression.endswith("%)") and r.scorer_ms > 0
    assert r.compression in r.summary()
    prompt = conv.render()
    assert "You answer from the attached files." in prompt and "Which item costs 296 euros?" in prompt
    assert "prices.txt (excerpts):" in prompt and att["compressed"] in prompt
    saved = att["compression"]["n_original"] - att["compression"]["n_kept"]
    assert r.prompt_tokens <= len(full) - saved + 64   # the prompt shrank by what was dropped (± the gap marks)
    # the next turn renders the same compressed prefix: only the new message is prefilled
    r2 = conv.reply("And which costs 333 euros?", sampling=Sampling(), max_tokens=4)
    assert r2.compression is None and r2.reused_tokens >= r.prompt_tokens


def test_policy_threshold_off_and_per_attachment_choice(chat_engine, scorer):
    conv = conversation(chat_engine, scorer, mode="auto", threshold=10**6)
    assert conv.compress_attachments([message()]) is None                     # below the threshold
    assert conv.compress_attachments([message(compress=True)]).startswith("compressed ")   # forced on
    conv = conversation(chat_engine, scorer, mode="always")
    assert conv.compress_attachments([message(compress=False)]) is None       # forced off
    assert conv.compress_attachments([{"role": "user", "content": "no files"}]) is None
    conv = conversation(chat_engine, scorer, mode="off")
    assert conv.compress_attachments([message()]) is None


def test_cli_flags_and_config_keys(tmp_path):
    smollm2_path()   # the settings resolve the default target (skips where it is not installed)
    from luce_tui import config, userconfig
    from luce_tui.cli import build_parser

    args = build_parser().parse_args(["--pflash-scorer", "s.gguf", "--pflash-mode", "always",
                                      "--pflash-threshold", "5000", "--pflash-keep-ratio", "0.1"])
    userconfig.merge(args, {})
    s = config.engine_settings(args)
    assert (s.pflash_scorer, s.pflash_mode, s.pflash_threshold, s.pflash_keep_ratio) == \
        ("s.gguf", "always", 5000, 0.1)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--pflash-keep-ratio", "1.5"])
    cfg = tmp_path / "c.toml"
    cfg.write_text('pflash_scorer = "x.gguf"\npflash_mode = "off"\npflash_threshold = 100\n'
                   'pflash_keep_ratio = 0.2\n')
    args = build_parser().parse_args([])
    userconfig.merge(args, userconfig.load(cfg))
    s = config.engine_settings(args)
    assert (s.pflash_scorer, s.pflash_mode, s.pflash_threshold, s.pflash_keep_ratio) == \
        ("x.gguf", "off", 100, 0.2)
    defaults = build_parser().parse_args([])
    userconfig.merge(defaults, {})
    d = config.engine_settings(defaults)
    assert (d.pflash_mode, d.pflash_threshold, d.pflash_keep_ratio) == ("auto", 32000, 0.05)
    cfg.write_text('pflash_mode = "sometimes"\n')
    with pytest.raises(userconfig.ConfigError, match="off, auto, always"):
        userconfig.load(cfg)
    cfg.write_text('prefill_compression = "off"\n')   # the key's earlier name
    with pytest.raises(userconfig.ConfigError, match="'prefill_compression' is now called 'pflash_mode'"):
        userconfig.load(cfg)
    # the seed guides' flag still names the scorer
    assert build_parser().parse_args(["--prefill-drafter", "old.gguf"]).pflash_scorer == "old.gguf"


def test_cli_loads_the_scorer(tmp_path):
    from luce_tui import config
    from luce_tui.cli import build_parser, load
    from luce_tui import userconfig

    scorer_path = write_tiny_gguf(tmp_path / "s.gguf", TinyConfig(arch="qwen3", n_vocab=400, head_dim=32))
    target = write_tiny_gguf(tmp_path / "t.gguf", TinyConfig(tokenizer_from=smollm2_path()))
    args = build_parser().parse_args(["--target", target, "--device", DEVICE, "--pflash-scorer", scorer_path,
                                      "--max-ctx", "1024"])
    userconfig.merge(args, {})
    runtime = load(config.engine_settings(args))
    assert runtime.compressor.mode == "auto" and runtime.compressor.scorer.model.arch == "qwen3"
    assert "above 32,000 tokens, keep 5%" in runtime.compressor.describe()
    assert runtime.draft is None and runtime.speculator is None
    args.pflash_mode = "off"
    assert load(config.engine_settings(args)).compressor is None


def test_plan_counts_the_scorer(tmp_path, capsys):
    smollm2_path()   # --plan without --target plans the default model (skips where it is not installed)
    from luce_engine import Scorer
    from luce_tui.cli import main

    scorer_path = write_tiny_gguf(tmp_path / "s.gguf", TinyConfig(arch="qwen3", n_vocab=400, head_dim=32))
    argv = ["--plan", "--pflash-scorer", scorer_path, "--max-ctx", "4096", "--device", DEVICE, "--config",
            str(tmp_path / "none.toml")]
    (tmp_path / "none.toml").write_text("")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "scorer KV" in out and "scorer compute" in out and "81,920 tokens" in out
    plan = Scorer.plan_for(Model(scorer_path, device=DEVICE, plan_only=True), 81920, check=False)
    assert plan["kv_cache"] == 2 * 2 * 81920 * 2 * 32 * 2   # layers x K,V x tokens x Hkv x D x f16
    assert main(argv + ["--plan-memory", "1MiB"]) == 2
    assert "--pflash-mode off saves" in capsys.readouterr().err


def test_saved_chat_keeps_the_excerpts(chat_engine, scorer, tmp_path):
    """save → load keeps each attachment's excerpt and numbers: the resumed history encodes to the
    same prompt, without the scorer (nothing is compressed again)."""
    from luce_engine import Sampling
    from luce_sessions import SessionStore
    from luce_tui.attachments import Attachment
    from luce_tui.conversation import Conversation
    from luce_tui.persist import Persistence

    conv = conversation(chat_engine, scorer, mode="always", keep_ratio=0.1)
    msg = message()
    msg["attachments"].append({"name": "small.txt", "text": "a short file", "compress": False})
    conv.reply(msg, sampling=Sampling(), max_tokens=4)
    user, reply = conv.messages
    with SessionStore(tmp_path / "data") as store:
        p = Persistence(store, {})
        user_id = p.save_user(user, None, [Attachment(a["name"], a["text"], 0) for a in user["attachments"]])
        p.save_reply(reply["content"], user_id, {}, [(reply["content"], False)])
        loaded = Persistence(store, {}).load(p.session_id)
    keys = ("compress", "compressed", "compression")
    assert [{k: a[k] for k in keys if k in a} for a in loaded[0]["attachments"]] == \
        [{k: a[k] for k in keys if k in a} for a in user["attachments"]]
    assert loaded[0]["attachments"][0]["compressed"] and "compressed" not in loaded[0]["attachments"][1]
    resumed = Conversation(chat_engine, system=conv.system)        # no scorer needed to resume
    resumed.messages = loaded
    assert resumed.encode(add_generation_prompt=False) == conv.encode(add_generation_prompt=False)
    # with one, nothing is compressed again: the excerpt is kept, the forced-full file stays full
    assert conversation(chat_engine, scorer, mode="always").compress_attachments(loaded[:1]) is None
