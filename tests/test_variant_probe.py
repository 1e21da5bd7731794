"""bench/whatif_variant_probe.py: a variant's sampled load latencies per wave, past each
CTA's start burst."""

from __future__ import annotations

import numpy as np

from tests.test_bench_runners import load


def test_loads_group_by_the_wave_of_their_cta_and_skip_its_start_burst():
    probe = load("whatif_variant_probe")
    # 4 CTAs (producer warps 0, 12, 24, 36), two a wave by first commit; each samples
    # positions 0..4 of ring 0, latency 100 * (its wave + 1) past the burst, 900 in it
    tids, positions = np.meshgrid([36, 0, 24, 12], np.arange(5), indexing="ij")
    first = {36: 0, 0: 10, 24: 5000, 12: 5010}  # warps 36 and 0 start first
    commit = np.array([first[t] + 100 * p for t, p in zip(tids.ravel(), positions.ravel())])
    wave = np.array([0 if first[t] < 5000 else 1 for t in tids.ravel()])
    latency = np.where(positions.ravel() < probe.START_BURST, 900, 100 * (wave + 1))
    pairs = {"tid": tids.ravel(), "position": positions.ravel(), "ring": np.zeros(20, int),
             "commit": commit, "arrived": commit + latency}
    got = probe.wave_latencies(pairs, wave_ctas=2)
    assert sorted(got) == [(0, 0), (1, 0)]
    np.testing.assert_array_equal(got[(0, 0)], [100.0] * 4)
    np.testing.assert_array_equal(got[(1, 0)], [200.0] * 4)
