"""Turning command-line flags (and /sampling arguments) into engine and sampling settings."""

from __future__ import annotations

import dataclasses
import os

from luce_engine import Sampling

CACHE_TYPES = ("f16", "q8_0", "q4_0")
FALLBACK_CTX = 4096   # the context when the model does not say what it was trained for
AUTO_CTX_SHARE = 0.9  # the automatic context leaves a tenth of the free memory to the rest of the machine
DEFAULT_MAX_TOKENS = 1024
DEFAULT_PFLASH_THRESHOLD = 32000   # tokens of attachments above which auto compression starts
DEFAULT_KEEP_RATIO = 0.05
# Speculative decoding's fixed sizes (cli.load uses them, --plan plans with them): positions in the
# DFlash draft's KV ring, and in the target engine's hidden-state capture ring the draft reads.
DRAFT_CTX = 4096
CAPTURE_RING = 4096

# Sampling field -> (type, accepted spellings). The CLI flag names and /sampling keys share it.
SAMPLING_KEYS: dict[str, tuple[type, tuple[str, ...]]] = {
    "temperature": (float, ("temperature", "temp")),
    "top_k": (int, ("top_k", "top-k")),
    "top_p": (float, ("top_p", "top-p")),
    "min_p": (float, ("min_p", "min-p")),
    "repeat_penalty": (float, ("repeat_penalty", "repeat-penalty")),
    "presence_penalty": (float, ("presence_penalty", "presence-penalty")),
    "seed": (int, ("seed",)),
}
_ALIASES = {alias: field for field, (_, names) in SAMPLING_KEYS.items() for alias in names}


# DDTree nodes per step with --spec tree: the budget with the best AL per verified row for the shipped
# draft on a CPU (bench/RESULTS.md, 2026-12-03); budgets on a GPU want a measurement of their own.
DEFAULT_TREE_BUDGET = 16


@dataclasses.dataclass
class EngineSettings:
    """What Model() and Engine() get; n_ctx is capped to the model once it is loaded."""

    target: str
    device: str = "auto"
    threads: int = 0                    # 0: default_threads()
    plan_memory: str | None = None      # --plan-memory: plan for a device of this size
    max_ctx: int | None = None          # None: the training context, or as much of it as fits the memory
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    max_ctx_given: bool = False   # said on the command line (then capping it is worth a note)
    draft: str | None = None      # DFlash draft GGUF (speculative decoding unless spec == "off")
    draft_max: int | None = None  # proposals per block / tree depth (default: the draft's block size - 1)
    spec: str = "auto"            # off | auto | chain | tree (auto: luce_engine.spec_auto, docs/decisions.md)
    tree_budget: int = DEFAULT_TREE_BUDGET   # DDTree nodes per step besides the root (spec tree; auto weighs it too)
    pflash_scorer: str | None = None          # PFlash scorer GGUF
    pflash_mode: str = "auto"           # off | auto | always
    pflash_threshold: int = DEFAULT_PFLASH_THRESHOLD
    pflash_keep_ratio: float = DEFAULT_KEEP_RATIO
    # --rollback, --small-batch-kernels, --step-graphs, --fuse-weights, --repack-weights; None: the
    # engine's default
    rollback: str | None = None
    small_batch_kernels: bool | None = None
    step_graphs: bool | None = None
    fuse_weights: bool | None = None
    repack_weights: bool | None = None

    def model_params(self) -> dict:
        """Model() keyword arguments from these settings (the engine's defaults for what was not said)."""
        given = {"fuse_weights": self.fuse_weights, "repack_weights": self.repack_weights}
        return {"device": self.device, "n_threads": self.threads, **{k: v for k, v in given.items() if v is not None}}

    def engine_params(self) -> dict:
        """Engine() keyword arguments of the behaviour flags that were given."""
        given = {"rollback": self.rollback, "small_batch_kernels": self.small_batch_kernels,
                 "step_graphs": self.step_graphs,
                 "tree_verify": True if self.spec == "tree" else None}   # a hybrid target's tree scratch
        return {k: v for k, v in given.items() if v is not None}

    def draft_params(self) -> dict:
        """DraftModel() keyword arguments: the kernel flags apply to the draft as to the target."""
        given = {"small_batch_kernels": self.small_batch_kernels, "step_graphs": self.step_graphs}
        return {k: v for k, v in given.items() if v is not None}

    def n_ctx_for(self, n_ctx_train: int) -> int:
        """The context asked for: --max-ctx capped to the training length (beyond it a model only
        produces garbage), else the training length (FALLBACK_CTX when the model does not say)."""
        if self.max_ctx is None:
            return n_ctx_train if n_ctx_train > 0 else FALLBACK_CTX
        return min(self.max_ctx, n_ctx_train) if n_ctx_train > 0 else self.max_ctx


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads(cpus: int | None = None) -> int:
    """Every CPU up to 4, half of them beyond (assumed SMT siblings, which add little). Measured on
    2 cores (docs/decisions.md): 2 threads prefill and decode faster than 1 even with the machine
    busy, and the UI thread is mostly idle while a reply streams."""
    cpus = cpus or available_cpus()
    return cpus if cpus <= 4 else cpus // 2


