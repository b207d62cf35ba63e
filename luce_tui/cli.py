"""`luce-chat`: argument parsing, model loading, the one-shot mode (-p) and dispatch to the TUI or REPL.

Settings come from the flags, then the config file (`~/.config/luce/config.toml`, see userconfig),
then built-in defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from luce_tui import config
from luce_tui.runtime import Runtime

EXIT_ERROR = 2          # bad flags or a model that cannot be loaded (argparse uses 2 as well)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl+C


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("luce-chat")
    except PackageNotFoundError:
        return "unknown"


def _number(value: str, kind: type, what: str, ok) -> int | float:
    """An argparse type: value as `kind`, or an error that says what was expected (argparse's own
    would name the function: "invalid _positive value")."""
    try:
        n = kind(value)
    except ValueError:
        n = None
    if n is None or not ok(n):
        raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
    return n


def _positive(value: str) -> int:
    return _number(value, int, "a positive integer", lambda n: n > 0)


def _ratio(value: str) -> float:
    return _number(value, float, "a ratio in (0, 1]", lambda r: 0.0 < r <= 1.0)


def _non_negative(value: str) -> int:
    return _number(value, int, "an integer >= 0", lambda n: n >= 0)


class _Parser(argparse.ArgumentParser):
    """Errors as one line plus where to look, not under the whole usage block."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\nusage: {self.prog} [options] "
                              f"(`{self.prog} --help` lists them)\n")


DEFAULT_STREAM_INTERVAL_MS = 20.0  # `serve --stream-interval` (bench/RESULTS.md has the measurement)


def build_parser(serve: bool = False) -> argparse.ArgumentParser:
    """The flags of luce-chat; serve=True: those of `luce-chat serve` (the same model, engine,
    speculation, PFlash and sampling flags, and the server's own instead of the modes)."""
    from luce_engine import Sampling

    chat = Sampling.chat_default()
    if serve:
        p = _Parser(prog="luce-chat serve",
                    description="Serve the model over an OpenAI-compatible HTTP API (POST /v1/chat/completions).")
        srv = p.add_argument_group("server")
        srv.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
        srv.add_argument("--port", type=_non_negative, default=8080, help="port (default: 8080; 0 picks a free one)")
        srv.add_argument("--api-key", metavar="KEY", help="require `Authorization: Bearer KEY` on /v1/*")
        srv.add_argument("--max-queue", type=_non_negative, default=8, metavar="N",
                         help="requests that may wait behind the running one; more get 429 (default: 8)")
        srv.add_argument("--keepalive", type=float, default=10.0, metavar="S",
                         help="seconds between SSE keep-alive comments while a stream has nothing to send, also "
                              "while it waits in the queue or PFlash scores (default: 10)")
        srv.add_argument("--model-name", metavar="NAME",
                         help="the model id in /v1/models and responses (default: the GGUF's file name)")
        srv.add_argument("--stream-interval", type=float, default=DEFAULT_STREAM_INTERVAL_MS, metavar="MS",
                         help="a streamed step that comes sooner than this after the last one sent goes out with "
                              "the next, in one chunk: less work a token for the server and the client when "
                              "tokens come fast; the first token is never held (default: "
                              f"{DEFAULT_STREAM_INTERVAL_MS:g}; 0: a chunk every step)")
        srv.add_argument("--state-dir", metavar="DIR",
                         help="where the engine's context is saved after each request, so that prefix reuse "
                              "survives a restart (default: server-states/ in the data directory)")
        srv.add_argument("--no-state-cache", action="store_true",
                         help="keep prefix reuse in memory only (no state files read or written)")
        srv.add_argument("--state-budget-gib", type=float, metavar="GIB",
                         help="disk budget of the state files; the oldest go first (default: config key "
                              "state_budget_gib, else 4)")
        srv.add_argument("--data-dir", metavar="DIR",
                         help="the data directory (default: $LUCE_DATA_DIR, else $XDG_DATA_HOME/luce)")
        _model_flags(p, chat)
        return p
    p = _Parser(
        prog="luce-chat", description="Chat with a local GGUF model in the terminal (inference runs in-process).",
        epilog="`luce-chat serve --help`: the OpenAI-compatible server on the same engine.")
    mode = p.add_argument_group("mode")
    mode.add_argument("-p", "--prompt", metavar="TEXT",
                      help="answer one question and exit (stream to stdout); '-' reads it from stdin")
    mode.add_argument("--plain", action="store_true",
                      help="the plain prompt_toolkit chat loop instead of the full-screen app "
                           "(also used when stdin or stdout is not a terminal)")
    mode.add_argument("--resume", nargs="?", const="last", metavar="ID|last",
                      help="reopen a saved chat in the app (default: the last one)")
    mode.add_argument("--plan", action="store_true", help="print the memory plan for these settings and exit")
    mode.add_argument("--plan-memory", metavar="SIZE", default=None,
                      help="with --plan: check the plan against a device of this size (e.g. 24GiB) instead of this machine")
    _model_flags(p, chat)
    remote = p.add_argument_group("remote backend (instead of the in-process engine)")
    remote.add_argument("--remote", metavar="URL",
                        help="chat with the model of an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1 "
                             "(luce-chat serve, llama.cpp, vLLM, SGLang …); the model flags then do not apply")
    remote.add_argument("--api-key", metavar="KEY", help="with --remote: the server's API key")
    remote.add_argument("--model", metavar="NAME", help="with --remote: the model to ask for (default: the server's first)")
    misc = p.add_argument_group("other")
    misc.add_argument("--data-dir", metavar="DIR",
                      help="where history is kept (default: $LUCE_DATA_DIR, else $XDG_DATA_HOME/luce)")
    misc.add_argument("--theme", metavar="NAME", help="colour theme of the app: dark, light, high-contrast, "
                      "or a file's name in ~/.config/luce/themes/ (default: dark)")
    misc.add_argument("--stats", action="store_true", help="print a stats line on stderr after the reply")
    return p


