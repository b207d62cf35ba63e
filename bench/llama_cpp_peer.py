"""llama.cpp as the benchmark peer: llama-cpp-python's low-level API (llama_decode + its C greedy
sampler), so the measured loop is as lean as llama-cpp-python allows and the comparison is fair."""
from __future__ import annotations

import time

import llama_cpp


class LlamaCppPeer:
    def __init__(self, path: str, *, n_ctx: int, n_threads: int, gpu: bool, n_batch: int = 512):
        self.llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, verbose=False,
                                   flash_attn=True, n_threads=n_threads, n_threads_batch=n_threads,
                                   n_gpu_layers=-1 if gpu else 0, logits_all=False)
        self.ctx = self.llm.ctx
        self.n_batch = n_batch
        self.sampler = llama_cpp.llama_sampler_init_greedy()

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)

    def _decode(self, tokens: list[int]) -> None:
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        rc = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            raise RuntimeError(f"llama_decode failed: {rc}")

    def prefill_seconds(self, tokens: list[int]) -> float:
        self.clear()
        t0 = time.perf_counter()
        for i in range(0, len(tokens), self.n_batch):
            self._decode(tokens[i:i + self.n_batch])
        llama_cpp.llama_synchronize(self.ctx)
        return time.perf_counter() - t0

    def verify_seconds(self, prompt: list[int], batch: list[int]) -> float:
        """Cost of evaluating `batch` in one llama_decode after the prompt (a verification step)."""
        self.prefill_seconds(prompt)
        t0 = time.perf_counter()
        self._decode(batch)
        llama_cpp.llama_synchronize(self.ctx)
        return time.perf_counter() - t0

    def decode_seconds(self, prompt: list[int], n: int) -> tuple[float, list[int]]:
        """Greedy-decode n tokens after the prompt; returns (seconds for the n steps, tokens)."""
        self.prefill_seconds(prompt)
        out = []
        t0 = time.perf_counter()
        for _ in range(n):
            tok = llama_cpp.llama_sampler_sample(self.sampler, self.ctx, -1)
            out.append(tok)
            self._decode([tok])
        llama_cpp.llama_synchronize(self.ctx)
        return time.perf_counter() - t0, out
