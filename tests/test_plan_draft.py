"""The DFlash draft's memory plan (DraftModel.plan, luce_draft_plan) and `luce-chat --plan --draft`.

A plan validates the draft against its target exactly as a load does and reads no weights; its
weights and KV must equal what a real DraftModel allocates, and its compute estimate must bound
the scratch the draft's three schedulers really reserve (within COMPUTE_FACTOR).
"""
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest

from luce_engine import DraftModel, Engine, EngineStateError, Model, ModelFileError
from luce_tui import config
from reference import DEVICE, THREADS
from tools.tiny_dflash import BAD_DRAFT_KINDS, TinyDraftConfig, write_bad_draft, write_tiny_dflash
from tools.tiny_gguf import TinyConfig, write_tiny_gguf

pytestmark = pytest.mark.gpu   # runs on the device under test (LUCE_TEST_DEVICE)

# measured <= estimate <= COMPUTE_FACTOR * measured (tiny drafts measure 1.7-2.4x; a 27B-shaped
# draft on CPU measured 1.9x for the inject + draft schedulers)
COMPUTE_FACTOR = 3.0

TARGETS = {"llama": TinyConfig(arch="llama", n_layer=4, seed=3), "qwen35": TinyConfig(arch="qwen35", n_layer=4, seed=4)}
DRAFTS = {
    "llama": dict(),
    "lucebox-own-embd": dict(convention="lucebox", own_token_embd=True),
    "swa-block16": dict(sliding_window=5, block_size=16, n_layer=3),
    "q8_0": dict(weight_type="q8_0"),
}
INFO_KEYS = ("arch", "dialect", "block_size", "mask_token_id", "capture_layers", "n_layer", "n_embd", "n_vocab",
             "n_ctx_draft", "sliding_window", "n_swa_layers", "own_embedding", "own_lm_head", "weight_bytes",
             "kv_bytes")


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan_targets")
    out = {}
    for name, cfg in TARGETS.items():
        path = write_tiny_gguf(d / f"{name}.gguf", cfg)
        out[name] = (path, Model(path, device=DEVICE, n_threads=THREADS), Model(path, device=DEVICE, plan_only=True))
    return out


def _draft(tmp_path, target_path, name="draft.gguf", **kw):
    return write_tiny_dflash(tmp_path / name, target_path, TinyDraftConfig(seed=2, **kw))


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("draft", list(DRAFTS))
@pytest.mark.parametrize("n_ctx_draft", [64, 700])
def test_plan_equals_a_real_load(tmp_path, targets, target, draft, n_ctx_draft):
    tpath, tm, tplan = targets[target]
    path = _draft(tmp_path, tpath, **DRAFTS[draft])
    plan = DraftModel.plan(path, tplan, n_ctx_draft=n_ctx_draft, capture_ring=1000)
    dm = DraftModel(path, tm, n_ctx_draft=n_ctx_draft)
    real = dm._core.info
    assert plan["weights"] == dm.memory["weights"] == real["weight_bytes"] > 0
    assert plan["kv_cache"] == dm.memory["kv_cache"] == real["kv_bytes"] > 0
    for k in INFO_KEYS:
        assert plan["info"][k] == real[k], k
    assert plan["n_ctx_draft"] == n_ctx_draft and plan["capture_ring_size"] == 1000
    assert plan["capture_ring"] == len(dm.capture_layers) * dm.n_embd * 1000 * 4
    assert plan["total"] == plan["weights"] + plan["kv_cache"] + plan["compute"] + plan["capture_ring"]
    # a loaded target plans the same as a plan-only one
    assert DraftModel.plan(path, tm, n_ctx_draft=n_ctx_draft, capture_ring=1000) == plan


