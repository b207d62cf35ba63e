"""DDTree construction (luce_engine.ddtree): budget, structure, best-first optimality against a brute
force over every prefix, the chain as the K = 1 case, and the full-vocabulary log-probabilities."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from luce_engine.ddtree import build_tree, chain_tree, log_softmax, top_candidates


def random_candidates(rng, L, K, V=50):
    logits = rng.normal(size=(L, V)) * 2.0
    return top_candidates(logits, K)


def brute_force_scores(logp, max_depth):
    """Scores of every prefix (rank tuple) of length 1..max_depth, descending."""
    L, K = logp.shape
    out = []
    for d in range(1, max_depth + 1):
        for ranks in itertools.product(range(K), repeat=d):
            out.append(sum(logp[i, r] for i, r in enumerate(ranks)))
    return sorted(out, reverse=True)


def check_structure(tree, tokens, max_depth):
    assert tree.parents[0] == -1 and tree.depths[0] == 0
    seen_children = set()
    for i in range(1, len(tree)):
        p = tree.parents[i]
        assert 0 <= p < i                                   # parents before children
        assert tree.depths[i] == tree.depths[p] + 1 <= max_depth
        assert tree.tokens[i] in tokens[tree.depths[i] - 1]
        assert (p, tree.tokens[i]) not in seen_children     # siblings carry distinct tokens
        seen_children.add((p, tree.tokens[i]))
    assert all(a >= b - 1e-12 for a, b in zip(tree.scores[1:], tree.scores[2:]))   # best first


@pytest.mark.parametrize("L,K,budget", [(1, 3, 2), (3, 3, 5), (4, 2, 7), (3, 4, 20), (2, 5, 100), (5, 3, 12)])
def test_best_first_is_the_top_budget_prefixes(L, K, budget):
    rng = np.random.default_rng(L * 100 + K * 10 + budget)
    tokens, logp = random_candidates(rng, L, K)
    tree = build_tree(7, tokens, logp, budget)
    brute = brute_force_scores(logp, L)
    assert len(tree) - 1 == min(budget, len(brute))        # the budget, or every prefix there is
    check_structure(tree, tokens, L)
    np.testing.assert_allclose(sorted(tree.scores[1:], reverse=True), brute[:len(tree) - 1], rtol=0, atol=1e-9)
    # each node's score is its path's log-probability
    for i in range(1, len(tree)):
        path = tree.path(i)[1:]
        ranks = [int(np.flatnonzero(tokens[tree.depths[j] - 1] == tree.tokens[j])[0]) for j in path]
        assert tree.scores[i] == pytest.approx(sum(logp[tree.depths[j] - 1, r] for j, r in zip(path, ranks)), abs=1e-9)


def test_max_depth_and_budget_limits():
    rng = np.random.default_rng(3)
    tokens, logp = random_candidates(rng, 6, 4)
    for max_depth in range(0, 7):
        for budget in (0, 1, 3, 9):
            t = build_tree(1, tokens, logp, budget, max_depth=max_depth)
            assert len(t) - 1 <= budget and max(t.depths) <= max_depth
            if max_depth > 0:
                assert len(t) - 1 == min(budget, sum(4 ** d for d in range(1, max_depth + 1)))
            else:
                assert len(t) == 1
            check_structure(t, tokens, max(max_depth, 0))


def test_chain_is_the_k1_case():
    rng = np.random.default_rng(5)
    logits = rng.normal(size=(7, 40))
    tokens, logp = top_candidates(logits, 1)
    for budget in (3, 7, 10):
        t = build_tree(9, tokens, logp, budget)
        n = min(budget, 7)
        ref = chain_tree(9, list(np.argmax(logits, axis=1)[:n]))
        assert (t.tokens, t.parents, t.depths) == (ref.tokens, ref.parents, ref.depths)


def test_a_confident_draft_gives_the_chain_and_a_flat_one_a_bush():
    V = 30
    sharp = np.full((4, V), -20.0)
    sharp[np.arange(4), [3, 4, 5, 6]] = 20.0
    t = build_tree(0, *top_candidates(sharp, 4), 4)
    assert t.tokens == [0, 3, 4, 5, 6] and t.parents == [-1, 0, 1, 2, 3]
    flat = np.zeros((4, V))
    flat[0, :4] = [3.0, 2.9, 2.8, 2.7]   # depth 1 strongly above depth 2
    t = build_tree(0, *top_candidates(flat, 4), 4)
    assert t.depths == [0, 1, 1, 1, 1]


def test_top_candidates_are_full_vocabulary_log_probs():
    rng = np.random.default_rng(11)
    logits = rng.normal(size=(3, 64)).astype(np.float32)
    toks, lp = top_candidates(logits, 5)
    ref = log_softmax(logits)
    for d in range(3):
        want = np.argsort(-ref[d], kind="stable")[:5]
        assert list(toks[d]) == list(want)
        np.testing.assert_allclose(lp[d], ref[d, want], atol=1e-12)
    assert np.all(np.diff(lp, axis=1) <= 0)
    # temperature divides the logits before the softmax
    _, lp2 = top_candidates(logits, 5, temperature=2.0)
    np.testing.assert_allclose(lp2[0], log_softmax(logits / 2.0)[0, toks[0]], atol=1e-12)


def test_bad_arguments():
    tokens, logp = random_candidates(np.random.default_rng(0), 2, 2)
    with pytest.raises(ValueError):
        build_tree(0, tokens, logp, -1)
    with pytest.raises(ValueError):
        build_tree(0, tokens, logp[:1], 3)
    with pytest.raises(ValueError):
        top_candidates(np.zeros((2, 5)), 0)


def reference_build_tree(root, tokens, logp, budget, max_depth=None):
    """The plain best-first expansion (numpy indexing, every sibling and child pushed): what
    build_tree computes, written without its shortcuts."""
    import heapq

    from luce_engine.ddtree import Tree

    tokens, logp = np.asarray(tokens), np.asarray(logp, dtype=np.float64)
    L, K = tokens.shape
    L = L if max_depth is None else max(0, min(L, max_depth))
    tree = Tree([int(root)], [-1], [0], [0.0])
    heap, count = [], 0
    if L > 0 and K > 0 and budget > 0:
        heap.append((-logp[0, 0], count, 0, 1, 0))
    while heap and len(tree) - 1 < budget:
        neg, _, parent, d, r = heapq.heappop(heap)
        score = -neg
        node = len(tree)
        tree.tokens.append(int(tokens[d - 1, r]))
        tree.parents.append(parent)
        tree.depths.append(d)
        tree.scores.append(score)
        if r + 1 < K:
            count += 1
            heapq.heappush(heap, (-(score - logp[d - 1, r] + logp[d - 1, r + 1]), count, parent, d, r + 1))
        if d < L:
            count += 1
            heapq.heappush(heap, (-(score + logp[d, 0]), count, node, d + 1, 0))
    return tree


def candidates_with_ties(rng, L, K, V=60):
    """Top-K candidates of random logits rounded to a coarse grid: many equal log-probabilities, within
    a row and across rows, so equal scores are common and the tie-break order is exercised."""
    logits = np.round(rng.normal(size=(L, V)) * 2.0) / 2.0
    return top_candidates(logits, K)


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_build_tree_equals_the_plain_expansion_node_for_node(ties):
    """Same nodes in the same order (tokens, parents, depths, scores to the bit) as the plain
    best-first expansion, on random distributions, with and without equal scores, for every budget
    and depth limit and for inputs of other dtypes and layouts."""
    rng = np.random.default_rng(17 + ties)
    make = candidates_with_ties if ties else random_candidates
    for _ in range(60):
        L, K = int(rng.integers(1, 16)), int(rng.integers(1, 40))
        tokens, logp = make(rng, L, K)
        for budget in (0, 1, 2, 4, 5, 8, 16, 22, 32, 64):
            for max_depth in (None, int(rng.integers(0, L + 2))):
                got = build_tree(3, tokens, logp, budget, max_depth=max_depth)
                want = reference_build_tree(3, tokens, logp, budget, max_depth)
                assert (got.tokens, got.parents, got.depths, got.scores) == \
                       (want.tokens, want.parents, want.depths, want.scores), (L, K, budget, max_depth)
    # int32 tokens, float32 log-probs, column slices (not contiguous)
    tokens, logp = make(rng, 6, 12)
    got = build_tree(1, tokens.astype(np.int32)[:, :7], logp.astype(np.float32)[:, :7], 9)
    want = reference_build_tree(1, tokens[:, :7], logp.astype(np.float32).astype(np.float64)[:, :7], 9)
    assert (got.tokens, got.parents, got.scores) == (want.tokens, want.parents, want.scores)


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
def test_a_smaller_budget_is_a_prefix_of_a_larger_ones_tree(ties):
    """What auto relies on to build one tree for all its budgets: the tree of budget b from the top-b
    candidates is the first b + 1 nodes of the tree of budget B >= b from the top-B (Tree.prefix)."""
    rng = np.random.default_rng(29 + ties)
    make = candidates_with_ties if ties else random_candidates
    for _ in range(60):
        L, B = int(rng.integers(1, 16)), int(rng.choice([4, 8, 16, 32]))
        tokens, logp = make(rng, L, B)
        big = build_tree(5, tokens, logp, B, max_depth=L)
        for b in range(0, B + 1):
            small = reference_build_tree(5, tokens[:, :b], logp[:, :b], b, L)
            pre = big.prefix(b + 1)
            assert (pre.tokens, pre.parents, pre.depths, pre.scores) == \
                   (small.tokens, small.parents, small.depths, small.scores), (L, B, b)
