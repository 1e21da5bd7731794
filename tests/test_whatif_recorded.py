"""The what-if check reads the recorder's cost from the recording kernels' own timings."""

from __future__ import annotations

import statistics

import pytest
from test_bench_runners import load


def test_recorded_changes_pair_the_recording_kernels_round_by_round():
    check = load("whatif_check")
    timings = {"base": [100.0, 101.0, 99.0], "stages2": [150.0, 151.0, 149.0],
               "base:recorded": [110.0, 111.0, 109.0], "stages2:recorded": [160.0, 158.0, 159.0]}
    got = check.recorded_changes(timings, "base", "stages2")
    assert got["measured_recorded"] == pytest.approx(
        sorted([160 / 110, 158 / 111, 159 / 109])[1] - 1)
    assert got["recorder_cost_base"] == pytest.approx(sorted([1.1, 111 / 101, 109 / 99])[1] - 1)
    assert got["recorder_cost_variant"] == pytest.approx(
        sorted([160 / 150, 158 / 151, 159 / 149])[1] - 1)
    # a run that timed no recording kernel (or not this variant's) leaves the traced span
    assert check.recorded_changes({k: v for k, v in timings.items() if k != "stages2:recorded"},
                                  "base", "stages2") == {}


def test_a_change_is_read_round_by_round_so_a_clock_step_between_rounds_cancels():
    check = load("whatif_check")
    # +20% in every round, the GPU 10% slower from the third round on, whose variant ran
    # before the step and its base after it
    timings = {"base": [100.0, 100.0, 110.0, 110.0, 110.0],
               "v": [120.0, 120.0, 120.0, 132.0, 132.0]}
    assert check.paired_change(timings, "v", "base") == pytest.approx(0.2)
    # the two medians' ratio reads the step as the change
    assert statistics.median(timings["v"]) / statistics.median(timings["base"]) - 1 \
        == pytest.approx(120 / 110 - 1)
    # the noise beside it: half the interquartile range of the rounds' changes
    assert check.round_spread(timings, "v", "base") == pytest.approx(
        (0.2 - statistics.quantiles([0.2, 0.2, 120 / 110 - 1, 0.2, 0.2], n=4)[0]) / 2)
    with pytest.raises(ValueError, match="not one set of shuffled rounds"):
        check.paired_change({"base": timings["base"], "v": [1.0]}, "v", "base")


def test_a_prediction_from_several_traced_launches_is_their_median_inside_all_of_them():
    check = load("whatif_check")

    def launch(point, lo, hi, latency):  # as predict_what_if returns one
        return {"modelled": True, "predicted_change": point, "interval": (lo, hi),
                "detail": {"kernel_ns": 1000.0, "latency_ns": {"ring": latency}}}

    got = check.pooled_prediction([launch(0.95, 0.81, 1.08, 900), launch(0.78, 0.70, 0.90, 830),
                                   launch(0.93, 0.85, 1.04, 910)])
    assert got["predicted"] == pytest.approx(0.93)
    # the median interval (0.81, 1.04) widened to the launch that read +78%
    assert got["interval"] == [pytest.approx(0.78), pytest.approx(1.04)]
    assert got["launch_predictions"] == [0.95, 0.78, 0.93]
    assert got["latency_ns"] == {"ring": 900}
    one = check.pooled_prediction([launch(0.5, 0.4, 0.6, 700)])
    assert one["predicted"] == 0.5 and one["interval"] == [0.4, 0.6]


def test_the_record_chain_cost_comes_from_the_run_else_the_same_gpu_model(tmp_path):
    import json
    check = load("whatif_check")
    # the run measured it: its own figure
    (tmp_path / "chain").mkdir()
    (tmp_path / "chain" / "record_chain.json").write_text(json.dumps({"per_record_ns": 11.5}))
    (tmp_path / "device.txt").write_text("NVIDIA H100 80GB HBM3, 580.159.04\n")
    ns, source = check.record_chain(tmp_path)
    assert ns == 11.5 and "measured in this run" in source
    # a part's own folder finds its run's figure one folder up
    (tmp_path / "gemm_ze").mkdir()
    assert check.record_chain(tmp_path / "gemm_ze")[0] == 11.5
    # not measured: the committed figure of the same GPU model, and nothing for another GPU
    (tmp_path / "chain" / "record_chain.json").unlink()
    committed = json.loads(check.COMMITTED_CHAIN.read_text())
    ns, source = check.record_chain(tmp_path)
    assert ns == pytest.approx(committed["per_record_ns"]) and "same GPU model" in source
    (tmp_path / "device.txt").write_text("NVIDIA B200, 580.159.04\n")
    assert check.record_chain(tmp_path)[0] is None