def test_plan_defaults_match_draft_model_defaults(tmp_path, targets):
    tpath, tm, tplan = targets["llama"]
    path = _draft(tmp_path, tpath)
    plan = DraftModel.plan(path, tplan)
    dm = DraftModel(path, tm)
    assert plan["n_ctx_draft"] == dm.n_ctx_draft == config.DRAFT_CTX
    assert plan["capture_ring_size"] == config.CAPTURE_RING
    assert plan["kv_cache"] == dm.memory["kv_cache"]
    assert DraftModel.plan(path, tplan, n_ctx_draft=0)["n_ctx_draft"] == dm.n_ctx_draft   # <= 0: the default


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("draft", ["llama", "swa-block16"])
@pytest.mark.parametrize("n_ctx_draft", [64, 700, 4096])
def test_compute_estimate_bounds_the_measured_scratch(tmp_path, targets, target, draft, n_ctx_draft):
    tpath, tm, tplan = targets[target]
    path = _draft(tmp_path, tpath, **DRAFTS[draft])
    est = DraftModel.plan(path, tplan, n_ctx_draft=n_ctx_draft)["compute"]
    dm = DraftModel(path, tm, n_ctx_draft=n_ctx_draft)
    # The third scheduler (inject from the capture rings) is sized on first use, by its largest
    # chunk (512 rows): inject more than that so that all three are at their largest.
    eng = Engine(tm, n_ctx=1024)
    eng.set_capture(list(dm.capture_layers), output=True, ring_size=1024)
    n = 600
    eng.prefill([1 + i % (tm.n_vocab - 2) for i in range(n)])
    dm.inject_captured(eng, 0, n)
    dm.draft(5, n)
    measured = dm.memory["compute"]
    assert measured <= est <= COMPUTE_FACTOR * measured, (est, measured, est / measured)


@pytest.mark.parametrize("dialect", ["llama", "lucebox"])
@pytest.mark.parametrize("kind", BAD_DRAFT_KINDS)
def test_bad_drafts_raise_in_plan_mode_as_in_a_load(tmp_path, targets, dialect, kind):
    tpath, tm, tplan = targets["qwen35"]
    path = write_bad_draft(tmp_path / f"bad_{kind}.gguf", kind, tpath, TinyDraftConfig(convention=dialect))
    with pytest.raises(Exception) as loaded:
        DraftModel(path, tm)
    with pytest.raises(Exception) as planned:
        DraftModel.plan(path, tplan)
    assert type(planned.value) is type(loaded.value)
    assert str(planned.value) == str(loaded.value)


@pytest.mark.parametrize("kind", ["missing", "garbage", "not-a-draft"])
def test_bad_files_raise_in_plan_mode_as_in_a_load(tmp_path, targets, kind):
    tpath, tm, tplan = targets["llama"]
    path = tmp_path / f"{kind}.gguf"
    if kind == "garbage":
        path.write_bytes(os.urandom(4096))
    elif kind == "not-a-draft":
        path = Path(tpath)
    with pytest.raises(Exception) as loaded:
        DraftModel(path, tm)
    with pytest.raises(Exception) as planned:
        DraftModel.plan(path, tplan)
    assert type(planned.value) is type(loaded.value)
    assert str(planned.value) == str(loaded.value) and str(path) in str(planned.value)
    if kind == "missing":
        assert isinstance(planned.value, ModelFileError)


def test_draft_for_another_target_raises_in_plan_mode(tmp_path, targets):
    # a valid draft written for the llama target, planned against the qwen35 one (other n_layer/vocab)
    other = write_tiny_gguf(tmp_path / "wide.gguf", TinyConfig(arch="qwen35", n_layer=4, n_embd=96, seed=5))
    path = _draft(tmp_path, other)
    _, tm, tplan = targets["qwen35"]
    with pytest.raises(Exception) as loaded:
        DraftModel(path, tm)
    with pytest.raises(Exception) as planned:
        DraftModel.plan(path, tplan)
    assert type(planned.value) is type(loaded.value) and str(planned.value) == str(loaded.value)
    assert "embedding_length" in str(planned.value)


def test_a_plan_only_target_cannot_run_a_draft(tmp_path, targets):
    tpath, _, tplan = targets["llama"]
    with pytest.raises(EngineStateError, match="planning only"):
        DraftModel(_draft(tmp_path, tpath), tplan)


