"""DDTree construction (docs/algorithms.md §3.1–3.2): from one draft pass, the `budget` most probable
prefixes under the draft's factorized distribution Q(x1..xd) = prod_i q_i(x_i), built best-first.

    tokens, logp = top_candidates(draft_logits_rows_1_to_L, k=budget)   # [L, k] each, logp descending
    tree = build_tree(x0, tokens, logp, budget)                          # <= budget + 1 nodes
    tree.tokens, tree.parents, tree.depths                               # node 0 = x0, parent -1

Row d-1 of `tokens`/`logp` holds the depth-d candidates (the draft's row d predicts position c+d).
The log-probabilities are over the full vocabulary (a top-k-renormalized softmax would shift each
depth by a different constant and distort the cross-depth ranking). Nodes come out in the order
they were popped: every parent before its children, scores non-increasing.
"""
from __future__ import annotations

import dataclasses
import heapq

import numpy as np


@dataclasses.dataclass(frozen=True)
class Tree:
    tokens: list[int]     # node i's token; node 0 is the root x0
    parents: list[int]    # -1 for the root, else an earlier node
    depths: list[int]     # 0 for the root
    scores: list[float]   # cumulative draft log-probability of the node's path (root: 0)

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self) -> list[dict[int, int]]:
        """Per node: child token -> child node."""
        tokens, parents = self.tokens, self.parents
        out: list[dict[int, int]] = [{} for _ in tokens]
        for i in range(1, len(tokens)):
            out[parents[i]][tokens[i]] = i
        return out

    def prefix(self, n: int) -> "Tree":
        """Its first n nodes (parents come before children, so they form a tree)."""
        return Tree(self.tokens[:n], self.parents[:n], self.depths[:n], self.scores[:n])

    def path(self, node: int) -> list[int]:
        """Nodes from the root to `node`."""
        p = []
        while node >= 0:
            p.append(node)
            node = self.parents[node]
        return p[::-1]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def top_candidates(logits: np.ndarray, k: int, temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Top-k tokens per row of draft logits [L, V] and their full-vocabulary log-probabilities,
    both [L, k], each row sorted by descending log-probability (ties: lower token id first)."""
    if k < 1:
        raise ValueError("k must be >= 1")
    if temperature <= 0:
        raise ValueError("the tree temperature must be > 0")
    x = np.asarray(logits, dtype=np.float32)
    if temperature != 1.0:
        x = x / np.float32(temperature)
    k = min(k, x.shape[-1])
    m = x.max(axis=-1, keepdims=True)
    lse = m.astype(np.float64) + np.log(np.exp(x - m).sum(axis=-1, keepdims=True, dtype=np.float64))
    part = np.argpartition(-x, k - 1, axis=-1)[:, :k]   # the logits rank as their log-probs do
    vals = np.take_along_axis(x, part, axis=-1).astype(np.float64) - lse
    order = np.lexsort((part, -vals), axis=-1)   # by value, then id: deterministic
    return np.take_along_axis(part, order, axis=-1).astype(np.int64), np.take_along_axis(vals, order, axis=-1)


def build_tree(root: int, tokens: np.ndarray, logp: np.ndarray, budget: int, *, max_depth: int | None = None) -> Tree:
    """Best-first expansion over rank tuples [DDT Alg. 1]: up to `budget` nodes besides the root,
    at depth <= max_depth (default: the rows given). Exactly the `budget` highest-scoring prefixes
    (ties in any order). budget 0 or max_depth 0 gives the root alone.

    The expansion pops the same nodes in the same order whatever the budget (the budget only says
    where it stops), so a tree of budget b is the first b + 1 nodes of any larger budget's tree
    built from the same candidates (Tree.prefix)."""
    tokens, logp = np.asarray(tokens), np.asarray(logp, dtype=np.float64)
    if tokens.shape != logp.shape or tokens.ndim != 2:
        raise ValueError("tokens and logp must both be [depths, k]")
    if budget < 0:
        raise ValueError("budget must be >= 0")
    L, K = tokens.shape
    L = L if max_depth is None else max(0, min(L, max_depth))
    if L == 0 or K == 0 or budget == 0:
        return Tree([int(root)], [-1], [0], [0.0])
    # A node of rank r at depth d comes after its r better siblings and d - 1 ancestors, so `budget`
    # pops never reach rank >= budget or depth > budget: those candidates are never read (leaving
    # them out drops only pushes that are never popped; the pop order stays).
    L, K = min(L, budget), min(K, budget)
    # Flat memoryviews, entry (d - 1) * K + r: indexing one gives a Python scalar, several times
    # cheaper than numpy's indexing, and unlike tolist() nothing is converted that is never read.
    tok = memoryview(np.ascontiguousarray(tokens[:L, :K], dtype=np.int64)).cast("B").cast("q")
    lp = memoryview(np.ascontiguousarray(logp[:L, :K])).cast("B").cast("d")
    return _best_first(int(root), tok, lp, budget, L, K)


def _best_first(root: int, tokens: memoryview, logp: memoryview, budget: int, L: int, K: int) -> Tree:
    """build_tree's expansion over L x K candidates, flat: depth d, rank r at (d - 1) * K + r."""
    toks, parents, depths, scores = [root], [-1], [0], [0.0]
    push, pop = heapq.heappush, heapq.heappop
    # heap entry: (-score, tie-break counter, parent node, depth, flat index of the candidate)
    heap: list[tuple[float, int, int, int, int]] = [(-logp[0], 0, 0, 1, 0)]
    count = 0
    for node in range(1, budget + 1):
        if not heap:
            break
        neg, _, parent, d, i = pop(heap)
        score = -neg
        toks.append(tokens[i])
        parents.append(parent)
        depths.append(d)
        scores.append(score)
        if (i + 1) % K:   # the next sibling (same parent, next rank) while the row has one
            count += 1
            push(heap, (-(score - logp[i] + logp[i + 1]), count, parent, d, i + 1))
        if d < L:         # the first child: the best candidate one deeper
            count += 1
            push(heap, (-(score + logp[d * K]), count, node, d + 1, d * K))
    return Tree(toks, parents, depths, scores)


def chain_tree(root: int, drafts: list[int]) -> Tree:
    """The chain [x0, d1..dL] as a tree (each node the child of the one before)."""
    n = len(drafts)
    return Tree([int(root)] + [int(t) for t in drafts], list(range(-1, n)), list(range(n + 1)), [0.0] * (n + 1))
