# cython: language_level=3, boundscheck=False, wraparound=False
"""Thin Cython binding of the luce C API (native/include/luce.h).

Every call that computes runs with the GIL released. Status codes become the exceptions of
luce_engine.errors with the library's message. The friendlier API lives in model.py/engine.py.
"""
from libc.stdint cimport int32_t, uint64_t
from libc.stdlib cimport malloc, free
from cpython.ref cimport PyObject

include "_luce_api.pxi"

import os

import numpy as np

from luce_engine.errors import STATUS_ERRORS, EngineError

CACHE_TYPES = {"f16": LUCE_CACHE_F16, "q8_0": LUCE_CACHE_Q8_0, "q4_0": LUCE_CACHE_Q4_0}
ROLLBACKS = {"snapshot": LUCE_ROLLBACK_SNAPSHOT, "replay": LUCE_ROLLBACK_REPLAY}
TREE_RECURRENCES = {"auto": LUCE_TREE_RECURRENCE_AUTO, "paths": LUCE_TREE_RECURRENCE_PATHS,
                    "nodes": LUCE_TREE_RECURRENCE_NODES}


def _name_of(table, int value):
    return next(k for k, v in table.items() if v == value)


def model_defaults():
    """The native defaults of the model parameters (luce_model_default_params)."""
    cdef luce_model_params p = luce_model_default_params()
    return {"device": p.device.decode(), "use_mmap": p.use_mmap, "n_threads": p.n_threads, "plan_only": p.plan_only,
            "fuse_weights": p.fuse_weights, "repack_weights": p.repack_weights}


def engine_defaults():
    """The native defaults of the engine parameters (luce_engine_default_params)."""
    cdef luce_engine_params p = luce_engine_default_params()
    return {"n_ctx": p.n_ctx, "n_batch": p.n_batch, "cache_type_k": _name_of(CACHE_TYPES, p.type_k),
            "cache_type_v": _name_of(CACHE_TYPES, p.type_v), "kv_rotation": p.kv_rotation,
            "n_verify_max": p.n_verify_max, "rollback": _name_of(ROLLBACKS, p.rollback),
            "small_batch_kernels": p.small_batch_kernels, "step_graphs": p.step_graphs,
            "small_batch_max_tokens": p.small_batch_max_tokens, "tree_verify": p.tree_verify,
            "tree_recurrence": _name_of(TREE_RECURRENCES, p.tree_recurrence), "step_kv_pad": p.step_kv_pad,
            "debug_piecewise": p.debug_piecewise, "debug_staged_state_io": p.debug_staged_state_io}


cdef inline int _check(luce_status st) except -1:
    if st != LUCE_OK:
        raise_status(st)
    return 0


cdef raise_status(luce_status st):
    msg = luce_last_error().decode("utf-8", "replace")
    raise STATUS_ERRORS.get(<int>st, EngineError)(msg or f"luce error {<int>st}")


def set_verbose(bint verbose):
    luce_set_verbose(verbose)


def devices():
    """List of dicts describing the devices ggml's backend registry knows."""
    cdef luce_device_info info
    out = []
    for i in range(luce_device_count()):
        if luce_device_get(i, &info) == LUCE_OK:
            out.append({
                "name": info.name.decode(), "description": info.description.decode(),
                "kind": info.kind.decode(), "memory_free": info.memory_free, "memory_total": info.memory_total,
            })
    return out


def cuda_small_gemm(int device, int ggml_type, w, int nrows, int k, x, geometry=(0, 0, 0)):
    """y = W x on CUDA device `device` with luce's small-batch kernel (a diagnostic for tests).
    w: the quantized rows as bytes (nrows rows of k values of ggml_type); x: float32 [n, k];
    geometry: (row tiles, K splits, blocks per SM), zeros for the engine's choice.
    Returns float32 [n, nrows]. UnsupportedError without the CUDA kernels."""
    cdef int row_tiles = geometry[0], k_splits = geometry[1], blocks_per_sm = geometry[2]
    cdef const unsigned char[::1] wv = memoryview(bytes(w))
    xs = np.ascontiguousarray(x, dtype=np.float32)
    if xs.ndim != 2 or xs.shape[1] != k:
        raise ValueError(f"x must be [n, {k}]")
    cdef float[:, ::1] xv = xs
    y = np.zeros((xs.shape[0], nrows), dtype=np.float32)
    cdef float[:, ::1] yv = y
    cdef int n = xs.shape[0]
    with nogil:
        st = luce_cuda_small_gemm(device, ggml_type, &wv[0], nrows, k, &xv[0, 0], n, &yv[0, 0], row_tiles, k_splits,
                                  blocks_per_sm)
    _check(st)
    return y


