"""Saved chats keep their engine state (luce_tui/session_state.py): each turn saves it, reopening
loads it instead of prefilling ("resumed N tokens in X s"), the next reply is the never-closed
one's, a file that does not fit is reported once and set aside, the budget evicts the oldest,
/sessions marks the chats that resume instantly, and a failing save never stops the chat."""
from __future__ import annotations

import os

import luce_engine as le
from luce_engine import state_files
from luce_tui.screens.sessions import SessionsScreen
from luce_tui.session_state import SessionStates
from luce_tui.widgets.messages import Notice
from tools.tiny_gguf import TinyConfig, write_tiny_gguf
from tui_support import (SIZE, engine, make_app, run_async, store, tiny_model,  # noqa: F401
                         type_and_send, wait_for, wait_idle)


def notices(app, kind=None) -> list[str]:
    return [str(n.render()) for n in app.query(Notice) if kind is None or n.kind == kind]


def state_dir(store):
    return store.data_dir / "states"


async def chat_two_turns(pilot, app):
    await type_and_send(pilot, app, "Tell me about penguins")
    await type_and_send(pilot, app, "And their eggs?")
    assert app.states.flush(20)
    return app.persist.session_id


@run_async
async def test_a_reopened_chat_resumes_and_answers_as_the_open_one(tiny_model, store):
    a = make_app(le.Engine(tiny_model, n_ctx=1024), store)
    async with a.run_test(size=SIZE) as pilot:
        sid = await chat_two_turns(pilot, a)
        assert a.states.path(sid).is_file()
        await type_and_send(pilot, a, "How cold is it there?")
        want = a.conv.messages[-1]["content"]
        assert a.states.flush(20)   # the third turn's save, as luce-chat's exit waits for it

    saved = state_files.read_tokens(a.states.path(sid))
    fresh = le.Engine(tiny_model, n_ctx=1024)
    b = make_app(fresh, store, resume=str(sid))
    async with b.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: any("resumed" in t for t in notices(b)), what="the resume notice")
        await wait_idle(pilot, b)
        text = next(t for t in notices(b) if "resumed" in t)
        history = b.conv.encode(add_generation_prompt=False)
        # the longest saved prefix: the last reply re-encoded may split into other tokens than generated
        n = state_files.common_prefix(saved, history)
        assert n > len(saved) - 12
        assert f"resumed {n:,} tokens in" in text and "prefill would take ~" in text
        assert fresh.tokens[:len(history)] == history
        assert fresh.stats()["n_prefill_tokens"] == len(history) - n   # only what the file did not hold
        # the chat was reopened at the third turn's state: the same question gets the same answer
        await type_and_send(pilot, b, "/retry")
        assert b.conv.messages[-1]["content"] == want


@run_async
async def test_a_damaged_state_is_reported_once_set_aside_and_the_chat_prefills(tiny_model, store):
    a = make_app(le.Engine(tiny_model, n_ctx=1024), store)
    async with a.run_test(size=SIZE) as pilot:
        sid = await chat_two_turns(pilot, a)
    p = a.states.path(sid)
    data = bytearray(p.read_bytes())
    data[5000] ^= 0xFF
    p.write_bytes(bytes(data))
    fresh = le.Engine(tiny_model, n_ctx=1024)
    b = make_app(fresh, store, resume=str(sid))
    async with b.run_test(size=SIZE) as pilot:
        await wait_idle(pilot, b)
        await wait_for(pilot, lambda: notices(b, "warning"), what="the warning")
        warned = [t for t in notices(b, "warning") if "saved engine state" in t]
        assert len(warned) == 1 and "damaged" in warned[0] and ".rejected-" in warned[0]
        rejected = [n for n in os.listdir(state_dir(store)) if ".rejected-" in n]
        assert len(rejected) == 1 and (state_dir(store) / rejected[0]).read_bytes() == bytes(data)
        history = b.conv.encode(add_generation_prompt=False)
        assert fresh.tokens[:len(history)] == history and fresh.stats()["n_prefill_tokens"] >= len(history)
        assert b.states.flush(20)
        assert p.is_file()                      # a fresh state of the re-prefilled chat
        assert state_files.read_tokens(p)[:len(history)] == history


