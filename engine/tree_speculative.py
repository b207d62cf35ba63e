"""Tree speculative decoding (DDTree, docs/algorithms.md §3) on an Engine: one draft pass gives
per depth the draft's top candidates; the `budget` most probable prefixes form a tree that the
target verifies in one batch (Engine.verify_tree); the walk from the root follows the target.

One step, with c tokens in the context and x0 the target's last choice (not yet evaluated):

    candidates = drafter's top-k per depth 1..L     one draft pass, ranked on the draft's device (DraftModel)
    tree = build_tree(x0, candidates, budget)      node 0 = x0; <= budget more nodes, depth <= L
    verify_tree(tree)                              row n = the target after n's root path
    node = root; loop: y = sample(row node)        argmax at T = 0, else a draw from the processed
                       child with token y? go on   distribution (penalties over the path)
                       else emit y, stop
    commit_path(root .. node)                      the path's K/V and features move into place

Exactness: as for the chain (speculative.py), every emitted token is the target's own choice at its
position, drawn once with the engine's generator in plain decoding's order; each row is conditioned
on exactly its root path (ancestor mask, positions = depth). Greedy output equals plain greedy;
sampled output is an exact draw (for a seed, the same tokens as plain sampling).
Hybrid (qwen35) targets need their Engine created with tree_verify=True: the recurrent layers run
each root-to-leaf path from the committed state, and commit_path replays the kept one.
"""
from __future__ import annotations

import time

import numpy as np

from luce_engine.ddtree import Tree, build_tree, top_candidates
from luce_engine.sampling import Sampling
from luce_engine.speculative import ChainSpeculator, Drafter

# Attention-only targets: Engine.verify_tree runs on any engine. Hybrid ones (qwen35) need an engine
# created with tree_verify=True (its paths' recurrence is planned then).
TREE_ARCHS = frozenset({"llama", "qwen3"})
HYBRID_TREE_ARCHS = frozenset({"qwen35"})


def tree_capable(engine) -> bool:
    arch = engine.model.arch
    return arch in TREE_ARCHS or (arch in HYBRID_TREE_ARCHS and engine.tree_verify)