cdef dict _plan_dict(luce_memory_plan * p):
    return {"weights": p.weights, "kv_cache": p.kv_cache, "recurrent": p.recurrent, "compute": p.compute,
            "outputs": p.outputs,
            "total": p.total, "device_free": p.device_free, "device_need": p.device_need,
            "device_budget": p.device_budget, "n_ctx": p.n_ctx}


cdef dict _state_io_dict(luce_state_io * io):
    return {"n_tokens": io.n_tokens, "bytes": io.bytes, "appended": io.appended, "n_captured": io.n_captured,
            "ms": io.ms}


def state_file_info(str path):
    """The header of a state file as a dict (luce_state_file_info_read)."""
    cdef bytes p = os.fsencode(path)
    cdef const char * cp = p
    cdef luce_state_info i
    cdef luce_status st
    with nogil:
        st = luce_state_file_info_read(cp, &i)
    _check(st)
    return {"format_version": i.format_version, "n_tokens": i.n_tokens, "n_ctx": i.n_ctx,
            "cache_type_k": _CACHE_NAMES.get(i.type_k, "?"), "cache_type_v": _CACHE_NAMES.get(i.type_v, "?"),
            "kv_rotation": i.kv_rotation, "arch": i.arch.decode("utf-8", "replace"),
            "model_file_size": i.model_file_size, "model_hash": i.model_hash, "file_bytes": i.file_bytes,
            "live_bytes": i.live_bytes, "n_capture_rows": i.n_capture_rows}


def state_file_tokens(str path):
    """The token ids of a state file's context (list of int)."""
    cdef bytes p = os.fsencode(path)
    cdef const char * cp = p
    cdef int32_t n = 0
    cdef luce_status st
    with nogil:
        st = luce_state_file_tokens(cp, NULL, 0, &n)
    _check(st)
    out = np.empty(max(n, 1), dtype=np.int32)
    cdef int32_t[::1] buf = out
    cdef int32_t got = 0
    with nogil:
        st = luce_state_file_tokens(cp, &buf[0], n, &got)
    _check(st)
    return [int(t) for t in out[:min(n, got)]]


_CACHE_NAMES = {0: "f16", 1: "q8_0", 2: "q4_0"}


cdef class CoreModel:
    cdef luce_model * ptr
    cdef readonly str path

    def __cinit__(self, str path, str device, bint use_mmap, int n_threads, bint plan_only, bint fuse_weights,
                  bint repack_weights):
        cdef luce_model_params params = luce_model_default_params()
        cdef bytes bpath = path.encode()
        cdef bytes bdev = device.encode()
        cdef const char * cpath = bpath
        params.device = bdev
        params.use_mmap = use_mmap
        params.n_threads = n_threads
        params.plan_only = plan_only
        params.fuse_weights = fuse_weights
        params.repack_weights = repack_weights
        cdef luce_status st
        self.path = path
        with nogil:
            st = luce_model_load(cpath, params, &self.ptr)
        _check(st)

    def __dealloc__(self):
        if self.ptr is not NULL:
            luce_model_free(self.ptr)
            self.ptr = NULL

    @property
    def info(self):
        return {
            "arch": luce_model_arch(self.ptr).decode(), "name": luce_model_name(self.ptr).decode("utf-8", "replace"),
            "device": luce_model_device(self.ptr).decode(), "n_vocab": luce_model_n_vocab(self.ptr),
            "n_embd": luce_model_n_embd(self.ptr), "n_layer": luce_model_n_layer(self.ptr),
            "n_ctx_train": luce_model_n_ctx_train(self.ptr), "n_params": luce_model_n_params(self.ptr),
            "weight_bytes": luce_model_weight_bytes(self.ptr), "types": luce_model_type_summary(self.ptr).decode(),
            "n_fused": luce_model_n_fused(self.ptr), "n_repacked": luce_model_n_repacked(self.ptr),
        }

    def plan(self, dict engine_params, bint check=True):
        """Memory plan for an engine with these settings (engine_defaults()' keys); raises
        InsufficientMemoryError if it does not fit."""
        cdef luce_engine_params ep = _engine_params(engine_params)
        cdef luce_memory_plan plan
        cdef luce_status st = luce_engine_plan(self.ptr, ep, &plan)
        if st != LUCE_OK and not (st == LUCE_ERR_MEMORY and not check):
            raise_status(st)
        return _plan_dict(&plan)


