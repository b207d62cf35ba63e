"""Engine.verify_tree / commit_path (dense models): every node's logits equal those of its root path
evaluated as a plain sequence; after commit_path the context, K/V (every cache type), logits and
captured features are those of plain evaluation of the kept path; bad input is a clear error;
hybrid models refuse tree verification."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, EngineStateError, InvalidArgumentError, Model, UnsupportedModelError
from luce_engine.ddtree import Tree
from reference import DEVICE, QUANT_KV_GPU_BATCH_SHAPE_RTOL, THREADS, TINY_HEAD_DIM
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

# A node's logits against its root path in a chain batch of the tree's size: the same kernels, only
# the masked cells differ (their zero weights can move the attention's running maximum between tiles).
SAME_SHAPE_RTOL = 1e-5 if DEVICE == "cpu" else 1e-4
# ... and fed as a prefill: other batch shapes, which round alike on the CPU but not on a GPU
# (test_engine's BATCH_SHAPE_RTOL; a quantized cache's attention more so).
RTOL = {cache: 1e-5 if DEVICE == "cpu" else QUANT_KV_GPU_BATCH_SHAPE_RTOL[cache] for cache in ("f16", "q8_0", "q4_0")}
# A hybrid's recurrence sums in another order for another sequence length, on the CPU too.
HYBRID_BATCH_SHAPE_RTOL = 1e-4
# A long context fed in other batch shapes: K/V rounded to the cache type may differ in a last bit.
FRESH_RTOL = {"f16": 2e-3, "q8_0": 1e-2, "q4_0": 5e-2}


@pytest.fixture(scope="module", params=["llama", "qwen3", "qwen35/paths", "qwen35/nodes"])
def dense(request, tmp_path_factory):
    """A dense target, or the hybrid qwen35, whose DeltaNet layers run each root-to-leaf path from the
    committed state or each node once from its parent's (the engine's tree_recurrence)."""
    arch, _, recurrence = request.param.partition("/")
    extra = {"n_layer": 4} if arch == "qwen35" else {}
    cfg = TinyConfig(arch=arch, n_vocab=256, head_dim=TINY_HEAD_DIM, seed=31, **extra)
    model = Model(write_tiny_gguf(tmp_path_factory.mktemp("tv") / f"{arch}.gguf", cfg), device=DEVICE, n_threads=THREADS)
    model.test_tree_recurrence = recurrence or "auto"
    return model


def TreeEngine(model, **kw) -> Engine:
    """An Engine that can verify trees on every architecture (a hybrid one plans its tree's scratch)."""
    return Engine(model, tree_verify=True, tree_recurrence=getattr(model, "test_tree_recurrence", "auto"), **kw)


def cpu_node_op(model) -> bool:
    """The hybrid's tree recurrence by nodes on the CPU: luce's op, whose sums are not ggml's (on
    CUDA luce's kernel is ggml's gated_delta_net arithmetic, node by node)."""
    return DEVICE == "cpu" and getattr(model, "test_tree_recurrence", "") == "nodes"


def assert_same_or_close(model):
    """Bit for bit, except where luce's CPU op computes the recurrence (HYBRID_BATCH_SHAPE_RTOL)."""
    def check(a, b):
        if cpu_node_op(model):
            assert rel(a, b) <= HYBRID_BATCH_SHAPE_RTOL
        else:
            np.testing.assert_array_equal(a, b)
    return check


def rel(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def random_tree(rng, n, vocab=256) -> Tree:
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    depths = [0]
    for i in range(1, n):
        depths.append(depths[parents[i]] + 1)
    return Tree([int(t) for t in rng.integers(0, vocab, n)], parents, depths, [0.0] * n)


def path_tokens(tree, node):
    return [tree.tokens[j] for j in tree.path(node)]


def prompt(n, seed):
    return [int(t) for t in np.random.default_rng(seed).integers(0, 256, n)]


@pytest.mark.parametrize("cache", ["f16", "q8_0", "q4_0"])
def test_every_node_sees_exactly_its_root_path(dense, cache):
    """Each node's logits are its root path's: against the path verified as a chain in a batch of
    the same size (the same kernels: SAME_SHAPE_RTOL everywhere), and against the path fed as a
    prefill (other batch shapes: RTOL)."""
    rng = np.random.default_rng(1)
    p = prompt(37, 2)
    kw = dict(n_ctx=256, cache_type_k=cache, cache_type_v=cache)
    eng, chain, ref = TreeEngine(dense, n_verify_max=24, **kw), TreeEngine(dense, n_verify_max=24, **kw), TreeEngine(dense, **kw)
    for e in (eng, chain, ref):
        e.prefill(p)
    same_tol, tol = SAME_SHAPE_RTOL, RTOL[cache]
    if dense.arch == "qwen35":   # the paths' recurrence runs sequences of their own length, the nodes' op its own sums
        same_tol, tol = max(same_tol, HYBRID_BATCH_SHAPE_RTOL), max(tol, HYBRID_BATCH_SHAPE_RTOL)
    for trial in range(3):
        tree = random_tree(rng, 24 if trial else 9)
        got = eng.verify_tree(tree.tokens, tree.parents)
        assert got.shape == (len(tree), 256)
        for node in range(len(tree)):
            path = path_tokens(tree, node)
            same_shape = chain.verify(path + [(t + 7) % 256 for t in tree.tokens[len(path):]])[len(path) - 1]
            chain.commit(0)
            assert rel(got[node], same_shape) <= same_tol, (trial, node, rel(got[node], same_shape))
            ref.prefill(path)
            assert rel(got[node], ref.logits()) <= tol, (trial, node, rel(got[node], ref.logits()))
            ref.truncate(len(p))
        eng.commit_path([0])   # keep the root only: the context grows by one each trial
        # the chain twin computes the root in a batch of the tree's size too (a GPU rounds a
        # one-token step otherwise), the prefill reference as a one-token step
        chain.verify([tree.tokens[0]] + [(t + 7) % 256 for t in tree.tokens[1:]], logits=False)
        chain.commit(1)
        ref.prefill([tree.tokens[0]])
        p = p + [tree.tokens[0]]
        assert eng.tokens == p


@pytest.mark.parametrize("cache", ["f16", "q8_0", "q4_0"])
def test_commit_path_equals_plain_evaluation_of_the_path(dense, cache):
    """After each commit_path the engine matches a twin that verified the kept path as a chain in a
    batch of the same size and committed it (K/V moved as raw bytes: no trace of the other nodes,
    1e-5), and a fresh engine fed the whole context (batch shapes differ: FRESH_RTOL)."""
    check_commit_path(dense, cache)


@pytest.mark.parametrize("cache", ["q8_0", "q4_0"])
def test_commit_path_with_rows_of_odd_byte_size(tmp_path, cache):
    """One KV head of 32: a quantized row is one block (34 or 18 bytes), not whole 4-byte words, so
    those rows move through the host instead of the device graph; the result is the same."""
    cfg = TinyConfig(arch="llama", n_vocab=256, head_dim=TINY_HEAD_DIM, n_head=2, n_head_kv=1, seed=33)
    check_commit_path(Model(write_tiny_gguf(tmp_path / "odd.gguf", cfg), device=DEVICE, n_threads=THREADS), cache)


def check_commit_path(dense, cache):
    rng = np.random.default_rng(4)
    p = prompt(29, 5)
    kw = dict(n_ctx=256, cache_type_k=cache, cache_type_v=cache)
    eng, twin = TreeEngine(dense, n_verify_max=20, **kw), TreeEngine(dense, n_verify_max=20, **kw)
    eng.prefill(p)
    twin.prefill(p)
    context = list(p)
    for trial in range(6):
        tree = random_tree(rng, 20)
        eng.verify_tree(tree.tokens, tree.parents, logits=False)
        leaf = max(range(len(tree)), key=lambda i: (tree.depths[i], i)) if trial % 2 else int(rng.integers(0, len(tree)))
        path = tree.path(leaf)
        eng.commit_path(path)
        kept = path_tokens(tree, leaf)
        twin.verify(kept + [(t + 1) % 256 for t in tree.tokens[len(kept):]], logits=False)
        twin.commit(len(kept))
        context += kept
        assert eng.tokens == context == twin.tokens
        assert rel(eng.logits(), twin.logits()) <= 1e-5, trial
        nxt = prompt(3, 100 + trial)
        eng.prefill(nxt, logits_all=True)
        twin.prefill(nxt, logits_all=True)
        assert rel(eng.all_logits(), twin.all_logits()) <= 1e-5, trial
        context += nxt
    fresh = TreeEngine(dense, **kw)
    fresh.prefill(context)
    assert rel(eng.logits(), fresh.logits()) <= FRESH_RTOL[cache]


def test_capture_rings_hold_the_path_features(dense):
    rng = np.random.default_rng(8)
    p = prompt(21, 9)
    layers = [0, 1]
    eng = TreeEngine(dense, n_ctx=256, n_verify_max=16)
    eng.set_capture(layers, output=True, ring_size=64)   # small ring: the path wraps around it
    eng.prefill(p)
    context = list(p)
    for trial in range(4):
        tree = random_tree(rng, 16)
        eng.verify_tree(tree.tokens, tree.parents, logits=False)
        leaf = max(range(len(tree)), key=lambda i: tree.depths[i])
        eng.commit_path(tree.path(leaf))
        context += path_tokens(tree, leaf)
    fresh = TreeEngine(dense, n_ctx=256)
    fresh.set_capture(layers, output=True, ring_size=64)
    fresh.prefill(context)
    for pos in range(len(context) - 40, len(context)):
        np.testing.assert_allclose(eng.captured(pos), fresh.captured(pos), rtol=0,
                                   atol=1e-5 if DEVICE == "cpu" else 1e-2)


def test_a_chain_tree_is_a_chain_verify(dense):
    p = prompt(17, 3)
    toks = prompt(8, 4)
    a = TreeEngine(dense, n_ctx=128, n_verify_max=8)
    b = TreeEngine(dense, n_ctx=128, n_verify_max=8)
    a.prefill(p)
    b.prefill(p)
    la = a.verify_tree(toks, list(range(-1, 7)))
    lb = b.verify(toks)
    same = assert_same_or_close(dense)
    same(la, lb)   # same positions, same mask: the same graph and inputs
    a.commit_path(range(5))
    b.commit(5)
    assert a.tokens == b.tokens
    same(a.logits(), b.logits())   # the verify's row 4
    # commit_path after a plain verify keeps a prefix like commit
    b.verify(toks[:3])
    b.commit_path([0, 1])
    assert b.tokens == p + toks[:5] + toks[:2]


def test_commit_zero_and_aborted_trees_leave_the_context(dense):
    p = prompt(11, 6)
    eng = TreeEngine(dense, n_ctx=128, n_verify_max=8)
    eng.prefill(p)
    before = eng.logits().copy()
    eng.verify_tree([1, 2, 3], [-1, 0, 0])
    eng.commit(0)
    assert eng.tokens == p
    np.testing.assert_array_equal(eng.logits(), before)
    eng.verify_tree([1, 2, 3], [-1, 0, 0])
    eng.commit_path([])
    assert eng.tokens == p


def test_bad_trees_are_clear_errors(dense):
    eng = TreeEngine(dense, n_ctx=64, n_verify_max=4)
    eng.prefill(prompt(5, 1))
    with pytest.raises(InvalidArgumentError, match="parent must be -1"):
        eng.verify_tree([1, 2], [0, 0])
    with pytest.raises(InvalidArgumentError, match="parent must be an earlier node"):
        eng.verify_tree([1, 2, 3], [-1, 2, 0])
    with pytest.raises(InvalidArgumentError, match="parent must be an earlier node"):
        eng.verify_tree([1, 2], [-1, -1])
    with pytest.raises(InvalidArgumentError, match="verify takes 1..4"):
        eng.verify_tree([1] * 5, [-1, 0, 1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        eng.verify_tree([1, 999], [-1, 0])
    with pytest.raises(ValueError, match="one parent id per node"):
        eng.verify_tree([1, 2], [-1])
    assert eng.n_past == 5   # nothing of the failed calls stayed
    eng.verify_tree([1, 2, 3, 4], [-1, 0, 0, 2])
    with pytest.raises(EngineStateError, match="commit_path"):
        eng.commit(2)
    with pytest.raises(InvalidArgumentError, match="the root"):
        eng.commit_path([1])
    with pytest.raises(InvalidArgumentError, match="not a child of node 0"):
        eng.commit_path([0, 3])
    with pytest.raises(InvalidArgumentError, match="keeps 0..4"):
        eng.commit_path([0, 2, 3, 0, 0])
    with pytest.raises(EngineStateError, match="pending"):
        eng.prefill([1])
    eng.commit_path([0, 2, 3])
    assert eng.tokens[-3:] == [1, 3, 4]
    with pytest.raises(EngineStateError, match="no verification"):
        eng.commit_path([0])


def test_hybrid_tree_verify_needs_its_engine_parameter_and_replay(tmp_path):
    cfg = TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=TINY_HEAD_DIM, seed=3)
    model = Model(write_tiny_gguf(tmp_path / "h.gguf", cfg), device=DEVICE, n_threads=THREADS)
    eng = Engine(model, n_ctx=64, n_verify_max=4)
    eng.prefill(prompt(5, 1))
    with pytest.raises(InvalidArgumentError, match="tree_verify"):
        eng.verify_tree([1, 2], [-1, 0])
    snap = Engine(model, n_ctx=64, n_verify_max=4, tree_verify=True, rollback="snapshot")
    snap.prefill(prompt(5, 1))
    with pytest.raises(UnsupportedModelError, match="replay"):
        snap.verify_tree([1, 2], [-1, 0])
    for e in (eng, snap):
        assert e.n_past == 5
        e.step()   # nothing pending
    # the paths' scratch is planned only when asked for
    assert model.plan(n_ctx=64, n_verify_max=4, tree_verify=True)["compute"] > model.plan(n_ctx=64, n_verify_max=4)["compute"]
    with pytest.raises(ValueError, match="tree_recurrence"):
        Engine(model, n_ctx=64, tree_verify=True, tree_recurrence="levels")


def tree_shapes(rng, n):
    """Trees of n nodes that stress a recurrence by nodes: a star (every branch back to the root), a
    chain, a caterpillar (a leaf off every chain node) and random ones."""
    yield [-1] + [0] * (n - 1)
    yield list(range(-1, n - 1))
    yield [-1] + [i - 1 if i % 2 else max(i - 2, 0) for i in range(1, n)]
    for _ in range(3):
        yield [-1] + [int(rng.integers(0, i)) for i in range(1, n)]


@pytest.mark.parametrize("cache", ["f16", "q8_0"])
def test_hybrid_recurrence_by_nodes_matches_paths(tmp_path, cache):
    """tree_recurrence "nodes" (each node once from its parent's state, a stack at branch points)
    gives the logits of "paths" (each root-to-leaf path from the committed state) on trees of every
    shape and size up to the engine's largest, and the same context after commit_path. On CUDA both
    are ggml's gated_delta_net arithmetic per token (same-shape tolerance); on the CPU "nodes" is
    luce's op, whose sums differ (HYBRID_BATCH_SHAPE_RTOL)."""
    cfg = TinyConfig(arch="qwen35", n_vocab=256, n_layer=4, head_dim=TINY_HEAD_DIM, seed=5)
    model = Model(write_tiny_gguf(tmp_path / "h.gguf", cfg), device=DEVICE, n_threads=THREADS)
    kw = dict(n_ctx=256, n_verify_max=33, tree_verify=True, cache_type_k=cache, cache_type_v=cache)
    nodes, paths = Engine(model, tree_recurrence="nodes", **kw), Engine(model, tree_recurrence="paths", **kw)
    p = prompt(29, 6)
    for e in (nodes, paths):
        e.prefill(p)
    tol = HYBRID_BATCH_SHAPE_RTOL if DEVICE == "cpu" else SAME_SHAPE_RTOL
    rng = np.random.default_rng(7)
    for n in (2, 3, 9, 17, 33):
        for parents in tree_shapes(rng, n):
            toks = [int(t) for t in rng.integers(0, 256, n)]
            got, want = nodes.verify_tree(toks, parents), paths.verify_tree(toks, parents)
            assert rel(got, want) <= tol, (n, parents, rel(got, want))
            tree = Tree(toks, parents, [0] * n, [0.0] * n)
            path = max((tree.path(i) for i in range(n)), key=len)[:4]   # the deepest path's first nodes
            for e in (nodes, paths):
                e.commit_path(path)
                e.step()
            assert nodes.tokens == paths.tokens
            # both replayed the kept path from its kept inputs, which the verify computed (on the
            # CPU, with the recurrence's own sums in the layers before)
            assert rel(nodes.logits(), paths.logits()) <= tol