def threads_error(n: int | None) -> str | None:
    """None when --threads N is usable here; else why not."""
    cpus = available_cpus()
    if n is None or 0 <= n <= cpus:
        return None
    return (f"--threads {n}: this machine has {cpus} CPU{'s' if cpus != 1 else ''}; use 1 to {cpus} "
            f"(0 or no flag: {default_threads()}); more threads than CPUs make decoding orders of magnitude slower")


def engine_settings(args) -> EngineSettings:
    target = args.target
    if target is None:
        from luce_engine import default_model_path

        target = default_model_path()   # may raise ModelFileError: the caller reports it
    return EngineSettings(target=str(target), device=args.device, threads=args.threads or default_threads(),
                          max_ctx=args.max_ctx, max_ctx_given=args.max_ctx is not None,
                          plan_memory=getattr(args, "plan_memory", None),
                          cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v,
                          draft=getattr(args, "draft", None), draft_max=getattr(args, "draft_max", None),
                          spec=getattr(args, "spec", None) or "auto",
                          tree_budget=getattr(args, "tree_budget", None) or DEFAULT_TREE_BUDGET,
                          pflash_scorer=getattr(args, "pflash_scorer", None),
                          pflash_mode=getattr(args, "pflash_mode", None) or "auto",
                          pflash_threshold=_given(getattr(args, "pflash_threshold", None), DEFAULT_PFLASH_THRESHOLD),
                          pflash_keep_ratio=_given(getattr(args, "pflash_keep_ratio", None), DEFAULT_KEEP_RATIO),
                          rollback=getattr(args, "rollback", None),
                          small_batch_kernels=_on_off(getattr(args, "small_batch_kernels", None)),
                          step_graphs=_on_off(getattr(args, "step_graphs", None)),
                          fuse_weights=_on_off(getattr(args, "fuse_weights", None)),
                          repack_weights=_on_off(getattr(args, "repack_weights", None)))


def _given(value, default):
    return default if value is None else value


def _on_off(value: str | None) -> bool | None:
    return None if value is None else value == "on"


def sampling_from_args(args) -> Sampling:
    """Sampling.chat_default() with the flags that were given on top (ValueError if out of range)."""
    given = {f: getattr(args, f) for f in SAMPLING_KEYS if getattr(args, f, None) is not None}
    return Sampling.chat_default().updated(**given)


def parse_sampling_assignments(items: list[str], current: Sampling) -> Sampling:
    """`/sampling top_k=40 temp=0.2 seed=none` -> a new Sampling; ValueError with a readable message."""
    changes = {}
    for item in items:
        key, eq, raw = item.partition("=")
        field = _ALIASES.get(key.strip().lower())
        if not eq:
            raise ValueError(f"expected key=value, got {item!r}")
        if field is None:
            raise ValueError(f"unknown sampling key {key!r} (known: {', '.join(SAMPLING_KEYS)})")
        kind = SAMPLING_KEYS[field][0]
        raw = raw.strip()
        if field == "seed" and raw.lower() in ("none", "random", ""):
            changes[field] = None   # back to a fresh random seed per reply
            continue
        try:
            changes[field] = kind(raw)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            raise ValueError(f"bad value for {field}: {raw!r} (expected {expected})") from None
    return current.updated(**changes)   # Sampling validates ranges itself


def format_sampling(s: Sampling) -> str:
    seed = "random" if s.seed is None else str(s.seed)
    return (f"temperature={s.temperature:g} top_k={s.top_k} top_p={s.top_p:g} min_p={s.min_p:g} "
            f"repeat_penalty={s.repeat_penalty:g} presence_penalty={s.presence_penalty:g} seed={seed}")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def parse_bytes(text: str) -> int:
    """'24GiB', '24G', '512MiB', '1e9' -> bytes (binary units for K/M/G/T with or without 'iB')."""
    t = text.strip().lower().replace(" ", "")
    for suffix, mult in (("tib", 2**40), ("gib", 2**30), ("mib", 2**20), ("kib", 2**10),
                         ("t", 2**40), ("g", 2**30), ("m", 2**20), ("k", 2**10), ("b", 1)):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * mult)
    return int(float(t))


PLAN_ROWS = {   # key -> label, in display order; draft rows with --draft, scorer rows with --pflash-scorer
    "weights": "weights", "kv_cache": "kv_cache", "recurrent": "recurrent", "compute": "compute",
    "outputs": "outputs", "draft_weights": "draft weights", "draft_kv_cache": "draft KV",
    "draft_compute": "draft compute", "capture_ring": "capture ring",
    "scorer_weights": "scorer weights", "scorer_kv_cache": "scorer KV", "scorer_compute": "scorer compute",
    "total": "total",
}


def format_plan(plan: dict) -> str:
    """The memory plan as aligned lines in human units."""
    rows = [(label, plan[k]) for k, label in PLAN_ROWS.items() if k in plan and (plan[k] or k != "recurrent")]
    extra = [("device free", human_bytes(plan["device_free"]))] if plan.get("device_free") else []
    cells = [(label, human_bytes(v)) for label, v in rows] + extra
    width = max([12] + [len(label) + 1 for label, _ in cells])   # 12: the layout without draft rows
    return "\n".join(f"  {label:<{width}}{value:>12}" for label, value in cells)
