"""The app's pure pieces: think splitting, commands and completion, attachments and the context
budget, prompt rendering of attachments, the stats line, config file and themes, CLI wiring."""
from __future__ import annotations

import subprocess
import sys
import types

import pytest

from luce_tui import attachments, commands, config, locations, themes, userconfig
from luce_tui.conversation import fence, render_content
from luce_tui.thinking import ThinkSplitter, split_text
from luce_tui.widgets.stats import LiveStats, format_gauge, format_status


# -- <think> ----------------------------------------------------------------------------------
def stream(text: str, cut: int, thinking: bool = False):
    sp = ThinkSplitter(thinking)
    pieces = []
    for i in range(0, len(text), cut):
        pieces += sp.feed(text[i:i + cut])
    pieces += sp.flush()
    return ("".join(t for c, t, _ in pieces if c == "think"), "".join(t for c, t, _ in pieces if c == "answer"))


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 100])
def test_think_split_survives_any_chunking(cut):
    assert stream("  <think>\nstep one</think>\n\nThe answer.", cut) == ("\nstep one", "The answer.")
    assert stream("No thinking here, <think> later is text.", cut) == ("", "No thinking here, <think> later is text.")
    assert stream("<thi", cut) == ("", "<thi")                        # an unfinished tag is text
    assert stream("<think>still thinking </thi", cut) == ("still thinking </thi", "")
    assert stream("reasoning</think>answer", cut, thinking=True) == ("reasoning", "answer")


def test_think_split_keeps_provenance():
    sp = ThinkSplitter()
    out = sp.feed("<think>a", False) + sp.feed("b</think>c", True) + sp.feed("d", False)
    assert out == [("think", "a", False), ("think", "b", True), ("answer", "c", True), ("answer", "d", False)]
    assert split_text("<think>x</think>y") == ("x", "y")


# -- commands ------------------------------------------------------------------------------------
def test_command_parse_and_aliases():
    cmd, rest = commands.parse("/attach a.txt 'b c.txt'")
    assert cmd.name == "attach" and commands.split_args(rest) == ["a.txt", "b c.txt"]
    assert commands.parse("/q")[0].name == "quit" and commands.parse("/EXIT")[0].name == "quit"
    with pytest.raises(commands.CommandError, match="unknown command /nope"):
        commands.parse("/nope")
    with pytest.raises(commands.CommandError, match="cannot parse"):
        commands.split_args("'unterminated")


def test_completion():
    assert [v for v, _ in commands.complete("/se")] == ["/sessions"]
    names = [v for v, _ in commands.complete("/s")]
    assert names == ["/sessions", "/save ", "/system ", "/sampling ", "/stats"]
    assert commands.complete("/export ") == [("/export md", "/export md|json [PATH]"),
                                             ("/export json", "/export md|json [PATH]")]
    assert [v for v, _ in commands.complete("/theme l", themes=["dark", "light"])] == ["/theme light"]
    assert [v for v, _ in commands.complete("/sampling temperature=0 to")] == ["/sampling temperature=0 top_k=",
                                                                              "/sampling temperature=0 top_p="]
    assert commands.complete("hello /s") == [] and commands.complete("/attach x y") == []
    assert all(c.usage in commands.help_text() for c in commands.COMMANDS.values())


# -- attachments and budget ------------------------------------------------------------------------
def test_decode_text_refuses_binary_and_bad_utf8():
    assert attachments.decode_text("a.txt", "héllo\r\nworld".encode()) == "héllo\nworld"
    assert attachments.decode_text("bom.txt", b"\xef\xbb\xbfhi") == "hi"
    with pytest.raises(attachments.AttachmentError, match="a.bin looks like a binary file"):
        attachments.decode_text("a.bin", b"ab\x00cd")
    with pytest.raises(attachments.AttachmentError, match="not UTF-8 text .* offset 2"):
        attachments.decode_text("latin.txt", b"ab\xe9cd")