cdef luce_engine_params _engine_params(dict kw) except *:
    """luce_engine_default_params() with the entries of kw (engine_defaults()' keys) on top."""
    unknown = set(kw) - set(engine_defaults())
    if unknown:
        raise TypeError(f"unknown engine parameter(s): {', '.join(sorted(unknown))}")
    for name, table in (("cache_type_k", CACHE_TYPES), ("cache_type_v", CACHE_TYPES), ("rollback", ROLLBACKS),
                        ("tree_recurrence", TREE_RECURRENCES)):
        if name in kw and kw[name] not in table:
            raise ValueError(f"{name} must be one of {', '.join(table)}, not {kw[name]!r}")
    cdef luce_engine_params p = luce_engine_default_params()
    if "n_ctx" in kw: p.n_ctx = kw["n_ctx"]
    if "n_batch" in kw: p.n_batch = kw["n_batch"]
    if "cache_type_k" in kw: p.type_k = CACHE_TYPES[kw["cache_type_k"]]
    if "cache_type_v" in kw: p.type_v = CACHE_TYPES[kw["cache_type_v"]]
    if "kv_rotation" in kw: p.kv_rotation = kw["kv_rotation"]
    if "n_verify_max" in kw: p.n_verify_max = kw["n_verify_max"]
    if "rollback" in kw: p.rollback = ROLLBACKS[kw["rollback"]]
    if "small_batch_kernels" in kw: p.small_batch_kernels = kw["small_batch_kernels"]
    if "step_graphs" in kw: p.step_graphs = kw["step_graphs"]
    if "small_batch_max_tokens" in kw: p.small_batch_max_tokens = kw["small_batch_max_tokens"]
    if "tree_verify" in kw: p.tree_verify = kw["tree_verify"]
    if "tree_recurrence" in kw: p.tree_recurrence = TREE_RECURRENCES[kw["tree_recurrence"]]
    if "step_kv_pad" in kw: p.step_kv_pad = kw["step_kv_pad"]
    if "debug_piecewise" in kw: p.debug_piecewise = kw["debug_piecewise"]
    if "debug_staged_state_io" in kw: p.debug_staged_state_io = kw["debug_staged_state_io"]
    return p


cdef struct _progress_ctx:
    PyObject * callback
    PyObject * errors   # a list: the callback's exception, if it raised


cdef cbool _progress_trampoline(int32_t done, int32_t total, void * ud) noexcept with gil:
    cdef _progress_ctx * ctx = <_progress_ctx *> ud
    try:
        return (<object> ctx.callback)(done, total) is not False
    except BaseException as exc:   # stop the prefill and re-raise on the calling side
        (<list> ctx.errors).append(exc)
        return False


cdef luce_progress_cb _progress_setup(object progress, list errors, _progress_ctx * ctx):
    """Points ctx at the Python callback (kept alive by the caller) and its error list; returns the
    trampoline, or NULL when there is no callback."""
    ctx.callback = <PyObject *> progress
    ctx.errors = <PyObject *> errors
    if progress is None:
        return NULL
    return _progress_trampoline


cdef class SamplingParams:
    """Native sampling parameters (built from luce_engine.Sampling)."""
    cdef luce_sampling_params p

    def __cinit__(self, float temperature=0.0, int top_k=0, float top_p=1.0, float min_p=0.0,
                  float repeat_penalty=1.0, float presence_penalty=0.0, int penalty_last_n=64, uint64_t seed=0):
        self.p = luce_sampling_default_params()
        self.p.temperature = temperature
        self.p.top_k = top_k
        self.p.top_p = top_p
        self.p.min_p = min_p
        self.p.repeat_penalty = repeat_penalty
        self.p.presence_penalty = presence_penalty
        self.p.penalty_last_n = penalty_last_n
        self.p.seed = seed


