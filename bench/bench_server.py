"""`luce-chat serve` against the same engine in-process: decode speed, time to first token, prefix reuse.

    python bench/bench_server.py [--target PATH] [--device cpu] [--threads 1] [--tokens 256] [--runs 5]
                                 [--stream-interval 0,30] [--pin]

Three measurements on one model (default: the bundled SmolLM2), greedy, the server a real
subprocess on 127.0.0.1 and the official `openai` client streaming from it:

  * decode tok/s: the same long answer (same prompt, greedy, so the same tokens) streamed
    in-process (Conversation.run_turn's Step events) and through the server (SSE chunks), timed
    from the first token to the last on the consumer's side; the median of --runs, and the median
    of each round's paired ratio (the rounds interleave the three paths). Both sides pay for the
    same engine work, detokenization and Step events included; the server adds the event loop's
    JSON/SSE/HTTP work and a client process that parses every chunk, on the same cores;
  * time to first token: the same prompt sent again, so both prefill one token; TTFT in-process
    (from the call to the first Step) and through the server (from the request to the first
    content chunk); the median difference is the server's overhead;
  * prefilled tokens per turn of a 10-turn conversation, with prefix reuse (the server's normal
    path) and without (each request made unique at its start, so nothing can be reused).

--stream-interval A,B,…: one server per value (serve --stream-interval MS), every round streams
from each, so their ratios share the round's load. Each server's event-loop thread's CPU time per
streamed token is read from /proc (the server's own cost, whatever the load). --pin: the engine
thread(s) on their own cores (in-process and in the server), the server's loop and the client on
the next ones (cpu_pinning.py; needs threads + 1 cores, a spare one for the client with threads + 2).

Prints a table and writes JSON (--json PATH, default bench/results/server.json).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import cpu_pinning  # noqa: E402
import luce_engine as le  # noqa: E402
from luce_engine import Sampling  # noqa: E402
from luce_tui import events  # noqa: E402
from luce_tui.conversation import Conversation  # noqa: E402
from server_support import serve  # noqa: E402

GREEDY = Sampling.chat_default().updated(temperature=0)
LONG = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


def in_process(conv: Conversation, messages, max_tokens: int) -> tuple[float, float, int]:
    """(TTFT s, decode tok/s, tokens) of one turn in-process, on the conversation's current context."""
    t0 = time.perf_counter()
    stamps: list[tuple[float, int]] = []

    def emit(ev):
        match ev:
            case events.Step(tokens=toks) if toks:
                stamps.append((time.perf_counter(), len(toks)))

    r = conv.run_turn(messages, sampling=GREEDY, max_tokens=max_tokens, emit=emit)
    return _rates(t0, stamps, r.generated_tokens)