def test_read_refuses_directories_and_huge_files(tmp_path, monkeypatch):
    tok = types.SimpleNamespace(encode=lambda text, **kw: text.split())
    (tmp_path / "f.txt").write_text("one two three")
    a = attachments.read(tmp_path / "f.txt", tok)
    assert (a.name, a.n_tokens, a.chip()) == ("f.txt", 3, "f.txt · 3 tok")
    with pytest.raises(attachments.AttachmentError, match="is a directory"):
        attachments.read(tmp_path, tok)
    monkeypatch.setattr(attachments, "MAX_BYTES", 5)
    with pytest.raises(attachments.AttachmentError, match="limited to"):
        attachments.read(tmp_path / "f.txt", tok)


def test_budget_advice():
    assert attachments.budget_error(3000, 4096, 256) is None
    msg = attachments.budget_error(183_412, 4096, 256)
    assert "183,412 tokens" in msg and "--max-ctx 183808" in msg and "/detach" in msg and "/new" in msg
    msg = attachments.budget_error(50_000, 4096, 256, n_ctx_train=32_768)
    assert "trained for 32,768 tokens" in msg and "--max-ctx 5" not in msg


def test_attachments_render_as_fenced_parts():
    msg = {"role": "user", "content": "Look:", "attachments": [
        {"name": "a.py", "text": "print(1)\n"}, {"name": "b.md", "text": "```\ncode\n```"}]}
    assert render_content(msg) == ("Look:\n\na.py:\n```\nprint(1)\n```\n\nb.md:\n````\n```\ncode\n```\n````")
    assert render_content({"role": "user", "content": "", "attachments": [{"name": "x", "text": "y"}]}) == \
        "x:\n```\ny\n```"
    assert fence("no ticks") == "```" and fence("`````") == "``````"


# -- stats line ----------------------------------------------------------------------------------
def test_stats_formatting():
    s = LiveStats(phase="prefill", reused=512, prefill_done=1000, prefill_total=4000, prefill_t0=10.0)
    assert format_status(s, 12.0) == "prefill 25% · 1,000/4,000 tok · ETA 6s · 512 cached"
    s = LiveStats(phase="prefill", prefill_done=10, prefill_total=4000, prefill_t0=0.0)
    assert "ETA 13m18s" in format_status(s, 2.0)
    # PFlash scoring reports its own progress: scorer tokens, not the context's
    sc = LiveStats(ctx_used=100)
    sc.score(0.0, 0, 20000)
    sc.score(4.0, 5000, 20000)
    assert format_status(sc, 4.0) == "scoring attachments (PFlash) 25% · 5,000/20,000 tok · ETA 12s"
    assert sc.ctx_used == 100
    step = types.SimpleNamespace(tokens=[1, 2, 3], n_drafted=4, n_accepted=2)
    d = LiveStats()
    d.step(1.0, step)
    d.step(2.0, step)
    assert format_status(d, 2.0) == "decode 3.0 tok/s · 6 tok · accept 50% · AL 3.00"
    d.note = "cancelling…"
    assert format_status(d, 2.0).startswith("cancelling… · decode")
    assert format_status(LiveStats(last="12 tok @ 3.0 tok/s"), 0) == "12 tok @ 3.0 tok/s"
    assert format_gauge(1024, 4096, width=8) == "ctx ██░░░░░░ 1,024/4,096"
    assert format_gauge(5000, 4096, width=4) == "ctx ████ 5,000/4,096"


# -- config file ------------------------------------------------------------------------------------
def test_config_file_and_flag_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert locations.config_path() == tmp_path / "luce" / "config.toml"
    assert userconfig.load() == {}                                  # no file: nothing
    (tmp_path / "luce").mkdir()
    locations.config_path().write_text('target = "~/m.gguf"\nmax-ctx = 8192\ncache_type_k = "q8_0"\n'
                                        'theme = "light"\ndraft = "/d.gguf"\n[sampling]\ntemp = 0.2\ntop_k = 5\n')
    cfg = userconfig.load()
    assert cfg == {"target": "~/m.gguf", "max_ctx": 8192, "cache_type_k": "q8_0", "theme": "light",
                   "draft": "/d.gguf", "temperature": 0.2, "top_k": 5}
    from luce_tui.cli import build_parser

    args = build_parser().parse_args(["--max-ctx", "2048", "--top-k", "9"])
    userconfig.merge(args, cfg)
    assert (args.max_ctx, args.cache_type_k, args.cache_type_v, args.device) == (2048, "q8_0", "f16", "auto")
    assert (args.theme, args.draft, args.max_tokens, args.highlight) == ("light", "/d.gguf", 1024, False)
    s = config.sampling_from_args(args)
    assert (s.temperature, s.top_k) == (0.2, 9)