cdef class CoreEngine:
    cdef luce_engine * ptr
    cdef readonly CoreModel model
    cdef int n_vocab
    cdef int n_capture

    def __cinit__(self, CoreModel model, dict engine_params):
        cdef luce_engine_params ep = _engine_params(engine_params)
        cdef luce_status st
        self.model = model
        self.n_vocab = luce_model_n_vocab(model.ptr)
        with nogil:
            st = luce_engine_create(model.ptr, ep, &self.ptr)
        _check(st)

    def __dealloc__(self):
        if self.ptr is not NULL:
            luce_engine_free(self.ptr)
            self.ptr = NULL

    def prefill(self, tokens, bint logits_all=False, progress=None):
        cdef int32_t[::1] buf = np.ascontiguousarray(tokens, dtype=np.int32)
        cdef int32_t n = buf.shape[0]
        cdef luce_status st
        cdef _progress_ctx ctx
        errors = []
        cdef luce_progress_cb cb = _progress_setup(progress, errors, &ctx)
        if n == 0:
            raise ValueError("prefill needs at least one token")
        with nogil:
            st = luce_engine_prefill(self.ptr, &buf[0], n, logits_all, cb, &ctx)
        if errors:
            raise errors[0]
        _check(st)

    def logits(self, int i=-1):
        """Copy of logits row i of the last evaluation (float32 [n_vocab])."""
        cdef const float * row = luce_engine_logits(self.ptr, i)
        if row is NULL:
            raise IndexError(f"no logits row {i} (rows kept: {luce_engine_n_logits(self.ptr)})")
        return np.asarray(<const float[:self.n_vocab]> row).copy()

    def all_logits(self):
        """Copy of every kept row: float32 [n_rows, n_vocab]."""
        cdef int32_t n = luce_engine_n_logits(self.ptr)
        out = np.empty((n, self.n_vocab), dtype=np.float32)
        if n == 0:
            return out
        cdef float[:, ::1] view = out
        cdef luce_status st
        with nogil:
            st = luce_engine_copy_logits(self.ptr, 0, n, &view[0, 0])
        _check(st)
        return out

    def argmax(self, int i=-1):
        """Greedy token of logits row i (computed on the device; the row is not downloaded)."""
        cdef int32_t tok = 0
        _check(luce_engine_argmax(self.ptr, i, &tok))
        return tok

    def all_argmax(self):
        """Greedy token of every kept row: int32 [n_rows]."""
        cdef int32_t n = luce_engine_n_logits(self.ptr)
        cdef int32_t tok = 0
        out = np.empty(n, dtype=np.int32)
        for i in range(n):
            _check(luce_engine_argmax(self.ptr, i, &tok))
            out[i] = tok
        return out

    def sample(self, SamplingParams params, int i=-1):
        cdef int32_t tok = 0
        cdef luce_status st
        with nogil:
            st = luce_engine_sample(self.ptr, &params.p, i, &tok)
        _check(st)
        return tok

    def set_seed(self, uint64_t seed):
        luce_engine_set_seed(self.ptr, seed)

    def step(self, SamplingParams params):
        """One step: returns (tokens, provenance flags, sample_ms, decode_ms)."""
        cdef luce_step_result r
        cdef luce_status st
        with nogil:
            st = luce_engine_step(self.ptr, &params.p, &r)
        _check(st)
        toks = [r.tokens[i] for i in range(r.n_tokens)]
        prov = [r.provenance[i] for i in range(r.n_tokens)]
        return toks, prov, r.sample_ms, r.decode_ms

    def verify(self, tokens, bint keep_pre_logits=True):
        cdef int32_t[::1] buf = np.ascontiguousarray(tokens, dtype=np.int32)
        cdef int32_t n = buf.shape[0]
        cdef luce_status st
        if n == 0:
            raise ValueError("verify needs at least one token")
        with nogil:
            st = luce_engine_verify(self.ptr, &buf[0], n, keep_pre_logits)
        _check(st)

    def commit(self, int k):
        cdef luce_status st
        with nogil:
            st = luce_engine_commit(self.ptr, k)
        _check(st)

    def verify_tree(self, tokens, parents, bint keep_pre_logits=True):
        cdef int32_t[::1] buf = np.ascontiguousarray(tokens, dtype=np.int32)
        cdef int32_t[::1] par = np.ascontiguousarray(parents, dtype=np.int32)
        cdef int32_t n = buf.shape[0]
        cdef luce_status st
        if n == 0 or par.shape[0] != n:
            raise ValueError("verify_tree needs at least one node and one parent id per node")
        with nogil:
            st = luce_engine_verify_tree(self.ptr, &buf[0], &par[0], n, keep_pre_logits)
        _check(st)

    def commit_path(self, nodes):
        cdef int32_t[::1] buf = np.ascontiguousarray(list(nodes) or [0], dtype=np.int32)
        cdef int32_t k = len(nodes)
        cdef luce_status st
        with nogil:
            st = luce_engine_commit_path(self.ptr, &buf[0], k)
        _check(st)

    def set_capture(self, layers, bint output_convention=False, int ring_size=4096):
        cdef int32_t[::1] buf = np.ascontiguousarray(list(layers) or [0], dtype=np.int32)
        cdef int32_t n = len(layers)
        cdef luce_status st = luce_engine_set_capture(self.ptr, &buf[0], n, output_convention, ring_size)
        _check(st)
        self.n_capture = n

    def captured(self, int pos):
        out = np.empty((max(self.n_capture, 1), luce_model_n_embd(self.model.ptr)), dtype=np.float32)
        cdef float[:, ::1] view = out
        cdef luce_status st = luce_engine_captured(self.ptr, pos, &view[0, 0])
        _check(st)
        return out

    def checkpoint(self):
        cdef luce_status st
        with nogil:
            st = luce_engine_checkpoint(self.ptr)
        _check(st)

    def truncate(self, int n):
        cdef luce_status st
        with nogil:
            st = luce_engine_truncate(self.ptr, n)
        _check(st)

    def cancel(self):
        with nogil:
            luce_engine_cancel(self.ptr)

    def clear_cancel(self):
        luce_engine_clear_cancel(self.ptr)

    @property
    def n_past(self):
        return luce_engine_n_past(self.ptr)

    @property
    def n_ctx(self):
        return luce_engine_n_ctx(self.ptr)

    @property
    def n_logits(self):
        return luce_engine_n_logits(self.ptr)

    def state_bytes(self):
        cdef uint64_t b = 0
        cdef luce_status st
        with nogil:
            st = luce_engine_state_bytes(self.ptr, &b)
        _check(st)
        return b

    def state_save(self, str path, bint allow_append=True):
        cdef bytes p = os.fsencode(path)
        cdef const char * cp = p
        cdef luce_state_io io
        cdef luce_status st
        with nogil:
            st = luce_engine_state_save(self.ptr, cp, allow_append, &io)
        _check(st)
        return _state_io_dict(&io)

    def state_load(self, str path):
        cdef bytes p = os.fsencode(path)
        cdef const char * cp = p
        cdef luce_state_io io
        cdef luce_status st
        with nogil:
            st = luce_engine_state_load(self.ptr, cp, &io)
        _check(st)
        return _state_io_dict(&io)

    def tokens(self):
        cdef int32_t n = luce_engine_n_past(self.ptr)
        if n == 0:
            return []
        cdef const int32_t * t = luce_engine_tokens(self.ptr)
        return [t[i] for i in range(n)]

    def stats(self):
        cdef luce_stats s
        luce_engine_stats(self.ptr, &s)
        return {"n_prefill_tokens": s.n_prefill_tokens, "prefill_ms": s.prefill_ms,
                "n_decode_tokens": s.n_decode_tokens, "decode_ms": s.decode_ms, "sample_ms": s.sample_ms,
                "n_graph_builds": s.n_graph_builds, "n_graph_reuses": s.n_graph_reuses,
                "n_replayed_tokens": s.n_replayed_tokens,
                "compute_buffer_bytes": s.compute_buffer_bytes,
                "n_small_batch_evals": s.n_small_batch_evals, "n_step_graph_replays": s.n_step_graph_replays}

    def reset_stats(self):
        luce_engine_reset_stats(self.ptr)

    def memory_plan(self):
        cdef luce_memory_plan p
        cdef luce_status st = luce_engine_memory_plan(self.ptr, &p)
        _check(st)
        return _plan_dict(&p)