def draft_candidates(drafter: Drafter, x0: int, pos0: int, n_depth: int, k: int,
                     temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (token, log-prob) per depth 1..n_depth of one draft pass: the drafter's own
    `draft_candidates` when it has one (test oracles), else its `top_candidates` (DraftModel:
    computed on its device, only n_depth x k values come back), else its logits rows 1..n_depth."""
    if hasattr(drafter, "draft_candidates"):
        toks, lp = drafter.draft_candidates(x0, pos0, k)
        return np.asarray(toks)[:n_depth], np.asarray(lp)[:n_depth]
    drafter.draft(x0, pos0)
    if hasattr(drafter, "top_candidates"):
        return drafter.top_candidates(k, temperature, n_depth)
    return top_candidates(drafter.logits()[1:1 + n_depth], k, temperature)


def verify_walk_commit(spec, tree: Tree, sampling: Sampling, native, stop_ids, x0: int, c: int,
                       as_chain: bool = False) -> tuple[list[int], int | None]:
    """One verify of `tree` (as a chain batch when as_chain: a tree without branches), the walk of
    spec._walk along the target's choices, and the commit of the accepted path; returns the path
    (root first) and the next pending token. On an error nothing of the step stays: x0 is pending."""
    eng = spec.engine
    if as_chain:
        eng.verify(tree.tokens, logits=False, keep_pre_logits=False)
    else:
        eng.verify_tree(tree.tokens, tree.parents, logits=False, keep_pre_logits=False)
    try:
        path, bonus = spec._walk(tree, sampling, native, stop_ids)
    except BaseException:
        eng.commit(0)
        spec._pending, spec._pending_at = x0, c
        raise
    if as_chain:
        eng.commit(len(path))
    else:
        eng.commit_path(path)
    return path, bonus


class TreeSpeculator(ChainSpeculator):
    """DDTree speculation for one dense Engine with one Drafter (see the module docstring).

    budget: tree nodes besides the root (the engine needs n_verify_max >= budget + 1); the depth is
    at most the drafter's block - 1 (or max_depth). temperature divides the draft logits before the
    log-softmax that ranks candidates (it changes the proposal only, never the output).
    """

    def __init__(self, engine, drafter: Drafter, *, budget: int, max_depth: int | None = None,
                 temperature: float = 1.0, capture_ring: int = 4096):
        if budget < 1:
            raise ValueError("the tree budget must be >= 1")
        if not tree_capable(engine):
            if engine.model.arch in HYBRID_TREE_ARCHS:
                raise ValueError(f"tree speculation on a hybrid ({engine.model.arch}) target needs the Engine created "
                                 "with tree_verify=True")
            raise ValueError(f"tree speculation needs a {', '.join(sorted(TREE_ARCHS | HYBRID_TREE_ARCHS))} target; "
                             f"{engine.model.arch} is not one (use chain speculation)")
        if budget + 1 > engine.n_verify_max:
            raise ValueError(f"a tree of {budget} nodes plus its root exceeds the engine's n_verify_max "
                             f"({engine.n_verify_max}); create the Engine with n_verify_max >= {budget + 1}")
        # the chain's checks on the depth, with a verify as large as the depth (<= the tree's)
        super().__init__(engine, drafter, max_draft=max_depth, capture_ring=capture_ring)
        self.budget, self.temperature = budget, temperature
        self.n_tree_nodes = 0   # nodes verified, roots not counted (stats.n_drafted counts the same)
        self.last_tree: Tree | None = None

    def describe(self) -> str:
        return f"tree, budget {self.budget}"

    def _walk(self, tree: Tree, sampling: Sampling, native, stop_ids) -> tuple[list[int], int | None]:
        """The acceptance rule: from the root, the target's choice y at each node picks the child
        carrying y; returns the accepted path (root first) and the next pending token (None when
        the path ends on a stop id: generation ends there)."""
        children = tree.children()
        path = [0]
        while True:
            y = self._sample(sampling, native, path[-1])
            child = children[path[-1]].get(y)
            if child is None:
                return path, y
            path.append(child)
            if y in stop_ids:
                return path, None

    def step(self, sampling: Sampling, *, max_emit: int | None = None, stop_ids: frozenset[int] | set = frozenset()):
        """Commits 1..depth+1 tokens; returns a StepResult with per-token provenance (see
        ChainSpeculator.step for max_emit and stop_ids)."""
        from luce_engine.engine import StepResult

        eng = self.engine
        native, c, x0, n_depth = self._begin(sampling, max_emit, stop_ids)
        budget = min(self.budget, eng.n_ctx - c - 1)   # every node takes a cache row
        t0 = time.perf_counter()
        tree = Tree([x0], [-1], [0], [0.0])
        if n_depth > 0 and budget > 0:
            self._inject_up_to(c)
            toks, lp = draft_candidates(self.drafter, x0, c, n_depth, budget, self.temperature)
            tree = build_tree(x0, toks, lp, budget, max_depth=n_depth)
        t1 = time.perf_counter()
        path, bonus = verify_walk_commit(self, tree, sampling, native, stop_ids, x0, c)
        t2 = time.perf_counter()
        self._pending, self._pending_at = bonus, (eng.n_past if bonus is not None else -1)
        accepted = len(path) - 1
        self.n_tree_nodes += len(tree) - 1
        self.last_tree = tree
        self._record(len(tree) - 1, accepted, t0, t1, t2)
        tokens = [tree.tokens[n] for n in path]
        return StepResult(tokens, [False] + [True] * accepted, n_drafted=len(tree) - 1, n_accepted=accepted,
                          decode_ms=(t2 - t1) * 1e3)