def _model_flags(p: argparse.ArgumentParser, chat) -> None:
    """The flags the app and the server share: model, engine, speculation, PFlash, sampling."""
    model = p.add_argument_group("model and engine")
    model.add_argument("--target", metavar="PATH", help="GGUF model file (default: the bundled SmolLM2-135M-Instruct)")
    model.add_argument("--draft", metavar="PATH",
                       help="DFlash draft GGUF (llama.cpp `dflash` or lucebox `dflash-draft`) for speculative decoding; "
                            "'default': the draft shipped for the bundled model (used by default where it is faster)")
    model.add_argument("--draft-max", type=_positive, metavar="N",
                       help="draft tokens proposed per step (default: the draft's block size - 1)")
    model.add_argument("--spec", choices=("auto", "chain", "tree", "off"),
                       help="speculative decoding with --draft: chain, tree (DDTree: one draft pass verified as a "
                            "tree of --tree-budget nodes), off, or auto (default: per step plain "
                            "decoding, the chain or a tree, whichever measures fastest here; on hybrid targets plain "
                            "or the chain)")
    model.add_argument("--tree-budget", type=_positive, metavar="N",
                       help=f"--spec tree: draft-tree nodes verified per step (default {config.DEFAULT_TREE_BUDGET}); "
                            "--spec auto weighs it besides its own budgets")
    model.add_argument("--pflash-scorer", "--prefill-drafter", dest="pflash_scorer", metavar="PATH",
                       help="PFlash scorer GGUF (a small llama/qwen3 model, e.g. Qwen3-0.6B): long attachments are "
                            "compressed to the parts it ranks relevant to the question before the target prefills them")
    model.add_argument("--pflash-mode", choices=("off", "auto", "always"),
                       help="with --pflash-scorer: compress attachments above --pflash-threshold (auto, the "
                            "default), always, or never (off)")
    model.add_argument("--pflash-threshold", type=_non_negative, metavar="N",
                       help=f"auto compression: a message's attachments of more than N tokens "
                            f"(default: {config.DEFAULT_PFLASH_THRESHOLD})")
    model.add_argument("--pflash-keep-ratio", type=_ratio, metavar="R",
                       help=f"share of an attachment's 32-token chunks kept (default: {config.DEFAULT_KEEP_RATIO})")
    # The engine validates the device and lists the available ones in its error message.
    model.add_argument("--device", help="auto, cpu or cuda:N (default: auto)")
    model.add_argument("--max-ctx", type=_positive, metavar="N",
                       help="context size in tokens, capped to the model's training context (default: the "
                            "training context, or the largest part of it that fits the free memory)")
    model.add_argument("--cache-type-k", choices=config.CACHE_TYPES, help="KV cache type of K (default: f16)")
    model.add_argument("--cache-type-v", choices=config.CACHE_TYPES, help="KV cache type of V (default: f16)")
    model.add_argument("--threads", type=_non_negative, metavar="N",
                       help=f"CPU threads, at most the CPUs of this machine (default: {config.default_threads()} here: "
                            "every CPU up to 4, half of them beyond)")
    model.add_argument("--rollback", choices=("snapshot", "replay"),
                       help="how a hybrid target (qwen35) undoes rejected draft tokens: recompute the recurrent "
                            "state (replay, the default; far less memory) or keep a copy per verified token (snapshot)")
    model.add_argument("--small-batch-kernels", choices=("on", "off"),
                       help="CUDA: decode steps and draft verifies on luce's own quantized matmul kernels (default: on)")
    model.add_argument("--step-graphs", choices=("on", "off"),
                       help="CUDA, with --small-batch-kernels on: capture each decode or verify step once as one "
                            "CUDA graph and replay it (default: on)")
    model.add_argument("--fuse-weights", choices=("on", "off"),
                       help="store projections that share an input as one fused weight on the device (default: on)")
    model.add_argument("--repack-weights", choices=("on", "off"),
                       help="CPU: store Q4_0 / Q4_K / IQ4_NL matmul weights in ggml's repacked layout, as llama.cpp "
                            "does (default: on)")

    s = p.add_argument_group("sampling (defaults: the chat preset)")
    s.add_argument("--temp", dest="temperature", type=float, metavar="T",
                   help=f"temperature; 0 is greedy (default: {chat.temperature:g})")
    s.add_argument("--top-k", dest="top_k", type=int, metavar="K", help=f"(default: {chat.top_k})")
    s.add_argument("--top-p", dest="top_p", type=float, metavar="P", help=f"(default: {chat.top_p:g})")
    s.add_argument("--min-p", dest="min_p", type=float, metavar="P", help=f"(default: {chat.min_p:g})")
    s.add_argument("--repeat-penalty", dest="repeat_penalty", type=float, metavar="X",
                   help=f"(default: {chat.repeat_penalty:g})")
    s.add_argument("--presence-penalty", dest="presence_penalty", type=float, metavar="X",
                   help=f"(default: {chat.presence_penalty:g})")
    s.add_argument("--seed", type=_non_negative, metavar="N", help="fixed seed (default: random per reply)")
    s.add_argument("--max-tokens", type=_positive, metavar="N",
                   help=f"most tokens per reply (default: {config.DEFAULT_MAX_TOKENS})")
    s.add_argument("--system", metavar="TEXT", help="system prompt (default: the model template's own)")

    common = p.add_argument_group("configuration")
    common.add_argument("--config", metavar="PATH", help="config file (default: ~/.config/luce/config.toml)")
    common.add_argument("-v", "--verbose", action="store_true", help="model info and per-reply stats on stderr")
    common.add_argument("--version", action="version", version=f"%(prog)s {_version()}")