@run_async
async def test_another_model_is_a_mismatch(tiny_model, store, tmp_path):
    a = make_app(le.Engine(tiny_model, n_ctx=1024), store)
    async with a.run_test(size=SIZE) as pilot:
        sid = await chat_two_turns(pilot, a)
    other = le.Model(write_tiny_gguf(tmp_path / "other.gguf", TinyConfig(tokenizer_from=le.default_model_path(), seed=9)),
                     device="cpu", n_threads=1)
    b = make_app(le.Engine(other, n_ctx=1024), store, resume=str(sid))
    async with b.run_test(size=SIZE) as pilot:
        await wait_idle(pilot, b)
        await wait_for(pilot, lambda: notices(b, "warning"), what="the mismatch warning")
        assert any("another model" in t and "kept as" in t for t in notices(b, "warning"))
        assert not any("resumed" in t for t in notices(b))


@run_async
async def test_sessions_list_marks_instant_resumes(tiny_model, store):
    a = make_app(le.Engine(tiny_model, n_ctx=1024), store)
    async with a.run_test(size=SIZE) as pilot:
        first = await chat_two_turns(pilot, a)
        await type_and_send(pilot, a, "/new")
        a.states.budget = 0                 # the second chat gets no state file
        await type_and_send(pilot, a, "What about giraffes?")
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(a.screen, SessionsScreen), what="the sessions screen")
        rows = {sid: str(a.screen.query_one("#list").get_option_at_index(i).prompt)
                for i, sid in enumerate(a.screen.ids)}
        assert "resumes instantly" in rows[first]
        assert sum("resumes instantly" in r for r in rows.values()) == 1


@run_async
async def test_a_save_that_fails_warns_once_and_the_chat_goes_on(tiny_model, store):
    """The states directory cannot be created (a file stands in its place: the test runs as root,
    where a read-only directory would still be writable)."""
    state_dir(store).write_text("not a directory")
    a = make_app(le.Engine(tiny_model, n_ctx=1024), store)
    async with a.run_test(size=SIZE) as pilot:
        await type_and_send(pilot, a, "Tell me about penguins")
        a.states.flush(20)
        await type_and_send(pilot, a, "And their eggs?")
        a.states.flush(20)
        await wait_for(pilot, lambda: notices(a, "warning"), what="the warning")
        warned = [t for t in notices(a, "warning") if "engine state" in t]
        assert len(warned) == 1 and "the chat itself is" in warned[0]
        assert len(store.path(a.persist.session_id)) == 4   # every message saved


def test_the_budget_evicts_the_oldest(tiny_model, tmp_path):
    eng = le.Engine(tiny_model, n_ctx=512)
    states = SessionStates(tmp_path, eng, budget_gib=4)
    eng.prefill(list(range(1, 200)))
    for sid in (1, 2, 3):
        states.save_soon(sid)
        assert states.flush(20)
        os.utime(states.path(sid), (1000 + sid, 1000 + sid))   # 1 is the oldest
    size = states.path(1).stat().st_size
    states.budget = 2 * size + 1
    assert states.evict(keep=3) == [1]
    assert states.saved_ids() == {2, 3}
    states.budget = 1
    assert states.evict(keep=3) == [2]
    assert states.saved_ids() == {3}


def test_stale_temporaries_are_removed(tiny_model, tmp_path):
    d = tmp_path / "states"
    d.mkdir()
    (d / "7.state.tmp-999999999").write_bytes(b"half a state")
    (d / f"8.state.tmp-{os.getpid()}").write_bytes(b"being written")
    SessionStates(tmp_path, le.Engine(tiny_model, n_ctx=256))
    assert sorted(os.listdir(d)) == [f"8.state.tmp-{os.getpid()}"]
