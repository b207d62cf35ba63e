"""llama.cpp's own DFlash graph replayed on the held-out greedy continuations, the chain acceptance
of tools/dflash_train/train.py's PyTorch replay (T = 0): from c = prompt length, draft the block at
c, accept the leading drafts equal to the continuation, move on by 1 + accepted.

    python bench/llama_cpp_dflash_replay.py [--draft D.gguf] [--n 6] [--flash-attn on|off] [--kv f16|f32]

The features are what llama.cpp's speculative loop feeds (common/speculative.cpp, draft-dflash):
the target's *inputs* of the layers in dflash.target_layers (llama_get_embeddings_layer_inp), injected
into the draft's KV cache at their positions as an embedding batch; the block [x0, mask x 15] at
c..c+15 is decoded non-causally over the injected positions < c and removed again (seq_rm), as the
server does after drafting. Only the bookkeeping of llama-cli's loop is left out, so this separates
llama.cpp's graph and features from its loop. llama-cpp-python's CPU build, in this process.
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import llama_cpp as L  # noqa: E402

from luce_engine import default_model_path  # noqa: E402
from luce_engine.default_draft import shipped_draft_path  # noqa: E402

CONT = Path(__file__).resolve().parents[1] / "tools/dflash_train/data/continuations-seed0.jsonl.gz"

_lib = L._lib if hasattr(L, "_lib") else L.llama_cpp._lib
_set_layer_inp = getattr(_lib, "_Z30llama_set_embeddings_layer_inpP13llama_contextjb")
_set_layer_inp.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool]
_get_layer_inp = getattr(_lib, "_Z30llama_get_embeddings_layer_inpP13llama_contextj")
_get_layer_inp.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
_get_layer_inp.restype = ctypes.POINTER(ctypes.c_float)


def _params(n_ctx: int, threads: int, other=None, fa: int = 0, kv: int = 1):
    p = L.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch = n_ctx, n_ctx, n_ctx
    p.n_threads = p.n_threads_batch = threads
    p.type_k = p.type_v = kv           # 0 = F32, 1 = F16 (llama.cpp's default)
    p.flash_attn_type = fa             # 1 = on (llama_cli_acceptance.py's -fa on), 0 = off
    if other is not None:
        p.ctx_other = other
    return p


def _meta(model, key: str) -> str:
    buf = ctypes.create_string_buffer(256)
    n = L.llama_model_meta_val_str(model, key.encode(), buf, 256)
    return buf.value.decode() if n >= 0 else ""


def replay(target: str, draft: str, seqs: list[dict], *, fa: int, kv: int, threads: int) -> list[tuple[int, int, list]]:
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    mt = L.llama_model_load_from_file(target.encode(), mp)
    md = L.llama_model_load_from_file(draft.encode(), mp)
    n_ctx = 512
    ct = L.llama_init_from_model(mt, _params(n_ctx, threads))
    import gguf   # llama_model_meta_val_str does not print arrays
    layers = [int(x) for x in gguf.GGUFReader(draft).fields["dflash.target_layers"].contents()]
    B = int(_meta(md, "dflash.block_size") or 16)
    mask = L.llama_vocab_mask(L.llama_model_get_vocab(md))
    E = L.llama_model_n_embd(mt)
    V = L.llama_vocab_n_tokens(L.llama_model_get_vocab(mt))
    for lid in layers:
        _set_layer_inp(ct, lid, True)
    out = []
    for s in seqs:
        t, P = s["tokens"], s["prompt_len"]
        Lt = len(t)
        L.llama_memory_clear(L.llama_get_memory(ct), True)
        b = L.llama_batch_ext_init(ct)
        for p, tok in enumerate(t):
            idx = L.llama_batch_ext_add_token(b, 0, tok)
            pos = L.llama_pos(p)
            assert L.llama_batch_ext_set_pos(b, idx, ctypes.byref(pos))
        assert L.llama_process(ct, L.LLAMA_PROCESS_TYPE_DECODE, b) == 0
        L.llama_batch_ext_free(b)
        F = np.concatenate([np.ctypeslib.as_array(_get_layer_inp(ct, lid), shape=(Lt * E,)).reshape(Lt, E).copy()
                            for lid in layers], axis=1)                       # [Lt, Nf*E]
        cd = L.llama_init_from_model(md, _params(n_ctx, threads, ct, fa, kv))
        L.llama_set_causal_attn(cd, False)
        mem = L.llama_get_memory(cd)
        bd = L.llama_batch_ext_init(cd)
        injected, c, steps, acc_at = 0, P, 0, np.zeros(B - 1)
        while c <= Lt - 1:
            if injected < c:   # the target's features of the positions before the block
                L.llama_batch_ext_clear(bd)
                rows = [np.ascontiguousarray(F[p]) for p in range(injected, c)]
                for p, row in zip(range(injected, c), rows):
                    idx = L.llama_batch_ext_add_embd(bd, 0, L.llama_embd(
                        row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.shape[0]))
                    pos = (L.llama_pos * 4)(p, p, p, 0)
                    assert L.llama_batch_ext_set_pos(bd, idx, pos)
                assert L.llama_process(cd, L.LLAMA_PROCESS_TYPE_DECODE, bd) == 0
                injected = c
            L.llama_batch_ext_clear(bd)
            for i in range(B):
                idx = L.llama_batch_ext_add_token(bd, 0, t[c] if i == 0 else mask)
                pos = L.llama_pos(c + i)
                assert L.llama_batch_ext_set_pos(bd, idx, ctypes.byref(pos))
                assert L.llama_batch_ext_set_output_logits(bd, idx, True)
            assert L.llama_process(cd, L.LLAMA_PROCESS_TYPE_DECODE, bd) == 0
            preds = [int(np.argmax(np.ctypeslib.as_array(L.llama_get_logits_ith(cd, i), shape=(V,))))
                     for i in range(1, B)]
            L.llama_memory_seq_rm(mem, 0, c, -1)                              # the block's cells go
            m = min(B - 1, Lt - 1 - c)
            acc = 0
            while acc < m and preds[acc] == t[c + 1 + acc]:
                acc += 1
            acc_at[:acc] += 1
            steps += 1
            c += 1 + acc
        L.llama_batch_ext_free(bd)
        L.llama_free(cd)
        out.append((Lt - P, steps, acc_at.tolist()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default=None)
    ap.add_argument("--draft", default=None)
    ap.add_argument("--n", type=int, default=6, help="held-out sequences (spread over the categories)")
    ap.add_argument("--flash-attn", choices=("on", "off"), default="on")
    ap.add_argument("--kv", choices=("f16", "f32"), default="f16")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    seqs = [json.loads(x) for x in gzip.open(CONT, "rt")]
    held = [s for s in seqs if s["split"] == "heldout"]
    cats = sorted({s["category"] for s in held})
    pick = [s for k in range(a.n) for s in [[q for q in held if q["category"] == cats[k % len(cats)]][k // len(cats)]]]
    res = replay(a.target or default_model_path(), a.draft or shipped_draft_path(), pick,
                 fa=1 if a.flash_attn == "on" else 0, kv=1 if a.kv == "f16" else 0, threads=a.threads)
    tot_e = sum(e for e, _, _ in res)
    tot_s = sum(s for _, s, _ in res)
    for s, (e, st, _) in zip(pick, res):
        print(f"{s['id']} {s['category']}: AL {e / st:.3f} ({e} tokens, {st} steps)")
    acc = np.sum([r[2] for r in res], axis=0) / tot_s
    print(f"llama.cpp graph replay (fa {a.flash_attn}, kv {a.kv}): AL {tot_e / tot_s:.3f} over {len(res)} sequences; "
          f"acceptance by position {np.round(acc[:6], 3).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