def test_format_plan_keeps_columns_aligned():
    plain = config.format_plan({"weights": 1 << 30, "kv_cache": 1 << 20, "compute": 5, "total": 1 << 31,
                                "device_free": 1 << 32, "n_ctx": 4096}).splitlines()
    assert len({len(line) for line in plain}) == 1 and plain[0].startswith("  weights     ")   # unchanged layout
    rows = config.format_plan({"weights": 1 << 30, "kv_cache": 1 << 20, "compute": 5, "draft_weights": 1 << 29,
                               "draft_kv_cache": 1 << 20, "draft_compute": 1 << 22, "capture_ring": 1 << 23,
                               "total": 1 << 31, "n_ctx": 4096}).splitlines()
    assert len({len(line) for line in rows}) == 1
    assert [r.split("  ")[1].strip() for r in rows][3:7] == ["draft weights", "draft KV", "draft compute",
                                                            "capture ring"]


# -- luce-chat --plan --draft ---------------------------------------------------------------------
COMMON = ["--device", "cpu", "--threads", "1"]


def luce(*args):
    return subprocess.run([sys.executable, "-m", "luce_tui", *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan_cli")
    target = write_tiny_gguf(d / "target.gguf", TinyConfig(arch="qwen35", n_layer=4, seed=4))
    draft = write_tiny_dflash(d / "draft.gguf", target, TinyDraftConfig(seed=2, block_size=8))
    return target, draft


def _need(target, draft, n_ctx=1024, verify=16):
    """Device bytes the CLI must find for this configuration (on the CPU the host logits count too)."""
    m = Model(target, device="cpu", plan_only=True)
    p = m.plan(n_ctx=n_ctx, n_verify_max=verify, check=False)
    d = DraftModel.plan(draft, m, n_ctx_draft=config.DRAFT_CTX, capture_ring=config.CAPTURE_RING)
    return p["total"] + d["total"], p, d


def test_cli_plan_prints_draft_rows_in_the_total(cli_files):
    target, draft = cli_files
    r = luce("--plan", "--target", target, "--draft", draft, "--max-ctx", "1024", *COMMON)
    assert r.returncode == 0, r.stderr
    need, p, d = _need(target, draft)
    lines = r.stdout.splitlines()
    assert "draft draft.gguf: dflash, block 8, 3 captured layers, draft context 4096" in r.stdout
    for key, label in (("weights", "draft weights"), ("kv_cache", "draft KV"), ("compute", "draft compute"),
                       ("capture_ring", "capture ring")):
        row = [ln for ln in lines if ln.strip().startswith(label)]
        assert row and row[0].split()[-2:] == config.human_bytes(d[key]).split(), (label, row)
    total = [ln for ln in lines if ln.strip().startswith("total")][0]
    assert total.split()[-2:] == config.human_bytes(p["total"] + d["total"]).split()
    rows = [ln for ln in lines if ln.startswith("  ") and not ln.startswith(("  draft draft.gguf", "  fits"))]
    assert len({len(ln) for ln in rows}) == 1                     # aligned


def test_cli_plan_with_spec_off_has_no_draft_rows(cli_files):
    target, draft = cli_files
    r = luce("--plan", "--target", target, "--draft", draft, "--spec", "off", "--max-ctx", "1024", *COMMON)
    assert r.returncode == 0, r.stderr
    assert "draft" not in r.stdout


def test_cli_plan_checks_the_draft_against_the_budget(cli_files):
    target, draft = cli_files
    need, _, d = _need(target, draft)
    args = ["--plan", "--target", target, "--draft", draft, "--max-ctx", "1024", *COMMON]
    ok = luce(*args, "--plan-memory", str(need))
    assert ok.returncode == 0 and "(0 B to spare)" in ok.stdout, ok.stdout + ok.stderr
    r = luce(*args, "--plan-memory", str(need - 1))
    assert r.returncode == 2, r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("luce-chat: error: does not fit: needs ")
    assert "lower --max-ctx to 768" in err[0]                     # the largest 256-multiple below 1024
    assert "--cache-type-k q4_0 --cache-type-v q4_0: fits" in err[0]
    assert f"drop the draft (--spec off or no --draft: saves {config.human_bytes(d['total'])})" in err[0]
    # block 8: at most 7 proposals, verified with 8 tokens instead of the 16 the engine gets by default
    assert "--draft-max 7 or less (rollback buffers for 8 tokens instead of 16)" in err[0]


def test_cli_plan_draft_max_shrinks_the_rollback_buffers(cli_files):
    target, draft = cli_files
    need16, p16, _ = _need(target, draft, verify=16)
    need4, p4, _ = _need(target, draft, verify=4)
    assert p4["recurrent"] < p16["recurrent"]
    r = luce("--plan", "--target", target, "--draft", draft, "--draft-max", "3", "--max-ctx", "1024",
             "--plan-memory", str(need4), *COMMON)
    assert r.returncode == 0 and "verify batch 4" in r.stdout and "(0 B to spare)" in r.stdout, r.stdout + r.stderr


def test_cli_plan_rejects_a_bad_draft_like_a_load(tmp_path, cli_files):
    target, _ = cli_files
    bad = write_bad_draft(tmp_path / "bad.gguf", "embd_mismatch", target)
    r = luce("--plan", "--target", target, "--draft", bad, *COMMON)
    assert r.returncode == 2 and r.stdout == ""
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "bad.gguf" in err[0] and "embedding_length" in err[0]


def test_cli_plan_says_when_no_setting_can_fit(cli_files):
    target, draft = cli_files
    r = luce("--plan", "--target", target, "--draft", draft, "--plan-memory", "1MiB", *COMMON)
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "use a smaller quantization of the model or another device" in err[0]


def test_cli_plan_honours_rollback(cli_files):
    """--rollback: replay (the engine's default) plans each verify token's decay and beta, snapshot a
    state per token; the plan of each is exactly Model.plan's with that setting."""
    target, draft = cli_files
    m = Model(target, device="cpu", plan_only=True)
    replay = m.plan(n_ctx=1024, check=False)
    snapshot = m.plan(n_ctx=1024, rollback="snapshot", check=False)
    assert replay["recurrent"] < snapshot["recurrent"] and replay == m.plan(n_ctx=1024, rollback="replay", check=False)
    for flag, plan in ((None, replay), ("snapshot", snapshot), ("replay", replay)):
        args = ["--rollback", flag] if flag else []
        r = luce("--plan", "--target", target, "--draft", draft, "--max-ctx", "1024", *args, *COMMON)
        assert r.returncode == 0, r.stderr
        row = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("recurrent")][0]
        assert row.split()[-2:] == config.human_bytes(plan["recurrent"]).split(), (flag, row)


def test_engine_flags_reach_the_engine(cli_files):
    """--rollback, --small-batch-kernels, --step-graphs, --fuse-weights and --repack-weights become Model/Engine
    arguments (the kernel flags DraftModel arguments too); unsaid ones are left to the engine's defaults
    (luce_*_default_params)."""
    target, _ = cli_files
    from luce_tui.cli import build_parser

    unsaid = config.engine_settings(build_parser().parse_args(["--target", target]))
    assert unsaid.engine_params() == {} and "fuse_weights" not in unsaid.model_params()
    said = config.engine_settings(build_parser().parse_args(
        ["--target", target, "--rollback", "snapshot", "--small-batch-kernels", "off", "--step-graphs", "off",
         "--fuse-weights", "off", "--repack-weights", "off"]))
    assert said.engine_params() == {"rollback": "snapshot", "small_batch_kernels": False, "step_graphs": False}
    # the kernel flags apply to the draft too; unsaid, the draft keeps its defaults
    assert said.draft_params() == {"small_batch_kernels": False, "step_graphs": False}
    assert unsaid.draft_params() == {}
    assert said.model_params()["fuse_weights"] is False and said.model_params()["repack_weights"] is False
    assert "repack_weights" not in unsaid.model_params()
    eng = Engine(Model(target, device="cpu", n_threads=1, **{"fuse_weights": False}), n_ctx=256, **said.engine_params())
    assert eng.rollback == "snapshot"
