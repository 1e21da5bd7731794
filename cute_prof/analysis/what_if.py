"""What-if predictions: a changed pipeline (ring depths, sharing, a region faster) replayed
against the base replay, the change per unit carried to the kernel's time; as the check
predicts it, with loaded latencies, the recorder's cost removed, an interval, the
sensitivity to load latency and the pooled predictions of several probed launches.

It owns :func:`what_if`, :func:`predict_what_if` and how predictions are pooled. Uses every
stage below; it may not format or export (that is :mod:`.pipeline_report`).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import ProfileBufferError
from .critical_path import steady_bound
from .dispatch import DISPATCH_ROUNDS, dispatch_shift, DISPATCH_TOLERANCE_NS, kernel_time
from .loads import (draw_latencies, LATENCY_DRAW_SEED, latency_sample, one_draw_per_cluster,
    with_latency)
from .model import arrival_latencies, arrival_leader_gaps, shifted_arrivals
from .pipeline_data import PipelineData, timer_step
from .replay import QUEUE_RULES, queued_under_load, replay, Schedule
from .replay_terms import (infer_terms, MIN_LATENCY_SAMPLE, never_blocked, slowed_by_recorder,
    unit_ends, UNQUEUED_QUANTILE, worker_regions)

__all__ = ["what_if", "predict_what_if", "latency_sensitivity", "pool_predictions",
           "recorder_slowdown", "blocked_as_base", "busy_share"]
RECORDER_SLOWDOWN_FLOOR = 0.5  # the most a recorder is taken to slow the work (x 1 / 0.5)
RECORDER_SLOWDOWN_STEPS = 8  # replays of the fit past its two ends (regula falsi needs fewer)


def recorder_slowdown(data: PipelineData, recorder_cost: float, *, terms=None,
                      record_ns: float = 0.0, item_latency: dict | None = None,
                      leaders: dict | None = None,
                      recorded_end: np.ndarray | None = None,
                      release_sample: dict | None = None) -> float:
    """The factor on the non-producing roles' own work (``slowed_by_recorder``; their async
    jobs' engine time kept) that, with ``record_ns`` of each work region removed as well,
    replays the base ``recorder_cost`` faster (the recording kernel's time over the plain
    kernel's, less 1, both timed on the GPU). A record's own time on a dependency chain is
    only part of what recording costs: the compiler schedules the code around the records
    differently, and that slows the code between them (on FA4 well beyond the records' own
    time: docs/performance.md). 1.0 where the records' own time already accounts for the
    cost, and where slowing the work cannot (the base's
    time is its async jobs', a GEMM's tensor core: the cost is not in the work, and the
    model leaves it). ``recorded_end``: each unit's end in the replay with nothing removed,
    where the caller has it."""
    tags = slowed_by_recorder(data.spec)
    if not recorder_cost > 0 or not tags:
        return 1.0
    terms = terms if terms is not None else infer_terms(data)
    if recorded_end is None:
        recorded = replay(data, terms=terms, item_latency=item_latency, leaders=leaders,
                          release_sample=release_sample)
        recorded_end = unit_ends(recorded.end)
    target = 1.0 / (1.0 + float(recorder_cost)) - 1.0

    def change(factor: float) -> float:
        s = replay(data, terms=terms, record_ns=record_ns, item_latency=item_latency,
                   leaders=leaders, own_scale={t: factor for t in tags} if factor != 1.0 else None,
                   release_sample=release_sample)
        end = unit_ends(s.end)
        measured, predicted = kernel_time(data, end - recorded_end)
        return predicted / measured - 1.0

    # the change falls with the factor, nearly in proportion: regula falsi (Illinois) between
    # the floor and 1 finds it in a few replays
    low, high = RECORDER_SLOWDOWN_FLOOR, 1.0
    at_low, at_high = change(low) - target, change(high) - target
    if at_high <= 0 or at_low > 0:
        return 1.0
    side = 0
    for _ in range(RECORDER_SLOWDOWN_STEPS):
        factor = high - at_high * (high - low) / (at_high - at_low)
        at = change(factor) - target
        if abs(at) < 1e-4:
            return factor
        if at > 0:  # not yet fast enough: a smaller factor
            high, at_high = factor, at
            if side == 1:
                at_low /= 2
            side = 1
        else:
            low, at_low = factor, at
            if side == -1:
                at_high /= 2
            side = -1
    return factor


def what_if(data: PipelineData, *, depth: dict | None = None, shared_by: dict | None = None,
            scale: dict | None = None, latency: dict | None = None, terms=None,
            loaded_latency: bool = False, latency_quantile: float = 0.5,
            latency_shift_ns: float = 0.0, first_load: np.ndarray | None = None,
            record_ns: float = 0.0, arrivals: dict | None = None,
            recorder_cost: float = 0.0, slowdown: float | None = None,
            schedules: bool = False, release_sample: dict | None = None,
            queue_rule: str = "little", gap_change_ns: float = 0.0) -> dict:
    """Predicted kernel-time change of a changed pipeline (ring depths, sharing, a region
    faster), from the replay of the change against the replay of the base. ``latency``:
    wait tag -> ns, replacing the inferred latency of that wait's event (when the trace
    holds no steady-state observation of it, e.g. a consumer that never waited).
    ``gap_change_ns``: ns the change adds to the gap between one CTA and the next on an SM
    (``dispatched_starts``: a cluster shape's own launch cost, measured apart from the
    kernel, e.g. with ``bench/whatif.py cluster-gap``; negative where the change drops the
    clusters).

    ``loaded_latency``: the latency of every ``consumes`` wait not named in ``latency``
    depends on the load the change puts on memory (a slower pipeline sees shorter loads).
    The base latency L_b is the ``latency_quantile`` of :func:`latency_sample`; a load that
    met no queue takes its 5th percentile L_0; the change's latency is L_0 plus the queued
    part L_b - L_0 at the change's throughput (:func:`queued_under_load` by ``queue_rule``:
    Little's law unless told), solved as a fixed point with the replay;
    ``latency_shift_ns`` moves L_b (the timer's resolution in an interval).

    ``first_load``: latencies of each unit's first load (``DerivedPipeline.
    first_load_latency``) as the sample instead of :func:`latency_sample`. A unit's first
    load shares the memory with the burst of loads the unit issues at its start, so it can
    exceed the steady state's latency; the steady state's own bound (the per-unit latency
    of the wait inferred from the trace: blocked waits, capped by the unblocked ones, which
    ended after their data) caps it quantile by quantile.

    ``recorder_cost``: what recording cost the base on the GPU (the recording kernel's
    time over the plain kernel's, less 1): the part of it ``record_ns`` does not account
    for slows the warps' own work (``recorder_slowdown``), in the change's replay by each
    unit's busy share of it (the recorder's schedule costs where the warps work, so a
    change whose warps wait more pays less of it), so both replay the kernel unrecorded.
    The change's replay runs at each unit's busy share
    (``replay(load_share=)``, ``busy_share``), to a fixed point, and keeps a unit's own
    work's departure from the iteration's median only in the iterations whose waits
    block as the base's did (``replay(departure_kept=)``, ``blocked_as_base``; once
    dropped in the fixed point, dropped); ``slowdown``: that factor as an earlier call
    fitted it (its ``recorder_slowdown``), not fitted again.
    ``schedules``: also return the base's and the change's replays (``base_schedule``,
    ``changed_schedule``: each CTA's replayed spans, to set against a variant's own trace)
    and how much later than measured each unit started in them (``base_unit_shift``,
    ``changed_unit_shift``: ``dispatch_shift``), and each drawn wait's (U, K) latencies in
    both (``base_latency_draws``, ``changed_latency_draws``: wait tag -> ns).

    ``arrivals``: ring -> loads sampled as they arrived (``load_arrivals.load_arrival_sample``:
    every load, not only the late ones a consumer waited for; or plain latencies); a
    consumes wait on such a ring takes its L_b and L_0 from that sample, ahead of
    ``first_load``, and each item its own latency (``draw_latencies``), one per item for
    the CTAs of a cluster that share the ring (a multicast load lands in all of them).
    Where the sample's CTAs share lines in groups (``miss_and_hit``), each item draws a
    miss and a hit, and the replay couples the loads of a group (``replay(leaders=)``): a
    change that holds CTAs in step makes all of them wait for the first one's miss.

    ``release_sample``: another launch's releases that did not wait for their job
    (``clean_releases``), for every replay (``replay(release_sample=)``)."""
    if queue_rule not in QUEUE_RULES:
        raise ValueError(f"unknown queue rule {queue_rule!r}: one of {sorted(QUEUE_RULES)}")
    terms = terms if terms is not None else infer_terms(data)
    tags = [r.tag for r in data.spec.regions]
    for tag, value in (latency or {}).items():
        if tag not in tags:
            raise ProfileBufferError(f"latency names an unknown region {tag!r}")
        terms = with_latency(terms, tags.index(tag), value)
    loaded, draws, leaders = {}, {}, {}
    if loaded_latency:
        for i, r in enumerate(data.spec.regions):
            if "consumes" in r.relations and r.tag not in (latency or {}):
                sample = (arrivals or {}).get(r.relations["consumes"].resource, ())
                probed = arrival_latencies(sample)
                if probed.size >= MIN_LATENCY_SAMPLE:
                    at = np.quantile(probed, latency_quantile)
                    low = np.quantile(probed, UNQUEUED_QUANTILE)
                    # every item draws its own latency from the sample (one seed per wait:
                    # the base and the change see the same draws), its queued part moved
                    # by the quantile asked for less the sample's median
                    rng = np.random.default_rng(LATENCY_DRAW_SEED + i)
                    queued, fixed, unqueued = draw_latencies(rng, sample, data.shape[:2])
                    if fixed.ndim == 3:
                        leaders[i] = arrival_leader_gaps(sample)[1]
                    draws[i] = (queued + (at - np.median(probed)) + latency_shift_ns, fixed,
                                unqueued)
                elif first_load is not None and len(first_load) >= MIN_LATENCY_SAMPLE:
                    steady = steady_bound(data, terms, i)
                    steady = steady if steady.size else np.asarray(first_load, float)
                    at = min(np.quantile(first_load, latency_quantile),
                             np.quantile(steady, latency_quantile))
                    low = min(np.quantile(first_load, UNQUEUED_QUANTILE),
                              np.quantile(steady, UNQUEUED_QUANTILE))
                else:
                    sample, _ = latency_sample(data, terms, region=r.tag)
                    at = np.quantile(sample, latency_quantile)
                    low = np.quantile(sample, UNQUEUED_QUANTILE)
                loaded[i] = (float(at) + latency_shift_ns, float(low))
                terms = with_latency(terms, i, loaded[i][0])
    base_draws = one_draw_per_cluster(
        data, data.spec, {i: queued + fixed for i, (queued, fixed, _) in draws.items()})
    recorded_end = None
    if record_ns > 0 or recorder_cost > 0:
        recorded = replay(data, terms=terms, item_latency=base_draws, leaders=leaders,
                          release_sample=release_sample)
        recorded_end = unit_ends(recorded.end)
    # the recorder's cost beyond its records' own time, taken off the warps' work
    if slowdown is None:
        slowdown = recorder_slowdown(data, recorder_cost, terms=terms, record_ns=record_ns,
                                     item_latency=base_draws, leaders=leaders,
                                     recorded_end=recorded_end, release_sample=release_sample)
    unslowed = ({tag: slowdown for tag in slowed_by_recorder(data.spec)}
                if slowdown != 1.0 else None)
    changed_spec = data.spec.with_changes(depth=depth, shared_by=shared_by)

    def dispatched(spec, shift=None, gap_change_ns=0.0, **kw):
        """The replay with the CTAs past the first wave started where the replay frees
        an SM (``dispatch_shift``, to a fixed point from ``shift``: each round fixes at
        least one more wave), each unit's end as if it had started where measured, and the
        shifts it replayed with. Where no unit's replay depends on another's (no shared
        misses, no ring shared by a cluster), its span does not depend on its start: one
        round, unshifted, unless the schedules are asked for."""
        shift = np.zeros(data.shape[0]) if shift is None else shift
        replay_terms = kw.pop("terms", terms)
        kw.setdefault("own_scale", unslowed)
        alone = not (leaders or schedules or any(r.shared_by > 1 for r in spec.resources))
        nonlocal recorded_end
        for round_ in range(DISPATCH_ROUNDS):
            s = replay(data, spec, terms=replay_terms, record_ns=record_ns,
                       leaders=leaders, unit_shift=shift, release_sample=release_sample, **kw)
            end = unit_ends(s.end) - shift
            if recorded_end is None:  # nothing removed: the base's first round is it
                recorded_end = end
            if alone or round_ == DISPATCH_ROUNDS - 1:
                break
            moved = dispatch_shift(data, end - recorded_end, gap_change_ns=gap_change_ns)
            if np.abs(moved - shift).max() < DISPATCH_TOLERANCE_NS:
                break
            shift = moved
        return s, end, shift

    base, base_end, base_shift = dispatched(data.spec, item_latency=base_draws)

    def kernel_ns(end, keep=None, gap_change_ns=0.0):
        """The kernel's time with each unit ending at ``end``: the measured kernel moved
        by each unit's replayed change from the recorded replay (so the change is measured
        against the base replayed unrecorded, as the GPU measures it against the plain
        kernel)."""
        return kernel_time(data, end - recorded_end, keep, gap_change_ns=gap_change_ns)[1]

    base_ns = kernel_ns(base_end)
    changed_terms, ratio, changed_draws, changed_shift = terms, 1.0, {}, base_shift
    # each unit's busy share: how much of its non-producing roles' time stays work (not
    # blocked) in the change against the base, a fixed point with the replay
    base_busy = busy_share(data, base, terms[2])
    share, changed_own = np.ones(data.shape[0]), unslowed
    kept = np.ones(data.shape[:2])  # every departure, until the change blocks otherwise
    for _ in range(8):
        if unslowed:  # the recorder's schedule costs where the warps work
            changed_own = {t: 1.0 / (1.0 + (1.0 / f - 1.0) * share) for t, f in unslowed.items()}
        for i, (at_base, unqueued) in loaded.items():
            value = unqueued + queued_under_load(max(at_base - unqueued, 0.0), unqueued,
                                                 ratio, rule=queue_rule)
            changed_terms = with_latency(changed_terms, i, value)
        # each drawn load's queueing scales the same way
        changed_draws = one_draw_per_cluster(data, changed_spec, {
            i: fixed + queued_under_load(queued, unqueued, ratio, rule=queue_rule)
            for i, (queued, fixed, unqueued) in draws.items()})
        changed, new_end, changed_shift = dispatched(
            changed_spec, changed_shift, scale=scale, terms=changed_terms,
            item_latency=changed_draws, own_scale=changed_own, load_share=share,
            departure_kept=kept, gap_change_ns=gap_change_ns)
        predicted = kernel_ns(new_end, gap_change_ns=gap_change_ns)
        previous_ratio, ratio = ratio, predicted / base_ns
        previous_share, share = share, np.minimum(
            busy_share(data, changed, terms[2]) / np.maximum(base_busy, 1e-9), 1.0)
        # an iteration once replayed in a changed schedule stays changed: the fixed point
        # only drops departures, so it settles
        previous_kept, kept = kept, np.minimum(kept, blocked_as_base(data, base, changed))
        # the ratio moves only the loads' queueing: without loaded latencies it settles nothing
        if (not loaded or abs(ratio - previous_ratio) < 1e-4)\
                and np.abs(share - previous_share).max() < BUSY_TOLERANCE\
                and np.array_equal(kept, previous_kept):
            break
    delta = new_end - base_end
    # per-CTA variation: the same change carried through each half of the SMs alone
    halves = []
    for parity in (0, 1):
        keep = data.unit_sm % 2 == parity
        if keep.any() and (~keep).any():
            halves.append(kernel_ns(new_end, keep, gap_change_ns=gap_change_ns)
                          / kernel_ns(base_end, keep) - 1)
    measured_end = unit_ends(data.end)
    fidelity = float(np.median((base_end - measured_end)
                               / np.maximum(measured_end - data.start[:, 0, :].min(1), 1)))
    extra = {"base_schedule": base, "changed_schedule": changed, "base_unit_shift": base_shift,
             "changed_unit_shift": changed_shift,
             "base_latency_draws": {tags[i]: x for i, x in base_draws.items()},
             "changed_latency_draws": {tags[i]: x for i, x in changed_draws.items()}
             } if schedules else {}
    return {**extra, "change": {"depth": depth, "shared_by": shared_by, "scale": scale,
                                "latency": latency, "gap_change_ns": gap_change_ns},
            "kernel_ns": base_ns, "predicted_kernel_ns": predicted,
            "measured_kernel_ns": kernel_time(data, np.zeros_like(base_end))[0],
            "predicted_change": predicted / base_ns - 1,
            "unit_delta_median_ns": float(np.median(delta)),
            "half_changes": halves,
            "replay_error_median": fidelity,
            "recorder_slowdown": slowdown,
            # the latency the change's replay waited on: the mean of its items' draws where
            # the ring's loads were sampled, else the one loaded latency
            "latency_ns": {tags[i]: float(np.mean(changed_draws[i])) if i in changed_draws
                           else float(changed_terms[1][0, i]) for i in loaded}}


def blocked_as_base(data: PipelineData, base: Schedule, changed: Schedule) -> np.ndarray:
    """(units, iterations) 1.0 where each wait of the non-producing roles blocked in the
    ``changed`` replay as in the ``base`` one (the iteration ran in the schedule its work's
    departure from the iteration's median was measured in), else 0.0: there the departure
    is the base's situation, not the unit's work. A CTA's work departure barely repeats
    from one traced launch of the base to the next, and it shrinks in a change whose waits
    block: it comes from where the CTA ran in the base's schedule, not from the CTA."""
    waits = [i for i in worker_regions(data.spec) if data.spec.regions[i].kind == "wait"]
    if not waits:
        return np.ones(data.shape[:2])
    same = (changed.blocked[:, :, waits] == base.blocked[:, :, waits]).all(axis=2)
    return same.astype(np.float64)


# the busy shares' fixed point stops once no unit's share moves by this much
BUSY_TOLERANCE = 1e-3


def busy_share(data: PipelineData, sched: Schedule, cost) -> np.ndarray:
    """(units,) the share of the non-producing roles' time (``slowed_by_recorder``'s: each
    unit's first start to last end of their regions) not spent blocked in a wait beyond its
    own cost (``cost``: each region's unblocked cost, ``infer_terms``): how much the SM's
    warps load each other."""
    idx = worker_regions(data.spec)
    if not idx:
        return np.ones(data.shape[0])
    start, end = sched.start[:, :, idx], sched.end[:, :, idx]
    span = (np.nanmax(end.reshape(end.shape[0], -1), 1)
            - np.nanmin(start.reshape(start.shape[0], -1), 1))
    blocked = np.zeros(span.shape)
    for j, i in enumerate(idx):
        if data.spec.regions[i].kind != "wait":
            continue
        extra = (end[:, :, j] - start[:, :, j]) - float(np.asarray(cost)[i])
        blocked += np.nansum(np.where(sched.blocked[:, :, i], np.maximum(extra, 0.0), 0.0), 1)
    return 1.0 - blocked / np.maximum(span, 1e-9)


def predict_what_if(data: PipelineData, change: dict, *, terms=None,
                    interval: tuple[float, float] = (0.25, 0.75),
                    first_load: np.ndarray | None = None, record_ns: float = 0.0,
                    arrivals: dict | None = None, recorder_cost: float = 0.0,
                    release_sample: dict | None = None, queue_rule: str = "little") -> dict:
    """One what-if with its uncertainty from the base trace's own spread: the prediction
    at the median loaded latency, and the interval spanned by the latency quantiles
    ``interval`` (per-unit and per-load variation of the base), each widened by one tick
    of the trace's timer (a latency is not known closer than that), and the predictions
    from each half of the SMs alone (the CTAs' own variation of work and latency: two
    halves of one kernel that disagree say the whole is not known closer); where a
    ``recorder_cost`` slowed the work (``recorder_slowdown``), also the prediction with the
    records' own time removed alone (how much of the cost is the work's is the model's
    reading, not a measurement). A change the model cannot make comes back as
    ``{"modelled": False, "reason": ...}`` instead of a number; so does one that hangs on
    a load latency the base never showed (its consumer never waited: with ``bounds``, the
    change at latency 0 and at the unblocked waits' bound). ``release_sample``,
    ``queue_rule``: as :func:`what_if` takes them."""
    unknown = set(change) - {"depth", "shared_by", "scale", "latency", "gap_change_ns"}
    if unknown:
        return {"modelled": False, "reason": f"no model term for {sorted(unknown)}"}
    resources = {r.name for r in data.spec.resources}
    for key in ("depth", "shared_by"):
        missing = set(change.get(key) or {}) - resources
        if missing:
            return {"modelled": False, "reason": f"{key} names resources the pipeline does "
                                                 f"not have: {sorted(missing)}"}
    terms = terms if terms is not None else infer_terms(data)
    tick = timer_step(data)
    # a consumes wait that never blocked in the base has no observed latency (the replay
    # gives it 0, the least it can be): only the unblocked waits' bound says how long it
    # can be, so the interval reaches the prediction at that bound
    named = set(change.get("latency") or {})
    probed = {ring for ring, sample in (arrivals or {}).items()
              if len(sample) >= MIN_LATENCY_SAMPLE}
    unobserved = {} if first_load is not None and len(first_load) >= MIN_LATENCY_SAMPLE else {
        r.tag: float(np.quantile(bound, interval[1])) + tick
        for i, r in enumerate(data.spec.regions)
        if "consumes" in r.relations and r.tag not in named
        and r.relations["consumes"].resource not in probed and never_blocked(data, terms, i)
        and (bound := steady_bound(data, terms, i)).size}
    # one record's own time is read through the timer, to within half a tick: the kernel
    # without recording lies between the replays that remove half a tick more and less
    # (removing more shortens a starved ring's round trip, as a shorter latency does: the
    # interval's ends take both)
    record_spread = tick / 2 if record_ns > 0 else 0.0
    try:
        with warnings.catch_warnings():  # a deadlocked ring replays nan events first
            warnings.simplefilter("ignore", RuntimeWarning)
            runs = []
            # the recorder's slowdown is fitted at the median latency and kept for the ends
            # a launch gap's change is read through the timer too: one tick each way
            for q, shift, removed in ((0.5, 0.0, 0.0), (interval[0], -tick, record_spread),
                                      (interval[1], tick, -record_spread)):
                moved = ({**change, "gap_change_ns": change["gap_change_ns"] + shift}
                         if change.get("gap_change_ns") else change)
                runs.append(what_if(data, terms=terms, loaded_latency=True, latency_quantile=q,
                                    latency_shift_ns=shift, first_load=first_load,
                                    record_ns=max(record_ns + removed, 0.0), arrivals=arrivals,
                                    recorder_cost=recorder_cost, release_sample=release_sample,
                                    queue_rule=queue_rule, **moved,
                                    slowdown=runs[0]["recorder_slowdown"] if runs else None))
            if runs[0]["recorder_slowdown"] != 1.0:
                # how much of the recorder's cost slows the work is the model's reading:
                # the interval reaches the kernel with only its records' own time removed
                runs.append(what_if(data, terms=terms, loaded_latency=True,
                                    first_load=first_load, record_ns=record_ns,
                                    arrivals=arrivals, release_sample=release_sample,
                                    queue_rule=queue_rule, **change))
            if unobserved:
                upper = {**change, "latency": {**(change.get("latency") or {}), **unobserved}}
                runs.append(what_if(data, terms=terms, loaded_latency=True,
                                    latency_quantile=interval[1], latency_shift_ns=tick,
                                    first_load=first_load,
                                    record_ns=max(record_ns - record_spread, 0.0),
                                    arrivals=arrivals, recorder_cost=recorder_cost,
                                    release_sample=release_sample, queue_rule=queue_rule,
                                    **upper,
                                    slowdown=runs[0]["recorder_slowdown"]))
    except ProfileBufferError as err:
        return {"modelled": False, "reason": str(err)}
    changes = [w["predicted_change"] for w in runs] + list(runs[0]["half_changes"])
    detail = {**runs[0], "latency_unobserved_bound_ns": unobserved}
    if unobserved:
        # the replay at latency 0 is the least the change can be, not a prediction: say so,
        # with the bounds the base does give
        bounds = (min(changes), max(changes))
        return {"modelled": False, "bounds": bounds, "detail": detail, "reason": (
            f"the base never waited on {', '.join(sorted(unobserved))}: their load latency "
            f"is not observed, only bounded; the change lies in [{bounds[0]:+.2%}, "
            f"{bounds[1]:+.2%}]")}
    return {"modelled": True, "predicted_change": changes[0],
            "interval": (min(changes), max(changes)), "detail": detail}


def latency_sensitivity(data: PipelineData, change: dict, *, arrivals: dict,
                        shift_ns: float | None = None, **what_if_options) -> float:
    """How far a what-if's predicted change moves for ``shift_ns`` (default: one tick of the
    trace's timer) more latency on every sampled load (``arrivals``): half the difference of
    :func:`what_if` with the loads that much slower and that much faster; the other
    keywords as :func:`what_if` takes them. The whole sampled latency moves, base and change
    alike (``what_if(latency_shift_ns=)``, the interval's tick, moves the queued part only,
    which a slower change scales down). A change that starves a ring hangs on its loads'
    latency under the change, which the base does not show: a starved GEMM ring's
    prediction moves by points per timer tick (``bench/results/whatif/README.md``), so such
    a prediction is no closer than the latency is known."""
    if not arrivals:
        raise ValueError("latency_sensitivity needs the base's sampled loads (arrivals)")
    step = timer_step(data) if shift_ns is None else float(shift_ns)
    if step <= 0:
        raise ValueError(f"shift_ns must be > 0, got {shift_ns!r}")

    def change_at(ns: float) -> float:
        return what_if(data, arrivals=shifted_arrivals(arrivals, ns), **what_if_options,
                       **change)["predicted_change"]

    return (change_at(step) - change_at(-step)) / 2


# ---------------------------------------------------------------------------- report
def pool_predictions(preds: list[dict], *, widen: bool = False) -> dict:
    """One prediction from several of :func:`predict_what_if`'s for the same change, each
    from another draw of the base's memory state (the probed launches that ran like the
    base: ``load_arrivals.probed_launches_like``): the median change, kernel time and latency,
    the interval the median of their bounds, every change kept (``changes``). A change
    that one of them cannot model stays unmodelled. ``widen``: the interval reaches every
    one's own change too, where each comes from another traced launch of the base (a
    launch's trace carries its own noise: one change read from two traced launches of the
    same base can differ by many points)."""
    if not preds:
        raise ValueError("no predictions to pool")
    if len(preds) == 1 or not all(p["modelled"] for p in preds):
        return next((p for p in preds if not p["modelled"]), preds[0])
    median = lambda values: float(np.median(list(values)))  # noqa: E731
    changes = [p["predicted_change"] for p in preds]
    change = median(changes)
    detail = dict(preds[0]["detail"])
    detail["predicted_kernel_ns"] = detail["kernel_ns"] * (1.0 + change)
    detail["predicted_change"] = change
    detail["latency_ns"] = {tag: median(p["detail"]["latency_ns"][tag] for p in preds)
                            for tag in detail["latency_ns"]}
    lows, highs = zip(*(p["interval"] for p in preds))
    low, high = median(lows), median(highs)
    if widen:
        low, high = min(low, min(changes)), max(high, max(changes))
    return {"modelled": True, "predicted_change": change, "interval": (low, high),
            "detail": detail, "changes": changes}