cdef class CoreDraft:
    """A DFlash draft model bound to its target CoreModel (kept alive by this object)."""
    cdef luce_draft * ptr
    cdef readonly CoreModel target
    cdef readonly str path
    cdef int block
    cdef int n_vocab
    cdef int n_features

    def __cinit__(self, str path, CoreModel target, int n_ctx_draft=4096, bint use_mmap=True,
                  bint small_batch_kernels=True, bint step_graphs=True, int kv_pad=256):
        cdef luce_draft_params params = luce_draft_default_params()
        cdef bytes bpath = path.encode()
        cdef const char * cpath = bpath
        cdef luce_status st
        cdef luce_draft_info info
        params.n_ctx_draft = n_ctx_draft
        params.use_mmap = use_mmap
        params.small_batch_kernels = small_batch_kernels
        params.step_graphs = step_graphs
        params.kv_pad = kv_pad
        self.path = path
        self.target = target
        with nogil:
            st = luce_draft_load(cpath, target.ptr, params, &self.ptr)
        _check(st)
        _check(luce_draft_get_info(self.ptr, &info))
        self.block = info.block_size
        self.n_vocab = info.n_vocab
        self.n_features = info.n_capture * info.n_embd

    def __dealloc__(self):
        if self.ptr is not NULL:
            luce_draft_free(self.ptr)
            self.ptr = NULL

    @property
    def info(self):
        cdef luce_draft_info i
        _check(luce_draft_get_info(self.ptr, &i))
        return _draft_info_dict(&i)

    def reset(self):
        cdef luce_status st
        with nogil:
            st = luce_draft_reset(self.ptr)
        _check(st)

    def inject(self, features, int start_pos):
        """features: float32 [n, n_capture * n_embd] of positions start_pos..start_pos+n-1."""
        arr = np.ascontiguousarray(features, dtype=np.float32)
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        elif arr.ndim > 2:
            arr = arr.reshape(arr.shape[0], -1)
        if arr.shape[1] != self.n_features:
            raise ValueError(f"features must have {self.n_features} columns (n_capture * n_embd), got {arr.shape[1]}")
        if arr.shape[0] == 0:
            return
        cdef float[:, ::1] view = arr
        cdef int32_t n = arr.shape[0]
        cdef luce_status st
        with nogil:
            st = luce_draft_inject(self.ptr, &view[0, 0], n, start_pos)
        _check(st)

    def inject_captured(self, CoreEngine engine, int start_pos, int n):
        """Features of positions start_pos.. read on the device from the engine's capture rings."""
        cdef luce_status st
        with nogil:
            st = luce_draft_inject_captured(self.ptr, engine.ptr, start_pos, n)
        _check(st)

    def draft(self, int x0, int pos0):
        """Greedy draft tokens of block rows 1..B-1 (row i predicts position pos0 + i)."""
        out = np.empty(self.block - 1, dtype=np.int32)
        cdef int32_t[::1] view = out
        cdef luce_status st
        with nogil:
            st = luce_draft_run(self.ptr, x0, pos0, &view[0])
        _check(st)
        return out.tolist()

    def logits(self):
        """Logits of every row of the last block: float32 [B, n_vocab]."""
        out = np.empty((self.block, self.n_vocab), dtype=np.float32)
        cdef float[:, ::1] view = out
        cdef int32_t n = self.block
        cdef luce_status st
        with nogil:
            st = luce_draft_logits(self.ptr, 0, n, &view[0, 0])
        _check(st)
        return out

    def top_candidates(self, int first, int n, int k, float temperature):
        """Top-k tokens (int32 [n, k]) and full-vocabulary log-probabilities (float32 [n, k]) of
        logits rows first..first+n-1 of the last block, computed on the draft's device."""
        if n < 1 or k < 1:
            raise ValueError(f"top_candidates needs n >= 1 rows and k >= 1, got n={n}, k={k}")
        toks = np.empty((n, k), dtype=np.int32)
        lp = np.empty((n, k), dtype=np.float32)
        cdef int32_t[:, ::1] tv = toks
        cdef float[:, ::1] lv = lp
        cdef luce_status st
        with nogil:
            st = luce_draft_top_candidates(self.ptr, first, n, k, temperature, &tv[0, 0], &lv[0, 0])
        _check(st)
        return toks, lp


