"""PFlash in the app: the per-attachment choice (chip clicks, /compress, /attach --compress|--full)
reaches the message, and saved chats keep the excerpts so a resumed chat prefills the same prompt.

The compressor is the real AttachmentCompressor policy with a stand-in for the scorer model (it
keeps the first and last quarter of each file), so these tests are fast and deterministic; the
real scorer in a conversation is tested in test_pflash_pipeline.py."""
from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import luce_engine as le
from luce_engine.pflash_selection import select
from luce_engine.pflash import AttachmentCompressor, Compression
from luce_tui.persist import Persistence
from luce_tui.widgets.chips import Chip
from luce_tui.widgets.messages import Notice
from tui_support import (SIZE, engine, make_app, run_async, store, tiny_model,  # noqa: F401
                         type_and_send, wait_for, wait_idle)

TEXT = "The quick brown fox jumps over the lazy dog.\n" * 12


class StubCompressor(AttachmentCompressor):
    def __init__(self, tokenizer, **policy):
        scorer = SimpleNamespace(model=SimpleNamespace(path="scorer.gguf", arch="qwen3", device="cpu"),
                                 cancel=lambda: None)
        super().__init__(scorer, tokenizer, **policy)
        self.calls: list[str] = []

    def compress(self, text, question, *, progress=None):
        self.calls.append(text)
        ids = self.target_tokenizer.encode(text, parse_special=False)
        q = max(1, len(ids) // 4)
        return Compression(ids, [(0, q), (len(ids) - q, len(ids))], len(ids), select([], []), 12.0, 13.0)


def chips(app) -> list[str]:
    return [str(c.render()) for c in app.query(Chip)]


def last_notice(app, kind=None) -> str:
    found = [n for n in app.query(Notice) if kind is None or n.kind == kind]
    return str(found[-1].render()) if found else ""


async def attach(pilot, app, args: str, n: int):
    await type_and_send(pilot, app, f"/attach {args}", wait=False)
    await wait_for(pilot, lambda: len(app.pending) == n, what="the attachment")


@run_async
async def test_chip_click_cycles_the_choice_and_it_reaches_the_message(engine, store, tmp_path):
    stub = StubCompressor(engine.model.tokenizer, mode="auto", threshold=10**6)
    (tmp_path / "notes.txt").write_text(TEXT)
    app = make_app(engine, store, compressor=stub)
    async with app.run_test(size=SIZE) as pilot:
        await attach(pilot, app, str(tmp_path / "notes.txt"), 1)
        n = app.pending[0].n_tokens
        assert chips(app) == [f"[notes.txt · {n:,} tok · auto: full]"]      # below the threshold
        for want in ("compress", "full", "auto: full", "compress"):
            await pilot.click(Chip)
            await pilot.pause()
            assert chips(app) == [f"[notes.txt · {n:,} tok · {want}]"]
        await type_and_send(pilot, app, "Summarise the file")
        part = app.conv.messages[0]["attachments"][0]
        assert part["compress"] is True and stub.calls == [TEXT]
        kept = part["compression"]["n_kept"]
        assert part["compression"]["n_original"] == n and 0 < kept < n
        assert "notes.txt (excerpts):" in app.conv.render(app.conv.messages[:1])
        assert last_notice(app).startswith(f"compressed {n:,} → {kept:,} tokens")
        saved = store.path(app.persist.session_id)[0]
        assert saved.stats == {"pflash": [{k: part[k] for k in ("compress", "compressed", "compression")}]}


@run_async
async def test_compress_command_and_attach_flags(engine, tmp_path):
    stub = StubCompressor(engine.model.tokenizer, mode="always", keep_ratio=0.25)
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(name + " " + TEXT)
    app = make_app(engine, compressor=stub)
    async with app.run_test(size=SIZE) as pilot:
        await attach(pilot, app, f"{tmp_path / 'a.txt'} --full", 1)
        await attach(pilot, app, str(tmp_path / "b.txt"), 2)
        na, nb = (a.n_tokens for a in app.pending)
        assert chips(app) == [f"[a.txt · {na:,} tok · full]", f"[b.txt · {nb:,} tok · auto: compress]"]
        await type_and_send(pilot, app, "/compress")
        shown = last_notice(app)
        assert "scorer.gguf (qwen3 scorer on cpu; always, keep 25%)" in shown
        assert f"a.txt · {na:,} tok · full" in shown and f"b.txt · {nb:,} tok · auto: compress" in shown
        await type_and_send(pilot, app, "/compress on a.txt")
        assert [a.compress for a in app.pending] == [True, None]
        await type_and_send(pilot, app, "/compress auto")
        await type_and_send(pilot, app, "/compress off b.txt")
        assert chips(app) == [f"[a.txt · {na:,} tok · auto: compress]", f"[b.txt · {nb:,} tok · full]"]
        await type_and_send(pilot, app, "/compress maybe")
        assert "usage: /compress" in last_notice(app, "error")
        await type_and_send(pilot, app, "/compress off nope.txt")
        assert "no attachment named 'nope.txt'" in last_notice(app, "error")
        await type_and_send(pilot, app, "Compare them")
        a, b = app.conv.messages[0]["attachments"]
        assert "compress" not in a and a["compressed"]                  # auto: the policy compressed it
        assert b["compress"] is False and "compressed" not in b         # forced full
        assert stub.calls == [a["text"]]
        await type_and_send(pilot, app, "/compress on")
        assert "no attachments waiting" in last_notice(app, "error")


@run_async
async def test_without_a_scorer_the_control_says_so(engine, tmp_path):
    (tmp_path / "notes.txt").write_text(TEXT)
    app = make_app(engine)                  # no --pflash-scorer: no compressor
    async with app.run_test(size=SIZE) as pilot:
        await attach(pilot, app, str(tmp_path / "notes.txt"), 1)
        n = app.pending[0].n_tokens
        assert chips(app) == [f"[notes.txt · {n:,} tok]"]               # no mode shown that would not happen
        await pilot.click(Chip)
        await pilot.pause()
        assert "needs a PFlash scorer" in last_notice(app, "warning") and app.pending[0].compress is None
        assert chips(app) == [f"[notes.txt · {n:,} tok]"]
        for line in ("/compress on", "/compress", f"/attach --compress {tmp_path / 'notes.txt'}"):
            await type_and_send(pilot, app, line)
            assert "--pflash-scorer PATH" in last_notice(app, "error")
        assert len(app.pending) == 1
        await type_and_send(pilot, app, "Hi")
        assert "compress" not in app.conv.messages[0]["attachments"][0]


@run_async
async def test_resumed_chat_prefills_the_same_compressed_prompt(engine, store, tiny_model, tmp_path):
    (tmp_path / "notes.txt").write_text(TEXT)
    app = make_app(engine, store, compressor=StubCompressor(engine.model.tokenizer, mode="always"))
    async with app.run_test(size=SIZE) as pilot:
        await attach(pilot, app, str(tmp_path / "notes.txt"), 1)
        await type_and_send(pilot, app, "Summarise the file")
        await type_and_send(pilot, app, "And then?")
        original = app.conv.encode(add_generation_prompt=False)
        first = app.conv.encode(app.conv.messages[:1])    # the first turn's (compressed) prompt
        assert app.engine.tokens[:len(first)] == first
        part = dict(app.conv.messages[0]["attachments"][0])
        notice = last_notice(app).split(":")[0]           # "compressed N → M tokens (x%)"
        sid = app.persist.session_id
    # a fresh engine without a scorer: the excerpt comes from the store, not from compressing again
    fresh = le.Engine(tiny_model, n_ctx=1024)
    app = make_app(fresh, store, resume=str(sid))
    async with app.run_test(size=SIZE) as pilot:
        await wait_idle(pilot, app)
        resumed = app.conv.messages[0]["attachments"][0]
        assert {k: resumed[k] for k in ("compressed", "compression")} == \
            {k: part[k] for k in ("compressed", "compression")}
        assert app.conv.encode(add_generation_prompt=False) == original
        assert fresh.tokens == original and fresh.tokens[:len(first)] == first   # the same prompt as before
        assert any(str(n.render()).startswith(notice + ": scorer 0.01 s") for n in app.query(Notice))
        assert not [n for n in app.query(Notice) if n.kind == "warning"]


def test_old_and_damaged_saved_values_load_safely(store):
    sid = store.create_session().id
    a, b = store.add_attachment("a.txt", "alpha " * 50), store.add_attachment("b.txt", "beta " * 50)
    good = {"compressed": "alpha …", "compression": {"n_original": 100, "n_kept": 5, "scorer_ms": 3.5,
                                                       "keep_ratio": 0.05}}
    cases = [
        (None, [{}, {}], 0),                                                  # a file from before PFlash
        ({"pflash": [good, {"compress": False}]}, [good, {"compress": False}], 0),
        ({"pflash": "junk"}, [{}, {}], 1),
        ({"pflash": [{"compressed": 5, "compression": good["compression"]}, good]}, [{}, good], 1),
        ({"pflash": [{"compressed": "x", "compression": {"n_original": -1, "n_kept": True}}]}, [{}, {}], 1),
        ({"pflash": [{"compressed": "x"}, 7, {"extra": 1}]}, [{}, {}], 2),
        ({"pflash": [{"compress": "yes", **good}]}, [good, {}], 0),           # a bad choice is just dropped
    ]
    for stats, _, _ in cases:
        store.add_message(sid, "user", "q", stats=stats, attachments=[a, b])
    p = Persistence(store, {})
    messages = p.load(sid)
    assert len(messages) == len(cases)
    for m, (_, want, _) in zip(messages, cases):
        got = [{k: part[k] for k in ("compress", "compressed", "compression") if k in part}
               for part in m["attachments"]]
        assert got == want, m
        assert [part["text"][:5] for part in m["attachments"]] == ["alpha", "beta "]
    assert len(p.warnings) == sum(n for _, _, n in cases)
    assert all("whole file goes into the prompt" in w for w in p.warnings)


@run_async
async def test_damaged_stats_column_is_an_error_not_a_crash(engine, store):
    app = make_app(engine, store)
    async with app.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, app, "Hello")
        sid = app.persist.session_id
    with sqlite3.connect(store.db_path) as db:
        db.execute("UPDATE messages SET stats = '{\"pflash\": [' WHERE role = 'user'")
    app = make_app(engine, store, resume=str(sid))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert f"cannot open chat {sid}" in last_notice(app, "error")
        assert app.persist.session_id is None and app.conv.messages == []
        await type_and_send(pilot, app, "Still works")
        assert app.conv.messages[-1]["role"] == "assistant"