def through_server(client, messages, max_tokens: int) -> tuple[float, float, int, str]:
    t0 = time.perf_counter()
    stamps, text, n = [], [], 0
    for chunk in client.chat.completions.create(model="any", messages=messages, temperature=0, max_tokens=max_tokens,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content:
            stamps.append((time.perf_counter(), 1))
            text.append(chunk.choices[0].delta.content)
        if chunk.usage:
            n = chunk.usage.completion_tokens
    ttft, tps, _ = _rates(t0, stamps, n)
    return ttft, tps, n, "".join(text)


def through_server_raw(url: str, messages, max_tokens: int) -> tuple[float, float, int, str]:
    """The same stream read with plain httpx (no client-side models): what the server itself costs."""
    import httpx

    t0 = time.perf_counter()
    stamps, text, n = [], [], 0
    body = {"messages": messages, "temperature": 0, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
            if delta.get("content"):
                stamps.append((time.perf_counter(), 1))
                text.append(delta["content"])
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
    ttft, tps, _ = _rates(t0, stamps, n)
    return ttft, tps, n, "".join(text)


def _rates(t0: float, stamps: list[tuple[float, int]], n_tokens: int) -> tuple[float, float, int]:
    """TTFT, and tok/s from the first token to the last (the tokens after the first over that time)."""
    if len(stamps) < 2:
        return (stamps[0][0] - t0 if stamps else float("nan")), float("nan"), n_tokens
    first, last = stamps[0][0], stamps[-1][0]
    return first - t0, (n_tokens - stamps[0][1]) / (last - first), n_tokens


def ten_turns(client, unique: bool) -> list[dict]:
    messages = [{"role": "system", "content": "You are brief."}]
    rows = []
    for turn in range(10):
        messages.append({"role": "user", "content": f"Give me one word about the number {turn}."})
        sent = messages
        if unique:   # a system prompt that starts differently each turn: only the template's first tokens are shared
            sent = [{"role": "system", "content": f"({turn}) You are brief."}] + messages[1:]
        r = client.chat.completions.create(model="any", messages=sent, temperature=0, max_tokens=8)
        t = r.model_extra["luce"]["timings"]
        rows.append({"turn": turn + 1, "prompt_tokens": r.usage.prompt_tokens,
                     "cached": r.usage.prompt_tokens_details.cached_tokens, "prefilled": t["prompt_n"],
                     "prefill_ms": t["prompt_ms"]})
        messages.append({"role": "assistant", "content": r.choices[0].message.content})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-ctx", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--stream-interval", default="0", metavar="MS[,MS…]",
                    help="the servers' --stream-interval values, one server each (default: 0)")
    ap.add_argument("--pin", action="store_true", help="engine, server loop and client on separate cores")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "server.json"))
    a = ap.parse_args(argv)
    intervals = [float(x) for x in a.stream_interval.split(",")]
    lay = cpu_pinning.layout(a.threads) if a.pin else None
    if lay:
        cpu_pinning.pin_self(lay.engine)   # the in-process engine (and any worker thread it starts)
    target = a.target or le.default_model_path()
    model = le.Model(target, device=a.device, n_threads=a.threads)
    conv = Conversation(le.Engine(model, n_ctx=a.max_ctx))
    out: dict = {"model": Path(target).name, "device": a.device, "threads": a.threads, "tokens": a.tokens,
                 "pin": lay.describe() if lay else None, "load_before": os.getloadavg()}
    flags = ["--target", target, "--device", a.device, "--threads", str(a.threads), "--max-ctx", str(a.max_ctx)]
    with contextlib.ExitStack() as stack:
        # (these flags come after serve()'s own --device/--threads, so they are the ones that count)
        servers = [stack.enter_context(serve(*flags, "--stream-interval", f"{ms:g}")) for ms in intervals]
        clients = [s.client() for s in servers]
        for s, c in zip(servers, clients):   # warm-up: the threads exist, the first-request costs are paid
            through_server(c, [{"role": "user", "content": "Hi!"}], 4)

        def as_client():
            if lay:
                for s in servers:
                    cpu_pinning.pin_server(s.proc.pid, lay)
                cpu_pinning.pin_self(lay.client)

        def as_engine():
            if lay:
                cpu_pinning.pin_self(lay.engine)

        local, remote, raw = [], [[] for _ in servers], [[] for _ in servers]
        loop_ms = [[] for _ in servers]   # each server's loop thread: CPU ms per streamed token
        for _ in range(a.runs):   # alternate, so machine load hits all alike
            as_engine()
            conv.engine.truncate(0)
            local.append(in_process(conv, LONG, a.tokens))
            as_client()
            for k, (s, c) in enumerate(zip(servers, clients)):
                before = cpu_pinning.cpu_ns(s.proc.pid).get(s.proc.pid, 0)
                remote[k].append(through_server(c, LONG, a.tokens))
                raw[k].append(through_server_raw(s.url, LONG, a.tokens))
                used = cpu_pinning.cpu_ns(s.proc.pid).get(s.proc.pid, 0) - before
                loop_ms[k].append(used / 1e6 / (remote[k][-1][2] + raw[k][-1][2]))
        tps_local = statistics.median(r[1] for r in local)
        expected = conv.messages[-1]["content"]   # (before the TTFT turns below replace it)
        out.update(decode_tps_in_process=tps_local, intervals=[], load_after_decode=os.getloadavg())
        for k, ms in enumerate(intervals):
            row = {"stream_interval_ms": ms,
                   "same_text": remote[k][-1][3] == expected == raw[k][-1][3],
                   "decode_tps_server": statistics.median(r[1] for r in remote[k]),
                   "decode_tps_server_httpx": statistics.median(r[1] for r in raw[k]),
                   # each round's server run over the in-process run of that round: the load swings
                   # between rounds, and a paired ratio cancels what the runs of a round shared
                   "paired_ratio_median": statistics.median(r[1] / l[1] for l, r in zip(local, remote[k])),
                   "paired_ratio_httpx_median": statistics.median(r[1] / l[1] for l, r in zip(local, raw[k])),
                   "per_round": [round(r[1] / l[1], 3) for l, r in zip(local, remote[k])],
                   "per_round_httpx": [round(r[1] / l[1], 3) for l, r in zip(local, raw[k])],
                   "loop_cpu_ms_per_token": statistics.median(loop_ms[k]), "generated": remote[k][-1][2]}
            row["ratio"] = row["decode_tps_server"] / tps_local
            row["ratio_httpx"] = row["decode_tps_server_httpx"] / tps_local
            # TTFT with the prompt already in the context: both evaluate one token, the rest is overhead
            ttft_local, ttft_remote = [], []
            short = [{"role": "user", "content": "Hi!"}]
            for _ in range(max(a.runs, 7)):
                as_engine()
                in_process(conv, short, 1)
                ttft_local.append(in_process(conv, short, 2)[0])
                as_client()
                through_server(clients[k], short, 1)
                ttft_remote.append(through_server(clients[k], short, 2)[0])
            row.update(ttft_ms_in_process=1e3 * statistics.median(ttft_local),
                       ttft_ms_server=1e3 * statistics.median(ttft_remote))
            row["ttft_overhead_ms"] = row["ttft_ms_server"] - row["ttft_ms_in_process"]
            out["intervals"].append(row)
        reuse, fresh = ten_turns(clients[0], unique=False), ten_turns(clients[0], unique=True)
    out.update(turns_with_reuse=reuse, turns_without_reuse=fresh, load_after=os.getloadavg())
    print(f"{out['model']} on {a.device}, {a.threads} thread(s), {a.tokens} tokens, {a.runs} interleaved rounds; "
          f"{out['pin'] or 'not pinned'}; load average before {out['load_before'][0]:.1f}, "
          f"after {out['load_after'][0]:.1f}")
    print(f"in-process: {tps_local:,.1f} tok/s (median)")
    for r in out["intervals"]:
        print(f"--stream-interval {r['stream_interval_ms']:g}: {r['decode_tps_server']:,.1f} tok/s with the openai client "
              f"(ratio {r['ratio']:.3f}, paired median {r['paired_ratio_median']:.3f}), {r['decode_tps_server_httpx']:,.1f} "
              f"with httpx ({r['ratio_httpx']:.3f}, paired {r['paired_ratio_httpx_median']:.3f}); loop thread "
              f"{r['loop_cpu_ms_per_token']:.3f} ms CPU/token; TTFT overhead {r['ttft_overhead_ms']:.1f} ms "
              f"({r['ttft_ms_in_process']:.1f} → {r['ttft_ms_server']:.1f}); same text: {r['same_text']}")
        print(f"    per round: {r['per_round']}; httpx: {r['per_round_httpx']}")
    print(f"{'turn':>4} {'prompt':>7} | {'reuse: cached':>13} {'prefilled':>9} {'ms':>7} | {'no reuse: prefilled':>19} {'ms':>7}")
    for r, f in zip(reuse, fresh):
        print(f"{r['turn']:>4} {r['prompt_tokens']:>7} | {r['cached']:>13} {r['prefilled']:>9} {r['prefill_ms']:>7.1f} | "
              f"{f['prefilled']:>19} {f['prefill_ms']:>7.1f}")
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