cdef luce_scorer_params _scorer_params(int n_batch, int sparse_threshold, int sparse_sink, int sparse_window,
                                       int n_layers):
    cdef luce_scorer_params p = luce_scorer_default_params()
    p.n_layers = n_layers
    p.n_batch = n_batch
    p.sparse_threshold = sparse_threshold
    p.sparse_sink = sparse_sink
    p.sparse_window = sparse_window
    return p


def scorer_defaults():
    """The native defaults of the scorer's parameters."""
    cdef luce_scorer_params p = luce_scorer_default_params()
    return {"n_batch": p.n_batch, "sparse_threshold": p.sparse_threshold, "sparse_sink": p.sparse_sink,
            "sparse_window": p.sparse_window, "n_layers": p.n_layers}


def scorer_plan(CoreModel model, int n_tokens, int n_tail=8, int n_batch=512, int sparse_threshold=32768,
                int sparse_sink=256, int sparse_window=2048, int n_layers=0, bint check=True):
    """Memory plan of one scoring call on `model` (which may be plan-only); InsufficientMemoryError
    when it does not fit (unless check=False)."""
    cdef luce_scorer_params p = _scorer_params(n_batch, sparse_threshold, sparse_sink, sparse_window, n_layers)
    cdef luce_memory_plan plan
    cdef luce_status st = luce_scorer_plan(model.ptr, p, n_tokens, n_tail, &plan)
    if st != LUCE_OK and not (st == LUCE_ERR_MEMORY and not check):
        raise_status(st)
    return _plan_dict(&plan)