@pytest.mark.parametrize("text, message", [
    ("bogus = 1", "unknown key 'bogus'"),
    ("max_ctx = 'big'", "max_ctx must be a int"),
    ("max_ctx = true", "max_ctx must be a int"),
    ("cache_type_k = 'q5_1'", "cache_type_k must be one of"),
    ("[sampling]\nfoo = 1", "unknown sampling key 'foo'"),
    ("[sampling]\ntop_k = 0.5", "sampling.top_k must be a int"),
    ("target = ", "config.toml"),
])
def test_config_file_errors(tmp_path, text, message):
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(userconfig.ConfigError, match=message):
        userconfig.load(path)
    with pytest.raises(userconfig.ConfigError, match="no such config file"):
        userconfig.load(tmp_path / "missing.toml")


# -- themes ------------------------------------------------------------------------------------------
def test_shipped_themes_define_the_draft_colour():
    loaded, warnings = themes.load_themes(None)
    assert warnings == []
    by_name = {t.name: t for t in loaded}
    assert {"dark", "light", "high-contrast"} <= set(by_name)
    for t in by_name.values():
        assert set(themes.VARIABLE_DEFAULTS) <= set(t.variables)
    assert by_name["light"].dark is False and by_name["dark"].dark is True


def test_user_themes_override_and_report_errors(tmp_path):
    (tmp_path / "dark.toml").write_text('primary = "#010203"\n')         # name from the file: overrides
    (tmp_path / "bad-colour.toml").write_text('primary = "not a colour"\n')
    (tmp_path / "extra-key.toml").write_text('primary = "#000000"\nsparkle = true\n')
    loaded, warnings = themes.load_themes(tmp_path)
    by_name = {t.name: t for t in loaded}
    assert by_name["dark"].primary == "#010203"
    assert by_name["dark"].variables["draft-highlight"] == themes.VARIABLE_DEFAULTS["draft-highlight"]
    assert len(warnings) == 2 and any("bad-colour.toml" in w for w in warnings)
    assert any("sparkle" in w for w in warnings)


# -- command line -------------------------------------------------------------------------------------
def luce(*args, env_extra=None, tmp_path=None):
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "luce_tui", *args], capture_output=True, text=True, timeout=60,
                          env=env, stdin=subprocess.DEVNULL)


def test_cli_reads_config_file_and_reports_a_missing_draft(tmp_path):
    (tmp_path / "luce").mkdir()
    (tmp_path / "luce" / "config.toml").write_text('max_ctx = 2048\ncache_type_k = "q8_0"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    r = luce("--plan", "--device", "cpu", env_extra=env)
    assert r.returncode == 0 and "n_ctx 2048" in r.stdout and "KV q8_0/f16" in r.stdout, r.stderr
    r = luce("--plan", "--device", "cpu", "--max-ctx", "1024", env_extra=env)
    assert "n_ctx 1024" in r.stdout                                   # the flag wins
    r = luce("-p", "Hi", "--device", "cpu", "--threads", "1", "--max-tokens", "2", "--temp", "0",
             "--draft", "/models/draft.gguf", env_extra=env)
    assert r.returncode != 0 and "draft.gguf" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "luce" / "config.toml").write_text("oops = 1\n")
    r = luce("-p", "Hi", env_extra=env)
    assert r.returncode == 2 and "unknown key 'oops'" in r.stderr and len(r.stderr.splitlines()) == 1


def test_cli_resume_rules(tmp_path):
    from luce_tui.cli import main

    with pytest.raises(SystemExit):
        main(["--resume", "-p", "x"])
    with pytest.raises(SystemExit):
        main(["--resume", "last", "--plain"])
