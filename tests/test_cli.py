"""luce-chat end to end: the real command in subprocesses with the bundled SmolLM2 on CPU, greedy.

One thread everywhere: the box is shared and oversubscribed ggml threads slow down by orders
of magnitude, while one thread decodes SmolLM2 at ~100 tok/s.
"""
import io
import os
import signal
import subprocess
import sys

import pytest

import luce_engine as le
from luce_engine import ContextFullError, Sampling
from luce_tui import config
from luce_tui.conversation import Conversation, ConversationError, common_prefix
from luce_tui.plain import Repl
from luce_tui.runtime import Runtime

COMMON = ["--device", "cpu", "--threads", "1"]
GREEDY = Sampling.chat_default().updated(temperature=0)   # what `--temp 0` means
QUESTION = "What is 2+2?"


def luce(*args, input=None, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "luce_tui", *args], input=input, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def model():
    m = le.Model(le.default_model_path(), device="cpu", n_threads=1)
    m.chat_template   # build the tokenizer once
    return m


@pytest.fixture(scope="module")
def engine(model):
    return le.Engine(model, n_ctx=1024)


@pytest.fixture
def conv(engine):
    engine.truncate(0)
    return Conversation(engine)


def api_answer(model, engine, messages, max_tokens, sampling=GREEDY):
    """The reference: the same conversation generated through the Python API directly."""
    engine.truncate(0)
    prompt = model.tokenizer.encode(model.chat_template.render(messages), add_special=False, parse_special=True)
    return "".join(r.text for r in engine.generate(prompt, sampling=sampling, max_tokens=max_tokens))


# -- one-shot mode --------------------------------------------------------------------------
def test_prompt_streams_the_same_answer_as_the_api(model, engine):
    r = luce("-p", QUESTION, "--temp", "0", "--max-tokens", "16", *COMMON)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""                      # no progress or stats unless asked
    expected = api_answer(model, engine, [{"role": "user", "content": QUESTION}], 16)
    assert expected.strip()
    assert r.stdout == expected + "\n"


def test_prompt_from_stdin_with_stats(model, engine):
    r = luce("-p", "-", "--temp", "0", "--max-tokens", "8", "--stats", "--system", "Answer briefly.", *COMMON,
             input=QUESTION + "\n")
    assert r.returncode == 0, r.stderr
    expected = api_answer(model, engine, [{"role": "system", "content": "Answer briefly."},
                                          {"role": "user", "content": QUESTION}], 8)
    assert r.stdout == expected + "\n"
    stats = r.stderr.strip().splitlines()
    assert len(stats) == 1 and "tok/s" in stats[0] and "generated 8 tok" in stats[0]
    assert "finish: length" in stats[0]


def test_ctrl_c_keeps_partial_output_and_exits_130():
    p = subprocess.Popen([sys.executable, "-m", "luce_tui", "-p", "Write a very long story about a dragon.",
                          "--temp", "0", "--max-tokens", "3000", "--stats", *COMMON],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.read(1)               # the answer has started streaming
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert (first + out).strip()
    assert "finish: cancelled" in err and "Traceback" not in err


# -- flags and errors -----------------------------------------------------------------------
def test_plan_prints_memory_plan():
    r = luce("--plan", "--max-ctx", "2048", "--cache-type-k", "q8_0", *COMMON)
    assert r.returncode == 0, r.stderr
    assert "n_ctx 2048" in r.stdout and "KV q8_0/f16" in r.stdout
    for row in ("weights", "kv_cache", "total"):
        assert row in r.stdout
    assert "MiB" in r.stdout


def test_plan_that_does_not_fit_exits_2(tmp_path):
    from tools.tiny_gguf import TinyConfig, write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "huge-ctx.gguf", TinyConfig(n_ctx_train=1 << 30))
    r = luce("--plan", "--target", path, "--max-ctx", str(1 << 30), *COMMON)
    assert r.returncode == 2
    assert r.stderr.startswith("luce-chat: error: ") and "GiB" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("kind", ["missing", "garbage"])