cdef class CoreScorer:
    """A PFlash scorer on a loaded dense CoreModel (kept alive by this object)."""
    cdef luce_scorer * ptr
    cdef readonly CoreModel model
    cdef luce_scorer_params params

    def __cinit__(self, CoreModel model, int n_batch=512, int sparse_threshold=32768, int sparse_sink=256,
                  int sparse_window=2048, int n_layers=0):
        cdef luce_status st
        self.model = model
        self.params = _scorer_params(n_batch, sparse_threshold, sparse_sink, sparse_window, n_layers)
        with nogil:
            st = luce_scorer_create(model.ptr, self.params, &self.ptr)
        _check(st)

    def __dealloc__(self):
        if self.ptr is not NULL:
            luce_scorer_free(self.ptr)
            self.ptr = NULL

    def plan(self, int n_tokens, int n_tail=8, bint check=True):
        cdef luce_memory_plan plan
        cdef luce_status st = luce_scorer_plan(self.model.ptr, self.params, n_tokens, n_tail, &plan)
        if st != LUCE_OK and not (st == LUCE_ERR_MEMORY and not check):
            raise_status(st)
        return _plan_dict(&plan)

    def score(self, tokens, int n_tail=8, bint pre_rope=True, progress=None):
        cdef int32_t[::1] buf = np.ascontiguousarray(tokens, dtype=np.int32)
        cdef int32_t n = buf.shape[0]
        if n == 0:
            raise ValueError("scoring needs at least one token")
        out = np.empty(n, dtype=np.float32)
        cdef float[::1] view = out
        cdef luce_status st
        cdef _progress_ctx ctx
        errors = []
        cdef luce_progress_cb cb = _progress_setup(progress, errors, &ctx)
        with nogil:
            st = luce_scorer_score(self.ptr, &buf[0], n, n_tail, pre_rope, &view[0], cb, &ctx)
        if errors:
            raise errors[0]
        _check(st)
        return out

    def score_questions(self, body, questions, int n_tail=8, bint pre_rope=True, progress=None):
        cdef int32_t[::1] bbuf = np.ascontiguousarray(body, dtype=np.int32)
        qs = [np.ascontiguousarray(q, dtype=np.int32) for q in questions]
        if bbuf.shape[0] == 0 or not qs:
            raise ValueError("scoring needs a body and at least one question")
        cdef int32_t[::1] qbuf = np.ascontiguousarray(np.concatenate(qs), dtype=np.int32) if sum(len(q) for q in qs) else np.zeros(1, np.int32)
        cdef int32_t[::1] lbuf = np.array([len(q) for q in qs], dtype=np.int32)
        cdef int32_t n_body = bbuf.shape[0]
        cdef int32_t n_q = len(qs)
        out = np.empty((n_q, n_body), dtype=np.float32)
        cdef float[:, ::1] view = out
        cdef luce_status st
        cdef _progress_ctx ctx
        errors = []
        cdef luce_progress_cb cb = _progress_setup(progress, errors, &ctx)
        with nogil:
            st = luce_scorer_score_questions(self.ptr, &bbuf[0], n_body, &qbuf[0], &lbuf[0], n_q, n_tail, pre_rope,
                                             &view[0, 0], cb, &ctx)
        if errors:
            raise errors[0]
        _check(st)
        return out

    def cancel(self):
        with nogil:
            luce_scorer_cancel(self.ptr)

    def clear_cancel(self):
        luce_scorer_clear_cancel(self.ptr)

    def stats(self):
        cdef luce_scorer_stats s
        _check(luce_scorer_get_stats(self.ptr, &s))
        return {"n_tokens": s.n_tokens, "n_tail": s.n_tail, "n_dense_batches": s.n_dense_batches,
                "n_sparse_batches": s.n_sparse_batches, "attended_keys": s.attended_keys,
                "dense_keys": s.dense_keys, "forward_ms": s.forward_ms, "tail_ms": s.tail_ms,
                "total_ms": s.total_ms, "planned_kv_bytes": s.planned_kv_bytes,
                "planned_compute_bytes": s.planned_compute_bytes, "kv_bytes": s.kv_bytes,
                "compute_bytes": s.compute_bytes, "n_graph_builds": s.n_graph_builds,
                "n_graph_reuses": s.n_graph_reuses}


