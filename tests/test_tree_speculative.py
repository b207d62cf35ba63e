"""Tree speculative decoding (luce_engine.tree_speculative) is exact on dense and hybrid targets: oracle drafters
put the target's own continuation at a chosen rank of every depth (or leave it out from a depth on),
and each step must accept exactly the deepest prefix of it that the tree holds; random trees; every
KV cache type; greedy output equals plain greedy, sampled output equals plain sampling for a seed
and passes a chi-square test that a deliberately wrong rule fails; EOS and max_tokens cut at the
exact token; a hybrid target's engine must be made for trees."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from luce_engine import Engine, Model, Sampling
from luce_engine.tree_speculative import TreeSpeculator
from reference import DEVICE, EXACT_TREE_NODES, THREADS, TINY_HEAD_DIM, TINY_WEIGHTS
from test_speculative import assert_greedy_matches, chi_square, prompt
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

B = 8        # block: x0 + 7 depths
V = 256


class OracleTreeDrafter:
    """Per depth d, K candidates with log-probs of a geometric distribution (ratio `ratio`); the
    target's continuation truth[pos0 + d] sits at rank `rank` (fillers elsewhere), except from depth
    `missing_from` on, where it is absent."""

    capture_layers = ()
    block_size = B

    def __init__(self, truth: dict[int, int], rank: int = 0, missing_from: int | None = None, ratio: float = 0.5):
        self.truth, self.rank, self.missing_from, self.ratio = truth, rank, missing_from, ratio

    def reset(self):
        pass

    def draft_candidates(self, x0, pos0, k):
        toks, lp = [], np.log(self.ratio) * np.arange(k) + np.log(1 - self.ratio)
        for d in range(1, B):
            t = self.truth.get(pos0 + d, 0)
            fill = [(t + 1 + j) % V for j in range(k)]
            if self.missing_from is None or d < self.missing_from:
                fill[min(self.rank, k - 1)] = t
            toks.append(fill)
        return np.array(toks), np.tile(lp, (B - 1, 1))


class RandomTreeDrafter(OracleTreeDrafter):
    def __init__(self, seed):
        super().__init__({})
        self.rng = np.random.default_rng(seed)

    def draft_candidates(self, x0, pos0, k):
        toks = np.stack([self.rng.permutation(V)[:k] for _ in range(B - 1)])
        lp = -np.sort(self.rng.exponential(2.0, size=(B - 1, k)).cumsum(axis=1), axis=1)
        return toks, lp


@pytest.fixture(scope="module", params=["llama", "qwen3", "qwen35"])
def dense(request, tmp_path_factory):
    """A dense target, or the hybrid qwen35 (its engines are made with tree_verify)."""
    extra = {"n_layer": 4} if request.param == "qwen35" else {}
    # TINY_WEIGHTS: q8_0 on a GPU, whose F32 batch matmuls round apart from a one-token step's (TF32)
    cfg = TinyConfig(arch=request.param, n_vocab=V, head_dim=TINY_HEAD_DIM, seed=21, weight_type=TINY_WEIGHTS, **extra)
    return Model(write_tiny_gguf(tmp_path_factory.mktemp("ts") / f"{request.param}.gguf", cfg), device=DEVICE,
                 n_threads=THREADS)


def run(model, p, n, *, sampling=Sampling(), drafter=None, budget=12, cache="f16", stop_ids=(), spec_cls=TreeSpeculator,
        on_step=None):
    eng = Engine(model, n_ctx=512, cache_type_k=cache, cache_type_v=cache, n_verify_max=max(B, budget + 1),
                 tree_verify=True)
    spec = spec_cls(eng, drafter, budget=budget) if drafter else None
    toks, drafted = [], []
    for r in eng.generate(p, sampling=sampling, max_tokens=n, stop_token_ids=stop_ids, speculator=spec):
        if on_step and spec:
            on_step(spec, r, len(p) + len(toks))
        toks += r.tokens
        drafted += r.drafted
    return toks, drafted, spec, eng


def truth_prefix_in_tree(tree, truth, c) -> int:
    """Depth of the deepest node whose root path is truth[c+1..]."""
    node, depth = 0, 0
    children = tree.children()
    while truth.get(c + depth + 1) in children[node]:
        node = children[node][truth[c + depth + 1]]
        depth += 1
    return depth


@pytest.mark.parametrize("cache", ["f16", "q8_0", "q4_0"])
def test_greedy_oracle_trees_accept_exactly_the_truth_path(dense, cache):
    p = prompt(24, 1)
    plain, _, _, _ = run(dense, p, 48, cache=cache)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    for rank, missing_from, budget in [(0, None, 7), (0, None, 12), (1, None, 12), (2, None, 16), (3, None, 22),
                                       (0, 1, 8), (0, 3, 12), (1, 5, 16), (4, 2, 32)]:
        checked, diverged = [], []

        def check(spec, r, c):
            nxt = c + len(r.tokens)   # where the target's next choice, pending until the next step, goes
            pending = r.finish_reason is None and spec._pending is not None and nxt in truth
            emitted = r.tokens + ([spec._pending] if pending else [])
            if diverged or [truth.get(c + i) for i in range(len(emitted))] != emitted:
                diverged.append(c)   # a near-tie flipped by the batch shape (assert_greedy_matches says)
                return
            if r.finish_reason is None and len(r.tokens) > 0 and c + B < len(p) + 48:
                want = truth_prefix_in_tree(spec.last_tree, truth, c)
                assert r.n_accepted == want, (rank, missing_from, budget, c)
                checked.append(want)

        got, drafted, spec, eng = run(dense, p, 48, drafter=OracleTreeDrafter(truth, rank, missing_from),
                                      budget=budget, cache=cache, on_step=check)
        assert_greedy_matches(dense, p, got, plain, cache)
        assert eng.tokens == p + got and bool(diverged) == (got != plain)
        assert sum(drafted) == spec.stats.n_accepted and spec.stats.n_emitted == len(got)
        assert checked and max(checked) > 0 or missing_from == 1 or diverged
        assert spec.stats.n_drafted == spec.n_tree_nodes <= budget * spec.stats.n_steps


def test_a_deep_rank0_tree_accepts_the_whole_block(dense):
    p = prompt(20, 2)
    plain, _, _, _ = run(dense, p, 5 * B)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    got, _, spec, _ = run(dense, p, 5 * B, drafter=OracleTreeDrafter(truth, 0, ratio=0.05),
                          budget=EXACT_TREE_NODES - 1)   # the rank-0 path of 7 is the first 7 nodes taken
    assert got == plain
    assert spec.stats.acceptance_length == B   # every step emits the whole block


def test_greedy_random_trees_exact(dense):
    for seed in range(4):
        p = prompt(16 + seed, 10 + seed)
        plain, _, _, _ = run(dense, p, 40)
        got, _, spec, _ = run(dense, p, 40, drafter=RandomTreeDrafter(seed), budget=[4, 8, 16, 32][seed])
        assert_greedy_matches(dense, p, got, plain)


def test_sampling_same_seed_same_tokens(dense):
    """One draw of the engine's generator per emitted token, in plain decoding's order, from the
    processed distribution (penalties over the node's root path): the same tokens as plain sampling."""
    p = prompt(20, 3)
    s = Sampling(temperature=0.9, top_k=40, top_p=0.95, repeat_penalty=1.1, presence_penalty=0.2, seed=7)
    plain, _, _, _ = run(dense, p, 40, sampling=s)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    for rank, missing_from in [(0, None), (1, 3), (2, None)]:
        got, _, spec, _ = run(dense, p, 40, sampling=s, drafter=OracleTreeDrafter(truth, rank, missing_from),
                              budget=EXACT_TREE_NODES - 1)
        assert got == plain
        assert spec.stats.n_accepted > 0


class WrongRuleSpeculator(TreeSpeculator):
    """A broken rule: at each node take the draft's best child with the draft's own probability,
    without asking the target (accept-by-draft-confidence, forbidden by the exactness contract)."""

    rng = np.random.default_rng(0)

    def _walk(self, tree, sampling, native, stop_ids):
        children = tree.children()
        path = [0]
        while True:
            kids = [i for i in range(len(tree)) if tree.parents[i] == path[-1]]
            best = max(kids, key=lambda i: tree.scores[i], default=None)
            if best is not None and self.rng.random() < np.exp(tree.scores[best] - tree.scores[path[-1]]):
                path.append(best)
                continue
            y = self._sample(sampling, native, path[-1])
            if y not in children[path[-1]]:
                return path, y
            path.append(children[path[-1]][y])


def first_two(model, p, seeds, drafter_factory=None, spec_cls=TreeSpeculator):
    counts = collections.Counter()
    for seed in seeds:
        toks, _, _, _ = run(model, p, 2, sampling=Sampling(temperature=0.7, seed=seed),
                            drafter=drafter_factory() if drafter_factory else None, budget=8, spec_cls=spec_cls)
        counts[tuple(toks[:2])] += 1
    return counts


def crit_001(dof):   # chi-square critical value at p = 0.001 (Wilson–Hilferty)
    return dof * (1 - 2 / (9 * dof) + 3.09 * (2 / (9 * dof)) ** 0.5) ** 3


def test_sampled_distribution_matches_plain_and_a_wrong_rule_fails(tmp_path):
    """First two tokens over 1,200 seeds at temperature 0.7, tree vs plain on independent seeds: a
    chi-square test at p = 0.001 passes; the draft-confidence rule fails it. (The likeliest pairs have
    probability ~0.006: 1,200 draws a side give about six categories of ten or more.)"""
    model = Model(write_tiny_gguf(tmp_path / "l.gguf", TinyConfig(arch="llama", n_vocab=V, head_dim=TINY_HEAD_DIM, seed=21)),
                  device=DEVICE, n_threads=THREADS)
    p = prompt(12, 5)
    eng = Engine(model, n_ctx=64)
    eng.prefill(p)
    first = int(np.argmax(eng.logits()))
    eng.prefill([first])
    second = np.argsort(-eng.logits())
    # depth 1: a token the target rarely picks second, at rank 0 with the draft's probability 0.9, then
    # the target's likely second tokens; deeper: the likely continuation's fillers
    unlikely = int(second[-1])

    class Draft(OracleTreeDrafter):
        def draft_candidates(self, x0, pos0, k):
            toks, lp = super().draft_candidates(x0, pos0, k)
            toks[0] = [unlikely] + [int(t) for t in second[:k - 1]]
            lp[0] = np.log([0.9] + [0.1 / (k - 1)] * (k - 1))
            return toks, lp

    plain = first_two(model, p, range(1200))
    tree = first_two(model, p, range(10_000, 11_200), lambda: Draft({}))
    stat, dof = chi_square(plain, tree)
    assert dof >= 3, "the test needs several well-populated categories"
    print(f"tree vs plain: chi2 {stat:.1f} (dof {dof}, crit {crit_001(dof):.1f})")
    assert stat < crit_001(dof), (stat, dof)
    wrong = first_two(model, p, range(20_000, 21_200), lambda: Draft({}), spec_cls=WrongRuleSpeculator)
    stat_w, dof_w = chi_square(plain, wrong)
    print(f"wrong rule vs plain: chi2 {stat_w:.1f} (dof {dof_w}, crit {crit_001(dof_w):.1f})")
    assert stat_w > crit_001(dof_w), (stat_w, dof_w)


def test_eos_and_max_tokens_inside_a_tree_path(dense):
    p = prompt(24, 1)
    plain, _, _, _ = run(dense, p, 40)
    truth = {len(p) + i: t for i, t in enumerate(plain)}
    for n in (1, 5, 11):
        got, _, _, eng = run(dense, p, n, drafter=OracleTreeDrafter(truth, 1))
        assert_greedy_matches(dense, p, got, plain[:n])
        assert len(got) == n and eng.n_past == len(p) + n
    stop = plain[9]
    got, _, _, eng = run(dense, p, 40, drafter=OracleTreeDrafter(truth, 1), stop_ids=[stop])
    first = plain.index(stop)
    assert_greedy_matches(dense, p, got[:first + 1], plain[:first + 1])
    if got[:first + 1] == plain[:first + 1]:
        assert len(got) == first + 1
    else:   # another continuation after a reported near-tie: it ends at its own first stop id
        assert (stop in got and got.index(stop) == len(got) - 1) or len(got) == 40


def test_bad_settings_and_hybrid_targets(dense, tmp_path):
    eng = Engine(dense, n_ctx=64, n_verify_max=8, tree_verify=True)
    with pytest.raises(ValueError, match="n_verify_max >= 9"):
        TreeSpeculator(eng, OracleTreeDrafter({}), budget=8)
    with pytest.raises(ValueError, match="budget must be >= 1"):
        TreeSpeculator(eng, OracleTreeDrafter({}), budget=0)
    cfg = TinyConfig(arch="qwen35", n_vocab=V, n_layer=4, head_dim=TINY_HEAD_DIM, seed=3)
    hybrid = Model(write_tiny_gguf(tmp_path / "h.gguf", cfg), device=DEVICE, n_threads=THREADS)
    with pytest.raises(ValueError, match="tree_verify=True"):
        TreeSpeculator(Engine(hybrid, n_ctx=64, n_verify_max=9), OracleTreeDrafter({}), budget=8)
