"""Pieces of the server without a server: a chunk's bytes, and the engine-to-loop event channel."""
from __future__ import annotations

import asyncio
import json
import threading

from luce_engine import Sampling
from luce_tui import events
from luce_tui.server import schema
from luce_tui.server.app import _Reply
from luce_tui.server.reply import merge
from luce_tui.server.worker import Job


def test_plain_chunks_are_the_bytes_json_dumps_writes():
    """The fast path (a precomputed head, only the delta encoded) sends exactly what encoding the
    whole chunk writes, for text that JSON must escape too."""
    req = schema.parse(json.dumps({"messages": [{"role": "user", "content": "x"}], "stream": True}).encode(),
                       Sampling.chat_default())
    reply = _Reply(req, 'model "é"', "")
    deltas = [{"role": "assistant", "content": ""}, {"content": 'héllo "\n\u2028 ☃ \\ \x00'},
              {"reasoning_content": "think"}, {"tool_calls": [{"index": 0, "function": {"arguments": '{"a'}}]}]
    for delta in deltas:
        body = {"id": reply.id, "object": "chat.completion.chunk", "created": reply.created, "model": reply.model_id,
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        given = dict(delta, _spans=[("x", False)]) if "content" in delta else dict(delta)
        assert reply.chunk(given) == f"data: {json.dumps(body, ensure_ascii=False)}\n\n"
    # drafted spans and the finish still take the full encoder, with their extras
    drafted = reply.chunk({"content": "ab", "_spans": [("a", True), ("b", False)]})
    assert json.loads(drafted[6:])["luce"] == {"spans": [["a", True], ["b", False]]}
    assert json.loads(reply.chunk({}, "stop", luce={"n": 1})[6:])["choices"][0]["finish_reason"] == "stop"


def test_events_emitted_while_the_loop_is_busy_arrive_together_in_order():
    async def main():
        job = Job(lambda job: None, asyncio.get_running_loop())
        t = threading.Thread(target=lambda: [job.emit(i) for i in range(1000)])
        t.start()
        t.join()                       # the loop was busy (here: blocked) the whole time
        got = []
        while len(got) < 1000:
            await job.wait()
            got += job.take()
        assert got == list(range(1000))
        assert not await job.wait(0.01)   # nothing more: the wait times out
        waiter = asyncio.ensure_future(job.wait())
        await asyncio.sleep(0)
        job.interrupt()                 # the client left: the wait ends without an event
        assert await waiter is False

    asyncio.run(main())


def test_a_stream_interval_holds_fast_steps_for_the_next_event():
    """--stream-interval: the first step wakes the loop at once; steps that follow within the
    interval do not (they go with the next event); anything but a step always wakes it."""
    async def main():
        job = Job(lambda job: None, asyncio.get_running_loop(), stream_interval=60.0)

        def emit(*evs):   # from another thread, as the engine does
            t = threading.Thread(target=lambda: [job.emit(e) for e in evs])
            t.start()
            t.join()

        steps = [events.Step([], [], str(i), []) for i in range(3)]
        waiter = asyncio.ensure_future(job.wait())
        await asyncio.sleep(0)
        emit(steps[0])
        await asyncio.wait_for(waiter, 5)   # the first step: at once
        assert job.take() == [steps[0]]
        waiter = asyncio.ensure_future(job.wait())
        await asyncio.sleep(0)
        emit(steps[1], steps[2])
        await asyncio.sleep(0.1)
        assert not waiter.done()            # within the interval: held
        end = events.Finished(None)
        emit(end)
        await asyncio.wait_for(waiter, 5)
        assert job.take() == [steps[1], steps[2], end]

    asyncio.run(main())


def test_merge_joins_steps_of_one_kind_and_keeps_the_rest_apart():
    """The deltas of steps taken together: content with content (spans kept), one call's argument
    fragments with each other; a new call (it has an id) and a change of kind start a new delta."""
    def args(i, text):
        return {"tool_calls": [{"index": i, "function": {"arguments": text}}]}

    def opening(i):
        return {"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                "function": {"name": "f", "arguments": ""}}]}

    deltas = [{"content": "a", "_spans": [("a", True)]}, {"content": "b", "_spans": [("b", False)]},
              opening(0), args(0, '{"x": '), args(0, "1}"), {"reasoning_content": "r"}, {"reasoning_content": "s"},
              opening(1), args(1, "{}"), args(1, "")]
    assert merge(deltas) == [{"content": "ab", "_spans": [("a", True), ("b", False)]},
                             opening(0), args(0, '{"x": 1}'), {"reasoning_content": "rs"}, opening(1), args(1, "{}")]