cdef dict _draft_info_dict(luce_draft_info * i):
    return {
        "arch": i.arch.decode(), "dialect": "lucebox" if i.dialect == LUCE_DRAFT_LUCEBOX else "llama",
        "block_size": i.block_size, "mask_token_id": i.mask_token_id,
        "capture_layers": tuple(i.capture[k] for k in range(i.n_capture)),
        "n_layer": i.n_layer, "n_embd": i.n_embd, "n_vocab": i.n_vocab, "n_ctx_draft": i.n_ctx_draft,
        "sliding_window": i.sliding_window, "n_swa_layers": i.n_swa_layers,
        "own_embedding": bool(i.own_embedding), "own_lm_head": bool(i.own_lm_head),
        "weight_bytes": i.weight_bytes, "kv_bytes": i.kv_bytes, "compute_bytes": i.compute_bytes,
        "n_graph_builds": i.n_graph_builds, "n_graph_reuses": i.n_graph_reuses,
        "n_small_batch_evals": i.n_small_batch_evals, "n_step_graph_replays": i.n_step_graph_replays,
    }


def draft_plan(str path, CoreModel target, int n_ctx_draft=4096, int capture_ring=4096):
    """Memory plan of a DFlash draft for `target` (which may be plan-only): validates the file as a
    load does (same exceptions) and reads no weights. Returns (info dict, plan dict)."""
    cdef bytes bpath = path.encode()
    cdef const char * cpath = bpath
    cdef luce_draft_plan_info p
    cdef luce_status st
    with nogil:
        st = luce_draft_plan(cpath, target.ptr, n_ctx_draft, capture_ring, &p)
    _check(st)
    plan = {"weights": p.weight_bytes, "kv_cache": p.kv_bytes, "compute": p.compute_bytes,
            "capture_ring": p.capture_ring_bytes, "total": p.total,
            "n_ctx_draft": p.info.n_ctx_draft, "capture_ring_size": p.capture_ring}
    return _draft_info_dict(&p.info), plan
