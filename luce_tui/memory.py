"""The memory plan in one wording for --plan, the load-time check and /model: what the device
needs, the verdict against its free memory, and the largest context that fits.

The engine plans every buffer (model.plan); the rows are shown as they come. What the device
needs is the plan's total, less the host logits ("outputs") when the device is not the CPU (they
live in system memory). The budget is the device's free memory (or --plan-memory).
"""

from __future__ import annotations

from typing import Callable

from luce_tui import config


def on_cpu(device: str) -> bool:
    return device.upper().startswith("CPU")


def device_need(plan: dict, device: str) -> int:
    """Bytes the plan takes on `device`."""
    return plan["total"] - (0 if on_cpu(device) else plan.get("outputs", 0))


def verdict(need: int, budget: int, where: str | None = None) -> str:
    """'fits: needs 301.0 MiB of 23.5 GiB free on CPU' or 'does not fit: needs … of …' (where:
    the device whose free memory the budget is; None for a size given with --plan-memory)."""
    head = "fits" if need <= budget else "does not fit"
    tail = f" free on {where}" if where else ""
    return f"{head}: needs {config.human_bytes(need)} of {config.human_bytes(budget)}{tail}"


def loaded_budget(plan: dict, device: str, weights_placed: bool) -> int:
    """The budget of an engine on a model whose weights are already loaded: the free memory plus
    those weights on a GPU (they are counted in the need); on the CPU mapped weights stay in the
    page cache, which free memory already counts."""
    free = plan.get("device_free") or 0
    return free + (plan["weights"] if weights_placed and not on_cpu(device) else 0)


def largest_fitting_ctx(need: Callable[[int], int], n_ctx: int, budget: int, step: int = 256) -> int:
    """The largest context below n_ctx (a multiple of step) whose plan fits, 0 if none does.
    need grows with the context, so a bisection over multiples of step finds it."""
    lo, hi = 1, (n_ctx - 1) // step   # in units of step: lo fits, hi + 1 is known not to
    if hi < 1 or need(step) > budget:
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if need(mid * step) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo * step


def auto_ctx(need: Callable[[int], int], n_ctx_train: int, budget: int) -> int:
    """The default context: the training context when its plan fits AUTO_CTX_SHARE of the budget,
    else the largest that does (the training context when even 256 tokens do not: the load then
    says what to change)."""
    room = int(budget * config.AUTO_CTX_SHARE)
    if not budget or need(n_ctx_train) <= room:
        return n_ctx_train
    return largest_fitting_ctx(need, n_ctx_train, room) or n_ctx_train
