"""``calibration.recorder_cost`` takes two launches and times them on the GPU (its timing is
checked in tests/gpu/test_autoprof_gpu.py); here, what it refuses before launching anything,
and how the what-if terms carry the figure it returns."""

from pathlib import Path

import pytest

from cute_prof.calibration import recorder_cost
from cute_prof.errors import ProfileBufferError


def _never():
    raise AssertionError("launched despite a bad argument")


@pytest.mark.parametrize("kwargs,message", [
    ({"plain": None}, "plain must be a callable"),
    ({"recording": 3}, "recording must be a callable"),
    ({"rounds": 2}, "rounds must be an int >= 3"),
    ({"rounds": True}, "rounds must be an int >= 3"),
    ({"warmup": -1}, "warmup must be an int >= 0"),
])
def test_recorder_cost_refuses_bad_arguments_before_any_launch(kwargs, message):
    args = {"plain": _never, "recording": _never, **kwargs}
    with pytest.raises(ProfileBufferError, match=message):
        recorder_cost(args.pop("plain"), args.pop("recording"), **args)


def test_what_if_terms_carry_the_recorder_cost():
    from test_derived_pipeline import software_pipelined

    from cute_prof.analysis.derived_pipeline import derive_pipeline

    derived = derive_pipeline(software_pipelined())
    assert derived.what_if_terms()["recorder_cost"] == 0.0
    assert derived.what_if_terms(recorder_cost=0.15)["recorder_cost"] == 0.15
    with pytest.raises(ValueError, match="recorder_cost must be"):
        derived.what_if_terms(recorder_cost=-1.5)


def test_cli_takes_the_recorder_cost_in_percent(tmp_path, capsys):
    """``--recorder-cost 20`` reaches the model as 0.2, and the report says which cost it
    was given and what it took off the work (the slowdown itself: test_whatif_loaded)."""
    import json

    import cute_prof
    from cute_prof.cli import main
    from test_derived_pipeline import software_pipelined
    from test_load_arrivals import pk_pv_probed

    base = cute_prof.save_trace(tmp_path / "base.npz", software_pipelined())
    probed = cute_prof.save_trace(tmp_path / "probed.npz", pk_pv_probed())
    args = ["-q", "analyze", str(base), "--depth", "pk=1,pv=1", "--json",
            "--arrivals", str(probed)]
    assert main(args + ["--record-chain-ns", "0"]) == 0
    plain = json.loads(capsys.readouterr().out)["what_if"][0]
    assert main(args + ["--record-chain-ns", "0", "--recorder-cost", "20"]) == 0
    costed = json.loads(capsys.readouterr().out)["what_if"][0]
    assert plain["recorder_cost"] == 0.0 and costed["recorder_cost"] == pytest.approx(0.2)
    # this kernel's time is its loads': slowing its work cannot account for a recorder's
    # cost, so the model leaves the work as recorded and says so
    assert costed["recorder_slowdown"] == plain["recorder_slowdown"] == 1.0
    assert costed["kernel_ns"] == costed["measured_kernel_ns"] == plain["kernel_ns"]
    assert main(args + ["--recorder-cost", "-200"]) != 0
    assert "--recorder-cost wants a percentage" in capsys.readouterr().err
    spec = Path(__file__).resolve().parents[1] / "examples" / "ws_gemm_pipeline.json"
    assert main(["-q", "analyze", str(base), "--pipeline", str(spec),
                 "--recorder-cost", "10"]) != 0
    assert "--recorder-cost needs a zero-edit trace" in capsys.readouterr().err


def test_recorder_cost_pairs_each_round_so_a_clock_step_between_rounds_cancels(monkeypatch):
    import cute_prof.calibration as calibration

    # +10% in every round; the GPU slowed 20% after the second round, between the recording
    # kernel's launch and the plain one's in the third
    rounds = {"plain": [100.0, 100.0, 120.0, 120.0, 120.0],
              "recording": [110.0, 110.0, 110.0, 132.0, 132.0]}
    monkeypatch.setattr(calibration, "time_shuffled", lambda launches, **kw: rounds)
    got = recorder_cost(_never, _never, rounds=5)
    assert got["cost"] == pytest.approx(0.10)  # two medians' ratio: 110 / 120 - 1
    assert got["plain_ns"] == rounds["plain"] and got["recording_ns"] == rounds["recording"]
    with pytest.raises(ProfileBufferError, match="not one set of shuffled rounds"):
        calibration.paired_change({"a": [1.0, 2.0], "b": [1.0]}, "a", "b")


def test_resolved_pair_order_counts_only_pairs_the_gpu_tells_apart():
    from cute_prof.calibration import resolved_pair_order
    measured = [0.002, 0.005, 0.30, 0.95, -0.009]
    noise = [0.003, 0.003, 0.01, 0.02, 0.002]
    # rows 0 and 1 lie within their noise: their order is not counted either way
    right = [0.0, 0.0, 0.29, 0.97, -0.01]
    apart, wrong = resolved_pair_order(right, measured, noise)
    assert apart == 9 and wrong == []
    # a prediction of no change for the row measured at -0.9% ties the +0.2% and +0.5% rows
    tied = [0.0, 0.0, 0.29, 0.97, 0.0]
    assert resolved_pair_order(tied, measured, noise) == (9, [(0, 4), (1, 4)])
    swapped = [0.0, 0.0, 0.97, 0.29, -0.01]
    assert resolved_pair_order(swapped, measured, noise)[1] == [(2, 3)]
    with pytest.raises(ValueError):
        resolved_pair_order([0.0], [0.0, 1.0], [0.0, 0.0])
