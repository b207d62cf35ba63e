"""The memory plan in one wording for --plan, the load-time check and /model: what the device
needs, the verdict against its free memory, and the largest context that fits.

The engine plans every buffer (model.plan) and applies the one "does it fit" rule of
engine/native/src/runtime/memory_plan.h: the plan's device_need (its total, less the host logits
when the device is not the CPU) against its device_budget (the device's free memory, plus the
weights when a loaded model has them on a GPU already). --plan keeps that need and takes
--plan-memory, when given, as the budget.
"""

from __future__ import annotations

from typing import Callable

from luce_tui import config


def device_need(plan: dict) -> int:
    """Bytes the plan takes on its device (the engine's rule)."""
    return plan["device_need"]


def verdict(need: int, budget: int, where: str | None = None) -> str:
    """'fits: needs 301.0 MiB of 23.5 GiB free on CPU' or 'does not fit: needs … of …' (where:
    the device whose free memory the budget is; None for a size given with --plan-memory)."""
    head = "fits" if need <= budget else "does not fit"
    tail = f" free on {where}" if where else ""
    return f"{head}: needs {config.human_bytes(need)} of {config.human_bytes(budget)}{tail}"


def budget(plan: dict) -> int:
    """What the device can give the plan (the engine's rule): its free memory, plus the weights a
    loaded model already holds on a GPU (they are counted in the need); 0 when unknown."""
    return plan.get("device_budget") or 0


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