def test_a_cluster_change_moves_the_launch_gap_by_the_runs_own_probe(tmp_path, monkeypatch):
    """ws_gemm's 1x1 variant: the check turns the variant's cluster into the launch gap's
    change the run's probe measured between the two sizes (bench/whatif.py cluster-gap),
    else a committed probe of the same GPU model, else none (the base's gap kept)."""
    import json
    check = load("whatif_check")
    change = check.GEMM_CHANGES["cluster1x1"]
    probe = {"device": "NVIDIA H100 80GB HBM3, CUDA 13.0", "gap_ns": {"1": 352.0, "2": 416.0}}
    (tmp_path / "cluster_gap").mkdir()
    (tmp_path / "cluster_gap" / "cluster_gap.json").write_text(json.dumps(probe))
    (tmp_path / "device.txt").write_text("NVIDIA H100 80GB HBM3, 580.159.04\n")
    gaps, source = check.cluster_gaps(tmp_path / "gemm_ze")  # a part's folder: one up
    assert gaps == {1: 352.0, 2: 416.0} and "measured in this run" in source
    assert check.model_change(change, 2, gaps) == {"shared_by": change["shared_by"],
                                                   "gap_change_ns": -64.0}
    # the base already at that size, or a size the probe did not run: no gap change
    assert check.model_change(change, 1, gaps) == {"shared_by": change["shared_by"]}
    assert "gap_change_ns" not in check.model_change(change, 4, gaps)
    assert check.model_change(check.GEMM_CHANGES["stages2"], 2, gaps) \
        == check.GEMM_CHANGES["stages2"]
    # not measured in the run: a committed probe of the same GPU model only
    (tmp_path / "cluster_gap" / "cluster_gap.json").unlink()
    committed = tmp_path / "committed.json"
    committed.write_text(json.dumps({**probe, "gap_ns": {"1": 320.0, "2": 416.0}}))
    monkeypatch.setattr(check, "COMMITTED_CLUSTER_GAP", committed)
    monkeypatch.setattr(check, "ROOT", tmp_path)
    gaps, source = check.cluster_gaps(tmp_path)
    assert gaps == {1: 320.0, 2: 416.0} and "same GPU model" in source
    (tmp_path / "device.txt").write_text("NVIDIA B200, 580.159.04\n")
    assert check.cluster_gaps(tmp_path)[0] is None
    assert check.model_change(change, 2, None) == {"shared_by": change["shared_by"]}


def test_the_librarys_record_chain_figure_is_the_committed_measurement():
    """``zero_edit.RECORD_CHAIN_NS`` (what the CLI and the examples remove per record) and the
    check's committed run (``bench/results/record_cost/chain.json``) hold one measurement:
    a new run of ``bench/record_cost.py chain`` must update both."""
    import json

    from cute_prof.analysis.zero_edit import RECORD_CHAIN_NS
    committed = json.loads(load("whatif_check").COMMITTED_CHAIN.read_text())
    device = committed["device"].split(",")[0].strip()
    assert RECORD_CHAIN_NS[device] == pytest.approx(committed["per_record_ns"], abs=0.05)


def test_the_committed_json_keeps_nine_significant_digits_of_every_float():
    check = load("whatif_check")
    got = check.significant({"measured": 0.005098412820440341, "rows": [
        {"interval": (0.0005003901620765916, 123456.789012345), "modelled": True, "n": 300}]})
    assert got == {"measured": 0.00509841282, "rows": [
        {"interval": [0.000500390162, 123456.789], "modelled": True, "n": 300}]}
    # a kernel time in us keeps its nanoseconds (and more)
    assert check.significant(171.825123) == 171.825123
