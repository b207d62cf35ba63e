"""The load pipeline of state files (engine/native/src/runtime/state_load.h): reader threads ahead
of an in-order checksum and the device copies. A context whose K/V pieces are larger than one
chunk (8 MiB: each piece is split, several chunks are in flight, the staging ring is reused many
times) loads bit for bit, in place and through the staging ring (the GPU's path; on a CPU
`debug_staged_state_io`); damage in a late chunk of a piece is caught and leaves an empty context;
many loads in one engine give the same state each time."""
from __future__ import annotations

import numpy as np
import pytest

from luce_engine import Engine, Model, StateDamagedError
from reference import DEVICE, THREADS
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu

# 8 KiB of K (and of V) a token and layer at f16: 1,150 tokens make 9 MiB pieces, two chunks each.
WIDE = TinyConfig(arch="llama", n_vocab=256, n_embd=64, n_layer=2, n_head=16, n_head_kv=16, head_dim=256, n_ff=64,
                  n_ctx_train=4096, seed=41)
N = 1150
ROW = 16 * 256 * 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipeline")
    m = Model(write_tiny_gguf(d / "wide.gguf", WIDE), device=DEVICE, n_threads=THREADS)
    a = Engine(m, n_ctx=N + 256)
    a.prefill([int(t) for t in np.random.default_rng(7).integers(0, 256, N)])
    path = d / "wide.state"
    a.save_state(path)
    follow = [5, 9, 17]
    want = [t for r in a.generate(follow, max_tokens=12, stop_token_ids=()) for t in r.tokens]
    return m, path, a.tokens[:N], follow, want


def greedy(e, tokens, n=12):
    return [t for r in e.generate(tokens, max_tokens=n, stop_token_ids=()) for t in r.tokens]


@pytest.mark.parametrize("staged", [False, True], ids=["in-place", "staged"])
def test_pieces_larger_than_a_chunk_load_exactly(saved, staged):
    m, path, tokens, follow, want = saved
    e = Engine(m, n_ctx=N + 256, debug_staged_state_io=staged)
    for _ in range(3):   # the same state every time, whatever the threads' timing
        io = e.load_state(path)
        assert io["n_tokens"] == N and e.tokens == tokens and io["bytes"] > 4 * (8 << 20)
        assert greedy(e, follow) == want


@pytest.mark.parametrize("staged", [False, True], ids=["in-place", "staged"])
def test_damage_in_a_late_chunk_is_caught(saved, staged, tmp_path):
    m, path, tokens, follow, want = saved
    data = bytearray(path.read_bytes())
    piece = N * ROW   # the first layer's K rows start at 4096; their second chunk starts 8 MiB in
    for at in (4096 + (8 << 20) + 12345, 4096 + piece - 1, 4096 + 3 * piece + (9 << 20) // 2):
        bad = bytearray(data)
        bad[at] ^= 0x01
        p = tmp_path / "bad.state"
        p.write_bytes(bytes(bad))
        e = Engine(m, n_ctx=N + 256, debug_staged_state_io=staged)
        e.prefill([1, 2, 3])
        with pytest.raises(StateDamagedError, match="K/V rows of tokens 0.. do not match"):
            e.load_state(p)
        assert e.n_past == 0   # never half a context
        e.load_state(path)     # and the engine loads a good file afterwards
        assert greedy(e, follow) == want