def test_bad_target_is_one_line_error(tmp_path, kind):
    path = tmp_path / f"{kind}.gguf"
    if kind == "garbage":
        path.write_bytes(os.urandom(4096))
    r = luce("-p", "hi", "--target", str(path), *COMMON)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("luce-chat: error: ") and str(path) in lines[0]
    assert r.stdout == ""


def test_bad_flags_are_argparse_errors():
    r = luce("--cache-type-k", "q5_1", "-p", "hi")
    assert r.returncode == 2 and "invalid choice" in r.stderr and "usage:" in r.stderr
    r = luce("--top-p", "1.5", "-p", "hi")
    assert r.returncode == 2 and "top_p" in r.stderr


# -- the plain loop, scripted through stdin --------------------------------------------------
def test_plain_loop_through_stdin(model, engine, tmp_path):
    question = "What is the capital of France?"
    script = "\n".join([
        "/sampling temperature=0",
        question,
        "/sampling foo=1",
        "And of Germany?",
        "/new",
        question,
        "/bogus",
        "/quit",
        "never sent",
    ]) + "\n"
    r = luce("--max-tokens", "10", "--data-dir", str(tmp_path), *COMMON, input=script)
    assert r.returncode == 0, r.stderr
    answer = api_answer(model, engine, [{"role": "user", "content": question}], 10,
                        sampling=Sampling.chat_default().updated(temperature=0))
    assert answer.strip()
    # Greedy: the first turn and the turn after /new are the same single-turn answer.
    assert r.stdout.count(answer) == 2
    second = r.stdout.split(answer, 2)[1]      # what the follow-up produced, between the two
    assert "temperature=0" in r.stdout and "[new conversation]" in r.stdout
    assert second.replace("[stopped at --max-tokens]", "").replace("[new conversation]", "").strip()
    assert "unknown sampling key 'foo'" in r.stderr and "unknown command /bogus" in r.stderr