def _stdin_text() -> str:
    """The question of `-p -`: stdin as UTF-8 text (ValueError saying why not, as /attach does)."""
    data = sys.stdin.buffer.read()
    if b"\x00" in data:
        raise ValueError("-p - reads the question from stdin, which holds binary data (NUL bytes); "
                         "pipe text, or /attach the file in the app")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"-p - reads the question from stdin, which is not UTF-8 text (bad byte at offset "
                         f"{e.start})") from None
    return text.replace("\r\n", "\n").strip()   # `echo question | luce-chat -p -` ends in a newline


def _fail(message: str) -> int:
    print(f"luce-chat: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def load(settings: config.EngineSettings, *, verbose: bool = False) -> Runtime:
    """Model + Engine (+ tokenizer and chat template, so their errors surface here too), with the
    draft and its speculator and the PFlash compressor that the settings ask for."""
    from luce_engine import Engine, Model

    t0 = time.perf_counter()
    model = Model(settings.target, **settings.model_params())
    model.chat_template   # builds the tokenizer as well
    from luce_engine.default_draft import resolve_draft

    choice = resolve_draft(settings.draft, settings.spec, model)   # --draft default / the shipped draft's policy
    draft = None
    if choice.path:
        from luce_engine import DraftModel

        settings.draft = choice.path
        draft = DraftModel(choice.path, model, n_ctx_draft=config.DRAFT_CTX, **settings.draft_params())
    if draft is not None and settings.spec == "tree":
        _check_tree_target(model)
    n_verify_max = _n_verify_max(draft.block_size if draft else None, settings.draft_max, _tree_budget(settings, model))
    n_ctx = _n_ctx(settings, model, n_verify_max)
    _check_fits(settings, model, n_ctx, n_verify_max)
    engine = Engine(model, n_ctx=n_ctx, cache_type_k=settings.cache_type_k, cache_type_v=settings.cache_type_v,
                    n_verify_max=n_verify_max, **settings.engine_params())
    runtime = Runtime(engine, draft=draft, compressor=_compressor(settings, model))
    if draft is not None and settings.spec == "tree":
        from luce_engine.tree_speculative import TreeSpeculator

        runtime.speculator = TreeSpeculator(engine, draft, budget=settings.tree_budget, max_depth=settings.draft_max,
                                            capture_ring=config.CAPTURE_RING)
    elif draft is not None and settings.spec == "auto":
        from luce_engine.spec_auto import AdaptiveSpeculator

        runtime.speculator = AdaptiveSpeculator(engine, draft, max_draft=settings.draft_max,
                                                tree_budgets=_auto_tree_budgets(settings, model),
                                                capture_ring=config.CAPTURE_RING)
    elif draft is not None:
        from luce_engine.speculative import ChainSpeculator

        runtime.speculator = ChainSpeculator(engine, draft, max_draft=settings.draft_max,
                                             capture_ring=config.CAPTURE_RING)
    if verbose and runtime.compressor is not None:
        print(f"luce-chat: PFlash: {runtime.compressor.describe()}", file=sys.stderr)
    runtime.spec_note = choice.note
    if verbose and draft is not None:
        print(f"luce-chat: draft {os.path.basename(settings.draft)} ({draft.dialect} dialect, block {draft.block_size}, "
              f"features of target layers {list(draft.capture_layers)})", file=sys.stderr)
    if verbose:
        print(f"luce-chat: {model.name} ({model.arch}, {model.n_params / 1e6:.0f}M params) on {model.device}, "
              f"n_ctx {engine.n_ctx}, KV {engine.cache_type_k}/{engine.cache_type_v}, "
              f"loaded in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return runtime


def _compressor(settings: config.EngineSettings, model):
    """The PFlash scorer for long attachments (--pflash-scorer), on the target's device."""
    if not settings.pflash_scorer or settings.pflash_mode == "off":
        return None
    from luce_engine import Model, Scorer
    from luce_engine.pflash import AttachmentCompressor

    scorer = Scorer(Model(settings.pflash_scorer, device=settings.device, n_threads=settings.threads))
    scorer.tokenizer   # built now, so its errors surface at start-up
    return AttachmentCompressor(scorer, model.tokenizer, mode=settings.pflash_mode,
                                threshold=settings.pflash_threshold, keep_ratio=settings.pflash_keep_ratio)


def _target_need(settings: config.EngineSettings, model, n_verify_max: int):
    """need(n_ctx, type_k, type_v, verify=…) -> the target's bytes on its device (memory.device_need)."""
    from luce_tui import memory

    def need(n: int, tk: str = settings.cache_type_k, tv: str = settings.cache_type_v,
             verify: int = n_verify_max) -> int:
        plan = model.plan(n_ctx=n, cache_type_k=tk, cache_type_v=tv, n_verify_max=verify, check=False,
                          **settings.engine_params())
        return memory.device_need(plan)

    return need


def _n_ctx(settings: config.EngineSettings, model, n_verify_max: int, *, budget: int | None = None) -> int:
    """--max-ctx (capped to the training context), else the training context when it fits the
    memory, else the largest context that does (memory.auto_ctx), with a note saying so."""
    from luce_tui import memory

    n_ctx = settings.n_ctx_for(model.n_ctx_train)
    if settings.max_ctx_given:
        if n_ctx < settings.max_ctx:
            print(f"luce-chat: --max-ctx {settings.max_ctx} capped to the model's training context {n_ctx}",
                  file=sys.stderr)
        return n_ctx
    need = _target_need(settings, model, n_verify_max)
    where = f"the {config.human_bytes(budget)} of --plan-memory" if budget else None
    if budget is None:
        plan = model.plan(n_ctx=n_ctx, cache_type_k=settings.cache_type_k, cache_type_v=settings.cache_type_v,
                          n_verify_max=n_verify_max, check=False, **settings.engine_params())
        budget = memory.budget(plan)
    chosen = memory.auto_ctx(lambda n: need(n), n_ctx, budget)
    if chosen < n_ctx:
        where = where or f"the {config.human_bytes(budget)} free on {model.device}"
        print(f"luce-chat: context {chosen:,} tokens: the model's training context ({n_ctx:,}) does not fit "
              f"{config.AUTO_CTX_SHARE:.0%} of {where} (--max-ctx chooses another)", file=sys.stderr)
    return chosen


def _check_fits(settings: config.EngineSettings, model, n_ctx: int, n_verify_max: int) -> None:
    """Before the engine allocates: the plan against the free memory, in --plan's words."""
    from luce_engine import InsufficientMemoryError

    from luce_tui import memory

    need = _target_need(settings, model, n_verify_max)
    plan = model.plan(n_ctx=n_ctx, cache_type_k=settings.cache_type_k, cache_type_v=settings.cache_type_v,
                      n_verify_max=n_verify_max, check=False, **settings.engine_params())
    budget = memory.budget(plan)
    total = memory.device_need(plan)
    if budget and total > budget:
        hints = _plan_hints(settings, n_ctx, budget, 0, 0, 0, need)
        raise InsufficientMemoryError(f"{memory.verdict(total, budget, model.device)}; {hints}")


def _uses_draft(settings: config.EngineSettings) -> bool:
    return bool(settings.draft) and settings.spec != "off"


def _n_verify_max(block_size: int | None, draft_max: int | None = None, tree_budget: int = 0) -> int:
    """Tokens one verify may hold (a hybrid target's rollback buffers grow with it): x0 plus the
    proposals of one draft block; 16 at least unless --draft-max asks for fewer proposals; with
    --spec tree (or auto on a dense target), the largest tree's root and budget nodes if more.
    Without a draft nothing verifies, so no rollback buffers (2.4 GiB on a 27B qwen35)."""
    if not block_size:
        return 0
    chain = min(draft_max, block_size - 1) + 1 if draft_max else max(16, block_size)
    return max(chain, tree_budget + 1 if tree_budget else 0)


def _tree_budget(settings: config.EngineSettings, model) -> int:
    """The largest tree a step may verify: --spec tree's budget, or the largest that auto weighs."""
    if settings.spec == "tree":
        return settings.tree_budget
    return max(_auto_tree_budgets(settings, model), default=0) if settings.spec == "auto" else 0


def _auto_tree_budgets(settings: config.EngineSettings, model) -> tuple[int, ...]:
    """The DDTree budgets --spec auto weighs: its own and --tree-budget's; none on a hybrid target."""
    from luce_engine.spec_auto import AUTO_TREE_BUDGETS
    from luce_engine.tree_speculative import TREE_ARCHS

    if model.arch not in TREE_ARCHS:
        return ()
    return tuple(sorted(set(AUTO_TREE_BUDGETS) | {settings.tree_budget}))


def _check_tree_target(model) -> None:
    from luce_engine.errors import UnsupportedModelError
    from luce_engine.tree_speculative import HYBRID_TREE_ARCHS, TREE_ARCHS

    if model.arch not in TREE_ARCHS | HYBRID_TREE_ARCHS:
        raise UnsupportedModelError(f"--spec tree needs a {', '.join(sorted(TREE_ARCHS | HYBRID_TREE_ARCHS))} target; "
                                    f"{model.name} is {model.arch}; use --spec chain or auto")


def print_plan(settings: config.EngineSettings) -> int:
    from luce_engine import DraftModel, Model

    # Sizes come from the files' metadata: no weights are read, so planning a 27B model is instant.
    from luce_tui import memory

    model = Model(settings.target, plan_only=True, **settings.model_params())
    budget = config.parse_bytes(settings.plan_memory) if settings.plan_memory else None
    # A draft is validated against the target exactly as a load would (same errors), sized, not read.
    draft = (DraftModel.plan(settings.draft, model, n_ctx_draft=config.DRAFT_CTX, capture_ring=config.CAPTURE_RING)
             if _uses_draft(settings) else None)
    block = draft["info"]["block_size"] if draft else None
    if draft is not None and settings.spec == "tree":
        _check_tree_target(model)
    n_verify_max = _n_verify_max(block, settings.draft_max, _tree_budget(settings, model))
    n_ctx = _n_ctx(settings, model, n_verify_max, budget=budget)
    scorer = _plan_scorer(settings, n_ctx)

    def target_plan(n_ctx: int, tk: str, tv: str, check: bool = False, verify: int = n_verify_max) -> dict:
        return model.plan(n_ctx=n_ctx, cache_type_k=tk, cache_type_v=tv, n_verify_max=verify, check=check,
                          **settings.engine_params())

    plan = target_plan(n_ctx, settings.cache_type_k, settings.cache_type_v)
    where = f"a {config.human_bytes(budget)} device" if budget else model.device
    rows = dict(plan)
    if budget is not None:
        rows.pop("device_free", None)   # this machine's memory is not what the plan is checked against
    else:
        # Nothing is loaded: the device's free memory is the budget of the whole plan, weights included.
        budget = plan.get("device_free") or None
    print(f"memory plan for {model.name} on {where} "
          f"(n_ctx {n_ctx}, KV {settings.cache_type_k}/{settings.cache_type_v}):")
    if draft is not None:
        info = draft["info"]
        print(f"  draft {os.path.basename(settings.draft)}: {info['arch']}, block {info['block_size']}, "
              f"{len(info['capture_layers'])} captured layers, draft context {draft['n_ctx_draft']}, "
              f"capture ring {draft['capture_ring_size']}, verify batch {n_verify_max}"
              + (f" (DDTree budget {settings.tree_budget})" if settings.spec == "tree" else f" ({settings.spec})"))
        rows.update(draft_weights=draft["weights"], draft_kv_cache=draft["kv_cache"],
                    draft_compute=draft["compute"], capture_ring=draft["capture_ring"],
                    total=plan["total"] + draft["total"])
    if scorer is not None:
        print(f"  scorer {os.path.basename(settings.pflash_scorer)}: scoring an attachment of "
              f"{scorer['n_tokens']:,} tokens (one that compresses to the context at keep "
              f"{settings.pflash_keep_ratio:g}) allocates its KV cache and scratch, freed afterwards")
        rows.update(scorer_weights=scorer["weights"], scorer_kv_cache=scorer["kv_cache"],
                    scorer_compute=scorer["compute"], total=rows["total"] + scorer["total"])
    print(config.format_plan(rows))
    if budget is None:
        return 0

    draft_total = draft["total"] if draft else 0
    on = None if settings.plan_memory else model.device   # where the free memory is
    # the scorer's weights stay resident, and a scoring call's memory comes on top while it runs
    scorer_total = scorer["total"] if scorer else 0

    def need(p: dict) -> int:
        return memory.device_need(p) + draft_total + scorer_total

    total_need = need(plan)
    if total_need > budget:
        hints = _plan_hints(settings, n_ctx, budget, draft_total, n_verify_max if draft else 0, block or 0,
                            lambda n, tk, tv, verify=n_verify_max: need(target_plan(n, tk, tv, verify=verify)))
        if scorer_total:
            hints += (f"; or turn PFlash off (--pflash-mode off saves "
                      f"{config.human_bytes(scorer_total)})")
        return _fail(f"{memory.verdict(total_need, budget, on)}; {hints}")
    print(f"  {memory.verdict(total_need, budget, on)} ({config.human_bytes(budget - total_need)} to spare)")
    return 0


def _plan_scorer(settings: config.EngineSettings, n_ctx: int) -> dict | None:
    """The PFlash scorer's part of the plan: its weights, and one scoring call on the largest
    attachment whose compression still fits the context (n_ctx / keep ratio, at most 1M tokens)."""
    if not settings.pflash_scorer or settings.pflash_mode == "off":
        return None
    from luce_engine import Model, Scorer

    smodel = Model(settings.pflash_scorer, device=settings.device, n_threads=settings.threads, plan_only=True)
    n_tokens = min(int(n_ctx / settings.pflash_keep_ratio), 1 << 20)
    p = Scorer.plan_for(smodel, n_tokens, check=False)
    return {"weights": p["weights"], "kv_cache": p["kv_cache"], "compute": p["compute"],
            "total": p["weights"] + p["kv_cache"] + p["compute"], "n_tokens": n_tokens}


def _plan_hints(settings: config.EngineSettings, n_ctx: int, budget: int, draft_total: int, n_verify: int,
                block: int, need) -> str:
    """What to change so that the plan fits: each knob on its own, with the numbers that make it fit.
    need(n_ctx, type_k, type_v, verify=n) -> bytes for the device; n_verify, block: the draft's verify
    batch and block size (0 without a draft)."""
    tk, tv = settings.cache_type_k, settings.cache_type_v

    def no_draft(n: int, k: str, v: str) -> int:   # without a draft load() verifies 16 tokens
        return need(n, k, v, verify=16) - draft_total

    if no_draft(256, "q4_0", "q4_0") > budget:
        return ("to fit, use a smaller quantization of the model or another device: it does not fit even at the "
                "smallest context with q4_0 KV and no draft")
    hints, enough = [], False   # enough: one of the hints fits on its own
    from luce_tui.memory import largest_fitting_ctx

    fit_ctx = largest_fitting_ctx(lambda n: need(n, tk, tv), n_ctx, budget)
    if fit_ctx:
        hints.append(f"lower --max-ctx to {fit_ctx}")
        enough = True
    if (tk, tv) != ("q4_0", "q4_0"):
        small = need(n_ctx, "q4_0", "q4_0")
        enough |= small <= budget
        verdict = "fits" if small <= budget else f"needs {config.human_bytes(small)}"
        hints.append(f"use smaller KV types (--cache-type-k q4_0 --cache-type-v q4_0: {verdict})")
    fit_draft_max = _largest_fitting_draft_max(lambda k: need(n_ctx, tk, tv, verify=k + 1), n_verify, block, budget)
    if fit_draft_max:
        hints.append(f"--draft-max {fit_draft_max} or less (rollback buffers for {fit_draft_max + 1} "
                     f"tokens instead of {n_verify})")
        enough = True
    if draft_total:
        saves = need(n_ctx, tk, tv) - no_draft(n_ctx, tk, tv)
        enough |= no_draft(n_ctx, tk, tv) <= budget
        hints.append(f"drop the draft (--spec off or no --draft: saves {config.human_bytes(saves)}) "
                     "or use a smaller quantization of it")
    if not enough:
        return "no single change is enough, combine them (a lower --max-ctx too): " + "; ".join(hints)
    return "to fit, " + "; or ".join(hints)


def _largest_fitting_draft_max(need, n_verify: int, block: int, budget: int) -> int:
    """The most proposals per step (at most block - 1, as the speculator takes) whose smaller verify
    batch makes the plan fit; 0 if none does (or the model has no rollback buffers that shrink with it)."""
    for k in range(min(n_verify - 2, block - 1), 0, -1):
        if need(k) <= budget:
            return k
    return 0


class _Progress:
    """Prefill progress on stderr, only for an interactive terminal and a prompt worth waiting for."""

    def __init__(self, min_tokens: int = 1024):
        self.stream, self.min_tokens, self.shown = sys.stderr, min_tokens, False

    def __call__(self, done: int, total: int) -> None:
        if total >= self.min_tokens and self.stream.isatty():
            self.stream.write(f"\rprefill {done}/{total} tokens")
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.shown = False


def run_once(runtime: Runtime | None, question: str, sampling, args, conv=None) -> int:
    """-p: stream one answer to stdout; progress and stats go to stderr. conv: the conversation to
    use (a RemoteConversation for --remote), else one on the runtime's engine."""
    from luce_tui import events
    from luce_tui.conversation import Conversation, sigint_cancels

    if conv is None:
        conv = Conversation(runtime.engine, system=args.system, speculator=runtime.speculator,
                            compressor=runtime.compressor)
    progress = _Progress()
    out = sys.stdout

    def write(text: str) -> None:
        progress.clear()
        out.write(text)
        out.flush()

    failure: list[BaseException] = []
    result = None

    def emit(ev: events.Event) -> None:
        nonlocal result
        match ev:
            case events.PrefillProgress(done=done, total=total):
                progress(done, total)
            case events.Step(text=text) if text:
                write(text)
            case events.Finished(result=r):
                result = r
            case events.Error(error=error):
                failure.append(error)

    with sigint_cancels(conv.cancel):
        conv.run_turn([{"role": "user", "content": question}], sampling=sampling, max_tokens=args.max_tokens,
                      emit=emit)
    progress.clear()
    if failure:
        from luce_engine import GenerationCancelled

        if isinstance(failure[0], GenerationCancelled):   # Ctrl+C before the answer started
            print("luce-chat: cancelled", file=sys.stderr)
            return EXIT_INTERRUPTED
        raise failure[0]
    if result.compression and (args.stats or args.verbose):
        print(f"luce-chat: {result.compression}", file=sys.stderr)
    out.write("\n")
    out.flush()
    if args.stats or args.verbose:
        print(f"[{result.summary()}]", file=sys.stderr)
    if args.verbose and runtime is not None and runtime.spec_note:   # --stats keeps its one line
        print(f"luce-chat: {runtime.spec_note}", file=sys.stderr)
    if result.finish_reason == "context":
        print("luce-chat: the context is full; raise --max-ctx for longer answers", file=sys.stderr)
    if result.finish_reason == "dropped":
        print("luce-chat: error: the server closed the stream before the reply ended (the partial reply is above)",
              file=sys.stderr)
        return EXIT_ERROR
    return EXIT_INTERRUPTED if result.finish_reason == "cancelled" else 0


def speculative_note(args) -> str | None:
    """What to tell the user when a setting will not do what it says (never faked)."""
    if getattr(args, "pflash_scorer", None) is None and getattr(args, "pflash_mode", None) == "always":
        return "--pflash-mode always needs a scorer: set --pflash-scorer PATH (attachments are prefilled in full)"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        from luce_tui.serve import main as serve_main

        return serve_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    from luce_tui import userconfig

    try:
        userconfig.merge(args, userconfig.load(args.config))
    except userconfig.ConfigError as e:
        return _fail(str(e))
    try:
        sampling = config.sampling_from_args(args)
    except ValueError as e:
        parser.error(str(e))
    if args.prompt is not None and args.plain:
        parser.error("-p and --plain exclude each other")
    if args.resume is not None and (args.prompt is not None or args.plain):
        parser.error("--resume reopens a chat in the app; it cannot be combined with -p or --plain")
    tui = args.prompt is None and not args.plain and not args.plan and sys.stdin.isatty() and sys.stdout.isatty()
    if args.resume is not None and not tui and not args.plan:
        parser.error("--resume needs a terminal (stdin and stdout are not both one)")
    if config.threads_error(args.threads):
        parser.error(config.threads_error(args.threads))
    if args.prompt == "-":
        try:
            args.prompt = _stdin_text()
        except ValueError as e:
            return _fail(str(e))
    if args.prompt is not None and not args.prompt.strip():
        parser.error("the prompt is empty")

    from luce_engine import ContextFullError, EngineError
    from luce_engine.chat_template import ChatTemplateError
    from luce_engine.tokenizer import TokenizerError

    if args.remote is not None:
        return _run_remote(args, sampling, tui)
    if args.api_key is not None or args.model is not None:
        parser.error("--api-key and --model go with --remote")
    try:
        settings = config.engine_settings(args)
        if args.plan:
            return print_plan(settings)
        note = speculative_note(args)
        if note and not tui:
            print(f"luce-chat: {note}", file=sys.stderr)
        if tui:
            from luce_tui.app import run_app

            if sys.stderr.isatty():
                print(f"luce-chat: loading {os.path.basename(settings.target)} …", file=sys.stderr, flush=True)
            return run_app(load(settings, verbose=args.verbose), sampling, args, note=note)
        runtime = load(settings, verbose=args.verbose)
        if args.prompt is not None:
            return run_once(runtime, args.prompt, sampling, args)
        from luce_tui.plain import run_plain

        return run_plain(runtime, sampling, args)
    except ContextFullError as e:
        return _fail(f"{e}; raise --max-ctx for a longer context")
    except (EngineError, TokenizerError, ChatTemplateError) as e:
        return _fail(str(e))
    except KeyboardInterrupt:   # Ctrl+C while loading: no traceback
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:     # `luce-chat -p ... | head`: the reader left; that is fine
        # Point stdout at /dev/null so the interpreter's final flush does not complain again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run_remote(args, sampling, tui: bool) -> int:
    """--remote: the same front ends on a RemoteConversation."""
    from luce_tui.remote import RemoteConversation, RemoteError

    if args.plan:
        return _fail("--plan describes the in-process engine; it does not apply with --remote")
    try:
        conv = RemoteConversation(args.remote, api_key=args.api_key, model=args.model, system=args.system)
        if tui:
            from luce_tui.app import run_app

            return run_app(None, sampling, args, conv=conv)
        if args.prompt is not None:
            return run_once(None, args.prompt, sampling, args, conv=conv)
        from luce_tui.plain import run_plain

        return run_plain(None, sampling, args, conv=conv)
    except RemoteError as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
