"""Malformed and unsupported GGUF files: each load runs in a subprocess, so a crash fails the test,
and must raise a specific exception whose message names the file and the key or tensor at fault."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tools.tiny_gguf import BAD_DETAILS, BAD_KINDS, TinyConfig, write_bad_gguf, write_tiny_gguf

EXPECTED = {
    "truncated": "ModelFormatError",
    "wrong_magic": "ModelFormatError",
    "unknown_arch": "UnsupportedModelError",
    "missing_tensor": "ModelValidationError",
    "wrong_shape": "ModelValidationError",
    "text_file": "ModelFormatError",
    "missing_key": "ModelValidationError",
    "bad_tensor_type": "UnsupportedModelError",
    "scale_companion": "UnsupportedModelError",   # a tensor the loader does not declare: refused, not ignored
    "fused_qkv": "UnsupportedModelError",         # llama.cpp runs these; luce says how to convert instead
}

LOADER = textwrap.dedent("""
    import json, sys
    import luce_engine
    try:
        m = luce_engine.Model(sys.argv[1], device="cpu")
        e = luce_engine.Engine(m, n_ctx=256)
        e.prefill([1, 2, 3])
        print(json.dumps({"ok": True}))
    except luce_engine.EngineError as exc:
        print(json.dumps({"ok": False, "type": type(exc).__name__, "message": str(exc)}))
""")


def load_in_subprocess(path) -> dict:
    proc = subprocess.run([sys.executable, "-c", LOADER, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"loader crashed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("kind", BAD_KINDS)
def test_bad_file_raises_specific_error(tmp_path, kind, arch):
    path = write_bad_gguf(tmp_path / f"{kind}.gguf", kind, TinyConfig(arch=arch))
    result = load_in_subprocess(path)
    assert result["ok"] is False
    assert result["type"] == EXPECTED[kind], result
    assert BAD_DETAILS[kind] in result["message"], result["message"]
    assert str(path) in result["message"], "the message must name the file"


def test_valid_file_loads_in_subprocess(tmp_path):
    assert load_in_subprocess(write_tiny_gguf(tmp_path / "ok.gguf", TinyConfig()))["ok"] is True


def test_missing_file_and_directory(tmp_path):
    from luce_engine import Model, ModelFileError

    with pytest.raises(ModelFileError, match="cannot open"):
        Model(tmp_path / "nope.gguf", device="cpu")
    with pytest.raises(ModelFileError, match="not a regular file"):
        Model(tmp_path, device="cpu")


def test_empty_file(tmp_path):
    from luce_engine import Model, ModelFormatError

    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(ModelFormatError, match="magic"):
        Model(tmp_path / "empty.gguf", device="cpu")


def test_truncated_header(tmp_path):
    from luce_engine import Model, ModelFormatError

    good = write_tiny_gguf(tmp_path / "ok.gguf", TinyConfig())
    data = open(good, "rb").read()
    (tmp_path / "cut.gguf").write_bytes(data[:100])
    with pytest.raises(ModelFormatError, match="malformed GGUF metadata"):
        Model(tmp_path / "cut.gguf", device="cpu")


def test_unknown_device(tmp_path):
    from luce_engine import DeviceError, Model

    good = write_tiny_gguf(tmp_path / "ok.gguf", TinyConfig())
    with pytest.raises(DeviceError, match="available: .*CPU"):
        Model(good, device="cuda:7")