# -- Conversation ----------------------------------------------------------------------------
def test_template_renders_chatml(model, conv):
    conv.messages = [{"role": "user", "content": "Hi"}]
    default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    assert conv.render() == (f"<|im_start|>system\n{default_system}<|im_end|>\n"
                             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    conv.system = "Be brief."
    assert conv.render().startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    ids = conv.encode()
    tok = model.tokenizer
    assert ids[0] == tok.token_id("<|im_start|>") and tok.decode(ids) == conv.render()


def test_second_turn_prefills_only_new_tokens(conv, engine, model):
    r1 = conv.reply("Name a color.", sampling=GREEDY, max_tokens=6)
    assert r1.reused_tokens == 0 and r1.prefill_tokens == r1.prompt_tokens
    assert engine.n_past == r1.prompt_tokens + r1.generated_tokens
    in_context = engine.tokens

    r2 = conv.reply("Another one?", sampling=GREEDY, max_tokens=6)
    prompt2 = conv.encode(conv.messages[:-1])
    assert r2.prompt_tokens == len(prompt2)
    assert r2.reused_tokens == common_prefix(in_context, prompt2) >= r1.prompt_tokens
    assert r2.prefill_tokens == r2.prompt_tokens - r2.reused_tokens < 20   # just the new user turn
    assert engine.tokens[:len(prompt2)] == prompt2
    assert [m["role"] for m in conv.messages] == ["user", "assistant"] * 2

    # Reuse is exact: a fresh context with the full prompt gives the same reply.
    engine.truncate(0)
    fresh = "".join(r.text for r in engine.generate(prompt2, sampling=GREEDY, max_tokens=6))
    assert fresh == r2.text

    # /retry rewinds to the prompt (one token re-evaluated) and, greedy, says the same again.
    again = conv.retry(sampling=GREEDY, max_tokens=6)
    assert again.text == r2.text and len(conv.messages) == 4


def test_conversation_errors_leave_history_untouched(model):
    conv = Conversation(le.Engine(model, n_ctx=64))
    with pytest.raises(ConversationError):
        conv.retry(sampling=GREEDY, max_tokens=4)
    with pytest.raises(ContextFullError, match="context holds"):
        conv.reply("word " * (conv.engine.n_ctx + 10), sampling=GREEDY, max_tokens=4)
    assert conv.messages == []
    conv.reset()
    assert conv.engine.n_past == 0


def test_repl_reports_errors_and_keeps_going(model):
    out, err = io.StringIO(), io.StringIO()
    repl = Repl(Runtime(le.Engine(model, n_ctx=256)), GREEDY, max_tokens=4, out=out, err=err)
    assert repl.handle("word " * 300) is True
    assert "/new" in err.getvalue() and "--max-ctx" in err.getvalue()
    assert repl.handle("/sampling top_k=") and "expected an integer" in err.getvalue()
    assert repl.handle("/retry") and "no reply to retry" in err.getvalue()
    assert repl.handle("Hi") and out.getvalue().strip()
    assert repl.conv.messages[0] == {"role": "user", "content": "Hi"}   # the failed turn left no trace
    assert repl.handle("/quit") is False


# -- config ----------------------------------------------------------------------------------
def test_sampling_assignments():
    s = config.parse_sampling_assignments(["temp=0.2", "top_k=5", "seed=7"], Sampling.chat_default())
    assert (s.temperature, s.top_k, s.seed) == (0.2, 5, 7)
    assert config.parse_sampling_assignments(["seed=none"], s).seed is None
    for bad, msg in [("foo=1", "unknown sampling key"), ("top_k=x", "expected an integer"),
                     ("top_p=2", "top_p"), ("temperature", "key=value")]:
        with pytest.raises(ValueError, match=msg):
            config.parse_sampling_assignments([bad], s)


def test_data_dir_precedence(monkeypatch, tmp_path):
    from luce_tui import locations

    monkeypatch.delenv("LUCE_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert locations.data_dir() == tmp_path / "xdg" / "luce"
    monkeypatch.setenv("LUCE_DATA_DIR", str(tmp_path / "env"))
    assert locations.data_dir() == tmp_path / "env"
    assert locations.data_dir(str(tmp_path / "flag")) == tmp_path / "flag"
    monkeypatch.delenv("LUCE_DATA_DIR")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert locations.data_dir() == tmp_path / ".local" / "share" / "luce"


def test_one_answer_for_every_location_with_relative_xdg_dirs(monkeypatch, tmp_path):
    """A relative XDG_DATA_HOME / XDG_CONFIG_HOME is ignored (the XDG spec), by the app and by the
    session store alike: the app's history and its chats live in one directory."""
    import luce_sessions
    from luce_tui import locations, userconfig

    monkeypatch.delenv("LUCE_DATA_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    assert locations.data_dir() == luce_sessions.default_data_dir() == tmp_path / ".local" / "share" / "luce"
    with luce_sessions.SessionStore() as store:
        assert store.data_dir == locations.data_dir()
    assert locations.config_dir() == tmp_path / ".config" / "luce"
    assert locations.themes_dir() == tmp_path / ".config" / "luce" / "themes"
    (tmp_path / ".config" / "luce").mkdir(parents=True)
    locations.config_path().write_text('max_ctx = 1234\n')
    assert userconfig.load() == {"max_ctx": 1234}


def test_the_loader_returns_a_runtime_whose_replies_speculate(tmp_path):
    """cli.load() hands the draft, its speculator and the compressor over in a Runtime (nothing is
    patched onto the engine), and a Conversation given the speculator drafts its replies."""
    from luce_tui import userconfig
    from luce_tui.cli import build_parser, load
    from tools.tiny_dflash import TinyDraftConfig, write_tiny_dflash
    from tools.tiny_gguf import TinyConfig, write_tiny_gguf

    cfg = TinyConfig(arch="qwen35", n_layer=4, head_dim=32, seed=8, tokenizer_from=str(le.default_model_path()))
    target = write_tiny_gguf(tmp_path / "t.gguf", cfg)
    draft = write_tiny_dflash(tmp_path / "d.gguf", target, TinyDraftConfig(block_size=8))
    args = build_parser().parse_args(["--target", target, "--draft", draft, "--device", "cpu", "--threads", "1",
                                      "--max-ctx", "512"])
    userconfig.merge(args, {})
    runtime = load(config.engine_settings(args))
    assert runtime.speculator.drafter is runtime.draft and runtime.compressor is None
    assert runtime.model is runtime.engine.model
    assert not hasattr(runtime.engine, "speculator") and not hasattr(runtime.engine, "draft")
    conv = Conversation(runtime.engine, speculator=runtime.speculator)
    r = conv.reply("Hello there", sampling=GREEDY, max_tokens=16)
    assert r.n_drafted > 0 and r.generated_tokens > 0


def test_prompt_with_a_draft_model_gives_the_plain_greedy_answer(tmp_path):
    """--draft turns on chain speculation: the greedy answer is the same text, and -v names the draft."""
    from tools.tiny_dflash import TinyDraftConfig, write_tiny_dflash
    from tools.tiny_gguf import TinyConfig, write_tiny_gguf

    cfg = TinyConfig(arch="qwen35", n_layer=4, head_dim=32, seed=8, tokenizer_from=str(le.default_model_path()))
    target = write_tiny_gguf(tmp_path / "t.gguf", cfg)
    draft = write_tiny_dflash(tmp_path / "d.gguf", target, TinyDraftConfig(block_size=8))
    base = ["-p", "Hello there", "--target", target, "--device", "cpu", "--threads", "1", "--temp", "0",
            "--max-tokens", "24"]
    plain = luce(*base)
    spec = luce(*base, "--draft", draft, "-v")
    off = luce(*base, "--draft", draft, "--spec", "off")
    assert plain.returncode == spec.returncode == off.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout == off.stdout and plain.stdout.strip()
    assert "draft d.gguf (llama dialect, block 8" in spec.stderr


def test_spec_tree_gives_the_plain_greedy_answer_and_plans_its_verify(tmp_path):
    """--spec tree on a dense target: the same greedy text, the stats line names the tree and its
    budget, --plan sizes the verify for budget + 1 rows; a hybrid target too (its paths' recurrence);
    auto gives the same text and names its modes."""
    from tools.tiny_dflash import TinyDraftConfig, write_tiny_dflash
    from tools.tiny_gguf import TinyConfig, write_tiny_gguf

    cfg = TinyConfig(arch="llama", head_dim=32, seed=8, tokenizer_from=str(le.default_model_path()))
    target = write_tiny_gguf(tmp_path / "t.gguf", cfg)
    draft = write_tiny_dflash(tmp_path / "d.gguf", target, TinyDraftConfig(block_size=8))
    base = ["-p", "Hello there", "--target", target, *COMMON, "--temp", "0", "--max-tokens", "24", "--stats"]
    plain = luce(*base)
    tree = luce(*base, "--draft", draft, "--spec", "tree", "--tree-budget", "20")
    chain = luce(*base, "--draft", draft, "--spec", "auto")
    assert plain.returncode == tree.returncode == chain.returncode == 0, tree.stderr
    assert tree.stdout == plain.stdout == chain.stdout and plain.stdout.strip()
    if "AL " in tree.stderr:   # random weights may accept nothing
        assert "(tree, budget 20)" in tree.stderr
    if "AL " in chain.stderr:
        assert "(auto: " in chain.stderr
    plan = luce("--plan", "--target", target, "--draft", draft, "--spec", "tree", "--tree-budget", "20", *COMMON)
    assert plan.returncode == 0, plan.stderr
    assert "verify batch 21 (DDTree budget 20)" in plan.stdout

    hcfg = TinyConfig(arch="qwen35", n_layer=4, head_dim=32, seed=8, tokenizer_from=str(le.default_model_path()))
    hybrid = write_tiny_gguf(tmp_path / "h.gguf", hcfg)
    hdraft = write_tiny_dflash(tmp_path / "hd.gguf", hybrid, TinyDraftConfig(block_size=8))
    hbase = ["-p", "hi", "--target", hybrid, *COMMON, "--temp", "0", "--max-tokens", "16", "--stats"]
    hplain, htree = luce(*hbase), luce(*hbase, "--draft", hdraft, "--spec", "tree", "--tree-budget", "12")
    assert hplain.returncode == htree.returncode == 0, htree.stderr
    assert htree.stdout == hplain.stdout and hplain.stdout.strip()
    if "AL " in htree.stderr:
        assert "(tree, budget 12)" in htree.stderr


# -- first-run defects (issue 15) ----------------------------------------------------------------
def test_threads_are_checked_against_the_cpus_and_default_to_all_of_a_small_machine():
    r = luce("--threads", "999", "-p", "hi", "--device", "cpu")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("luce-chat: error: --threads 999: this machine has ")
    assert len(r.stderr.strip().splitlines()) == 2          # the error, then where to look: no usage block
    # measured on 2 cores (docs/decisions.md): 2 threads beat 1 at prefill and decode
    assert [config.default_threads(n) for n in (1, 2, 4, 8, 16)] == [1, 2, 4, 4, 8]


def test_default_context_is_the_training_context_when_it_fits(tmp_path):
    from tools.tiny_gguf import TinyConfig, write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "t8k.gguf", TinyConfig(n_ctx_train=8192))
    r = luce("--plan", "--target", path, *COMMON)
    assert r.returncode == 0, r.stderr
    assert "(n_ctx 8192," in r.stdout and "fits: needs" in r.stdout and "free on CPU" in r.stdout
    assert r.stdout.count("8192") == 1                      # said once, in the heading
    # a device too small for the training context: the largest context that fits, and a note
    r = luce("--plan", "--target", path, "--plan-memory", "8MiB", *COMMON)
    assert r.returncode == 0, r.stderr
    n_ctx = int(r.stdout.split("(n_ctx ")[1].split(",")[0])
    assert 2048 < n_ctx < 8192 and n_ctx % 256 == 0 and "fits: needs" in r.stdout   # 2,048 take 5.3 MiB
    assert "training context (8,192) does not fit" in r.stderr and "--max-ctx" in r.stderr
    # the same formula for the load: the app gets the training context too
    r = luce("-p", "Hello", "--target", path, "--max-tokens", "2", "-v", *COMMON)
    assert r.returncode == 0, r.stderr
    assert "n_ctx 8192" in r.stderr


def test_a_plan_that_does_not_fit_uses_the_same_number_as_the_plan(tmp_path):
    r = luce("--plan", "--max-ctx", "2048", "--plan-memory", "100MiB", *COMMON)
    assert r.returncode == 2
    total = [line.split()[-2:] for line in luce("--plan", "--max-ctx", "2048", *COMMON).stdout.splitlines()
             if line.strip().startswith("total")][0]
    assert f"does not fit: needs {' '.join(total)} of 100.0 MiB" in r.stderr


@pytest.mark.parametrize("data, why", [(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary data"),
                                       (b"caf\xe9 au lait", "not UTF-8 text (bad byte at offset 3)")])
def test_prompt_from_stdin_must_be_text(data, why):
    r = subprocess.run([sys.executable, "-m", "luce_tui", "-p", "-", *COMMON], input=data, capture_output=True,
                       timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 2 and r.stdout == b""
    assert err.startswith("luce-chat: error: -p - reads the question from stdin") and why in err
    assert len(err.strip().splitlines()) == 1


def test_number_flags_say_what_they_expect():
    r = luce("--max-ctx", "abc", "-p", "hi")
    assert r.returncode == 2 and "--max-ctx: expected a positive integer, got 'abc'" in r.stderr
    assert "_positive" not in r.stderr
    help_text = " ".join(luce("--help").stdout.split())
    assert "0 is greedy (default: 0.7)" in help_text and "--top-k K (default: 40)" in help_text
