"""A chat process for tests/test_state_faults.py, killed with SIGKILL at chosen moments.

    python tests/fault_child.py chat MODEL DATA_DIR TURNS      turns of the app's saving path, printing
                                                              "done <message id>" after each saved message
                                                              and "streaming" during each reply
    python tests/fault_child.py write MODEL STATE_FILE N       full state writes of an N-token context, forever
    python tests/fault_child.py soak MODEL DATA_DIR TURNS      TURNS turns in one process, printing RSS

It drives what the app drives after each turn (luce_tui.persist.Persistence for the messages,
luce_tui.session_state.SessionStates for the engine state, luce_tui.conversation.Conversation for
the reply), without a terminal.
"""
from __future__ import annotations

import llama_cpp  # noqa: F401
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from luce_engine import Engine, Model, Sampling  # noqa: E402

GREEDY = Sampling.chat_default().updated(temperature=0)


def say(*parts) -> None:
    """One line in one write: the state writer thread's warnings never split another line."""
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def chat(model_path: str, data_dir: str, turns: int, *, soak: bool = False) -> None:
    from luce_sessions import SessionStore
    from luce_tui.conversation import Conversation
    from luce_tui.persist import Persistence
    from luce_tui.session_state import SessionStates

    model = Model(model_path, device="cpu", n_threads=1)
    engine = Engine(model, n_ctx=2048)
    store = SessionStore(data_dir)
    persist = Persistence(store, {"model": model.name})
    states = SessionStates(data_dir, engine, report=lambda t: say("warning", t))
    conv = Conversation(engine)
    for turn in range(turns):
        if len(conv.messages) >= 16:   # a new chat now and then keeps the context small
            conv.messages, persist.session_id = [], None
        user = {"role": "user", "content": f"turn {turn}: tell me something about the number {turn}"}
        history = conv.messages + [user]
        parent = conv.messages[-1]["id"] if conv.messages else None

        def started(reused, total, user=user, parent=parent):
            user["id"] = persist.save_user(user, parent, [])
            if not soak:
                say("done", user["id"])

        def step(r):
            if not soak:
                say("streaming")

        result = conv.respond(history, sampling=GREEDY, max_tokens=24 if not soak else 8, on_start=started,
                              on_step=step)
        reply = conv.messages[-1]
        reply["id"] = persist.save_reply(result.text, user["id"], {}, [])
        states.save_soon(persist.session_id)
        if soak:
            states.flush(30)
            if turn % 100 == 0 or turn == turns - 1:
                say("rss", turn, rss_kib())
        else:
            say("done", reply["id"])
    states.flush(30)
    store.close()


def write_forever(model_path: str, state_path: str, n: int) -> None:
    engine = Engine(Model(model_path, device="cpu", n_threads=1), n_ctx=max(512, n + 16))
    engine.prefill([1 + (i * 7) % 200 for i in range(n)])
    engine.save_state(state_path, append=False)
    say("ready")
    while True:
        engine.save_state(state_path, append=False)


if __name__ == "__main__":
    mode, model_path, target, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if mode == "write":
        write_forever(model_path, target, count)
    else:
        chat(model_path, target, count, soak=mode == "soak")
    os._exit(0)
