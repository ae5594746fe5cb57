"""The soak with expiring keys runs tiny and shows what it is for: bounded with a TTL, not without.

It runs ``bench/soak_ttl.py`` in its own interpreter (it builds and stops its own SparkSession)
on the in-memory provider, two runs of 10 s each: 200 new keys a second under a 3 s TTL, then
without one. What it asserts are the figures it prints: with the TTL the committed key count
levels off near ``rate x ttl`` while without it every key emitted stays; the driver's RSS (where
the in-memory state lives) does not grow with the TTL.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_soak_ttl_keeps_the_key_count_flat_with_a_ttl_and_growing_without(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "bench/soak_ttl.py", "--minutes", "0.17", "--rate", "200", "--ttl", "3",
         "--sample-secs", "0.5", "--providers", "memory", "--out", str(tmp_path), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["exact"] is True and report["expected_plateau_keys"] == 600
    ttl, none = report["providers"]["memory"]["ttl"], report["providers"]["memory"]["none"]
    # Without a TTL every key emitted is in the state at the end, and the count kept rising.
    assert none["final_keys"] == none["emitted"] == none["acked"] > 1000
    assert none["keys"]["growth"] > 0.5 * none["emitted"]
    assert none["keys"]["slope_second_half_per_min"] > 0.5 * 200 * 60
    # With one, as many keys went in, but the count levelled off at the keys of the last TTL
    # (a loaded machine lets a commit lag, hence the slack), and did not keep rising.
    assert ttl["emitted"] > 1000
    plateau = report["expected_plateau_keys"]
    assert ttl["final_keys"] <= 2 * plateau and ttl["keys"]["last"] <= 2 * plateau
    # Its peak stayed well below what went in (half on an idle machine; a busy one delays the
    # commits that expire keys, so the bound leaves room).
    assert ttl["keys"]["peak"] < 0.75 * ttl["emitted"]
    assert (
        ttl["keys"]["slope_second_half_per_min"] < 0.1 * none["keys"]["slope_second_half_per_min"]
    )
    assert ttl["driver_rss_mb"]["growth"] < 5
    ratios = report["ratios_none_vs_ttl"]["memory"]
    assert ratios["final_keys"] == round(none["final_keys"] / ttl["final_keys"], 2) > 2
    assert ratios["state_memory"] == "driver_rss_mb"
    saved = json.loads((tmp_path / "soak_ttl.json").read_text())
    assert len(saved["providers"]["memory"]["ttl"]["samples"]) >= 10
    assert (tmp_path / "soak_ttl.png").stat().st_size > 10_000
