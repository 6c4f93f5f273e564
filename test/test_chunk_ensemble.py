"""Temporal ensembling of overlapping chunks (``chunks.TemporalEnsemble``), and the policy session using it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_ros.chunks import TemporalEnsemble

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NS = 1_000_000_000
T = np.arange(1, 17) * 0.05  # 16 points at 20 Hz, as the shipped model
J = 3


def plan(stamp_s: float, path) -> np.ndarray:
    """(16, J) positions a chunk stamped at ``stamp_s`` takes from ``path`` (a function of absolute time)."""
    return np.stack([path(stamp_s + t) for t in T])


def test_the_first_chunk_passes_unchanged_and_the_next_is_the_weighted_mean_where_covered():
    ens = TemporalEnsemble(0.2)
    first = np.random.default_rng(0).normal(size=(16, J))
    assert np.array_equal(ens(0, T, first), first)
    second = np.random.default_rng(1).normal(size=(16, J))
    out = ens(NS // 10, T, second)  # 0.1 s later: its first 14 points fall inside the first chunk's span
    w = np.exp(-0.1 / 0.2)
    at = T + 0.1
    covered = at <= T[-1] + 1e-12
    expected = second.copy()
    for j in range(J):
        expected[covered, j] = (second[covered, j] + w * np.interp(at[covered], T, first[:, j])) / (1 + w)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)
    assert covered.sum() == 14 and np.array_equal(
        out[~covered], second[~covered]
    )  # beyond the old plan: the newest alone


def test_plans_that_agree_are_left_as_they_are():
    ens = TemporalEnsemble(0.3)
    path = lambda t: np.array([0.2 * t, -0.5 * t + 0.1, 0.3])  # noqa: E731  (linear: interpolation is exact)
    for k in range(10):
        out = ens(k * NS // 10, T, plan(k * 0.1, path))
    np.testing.assert_allclose(out, plan(0.9, path), rtol=0, atol=1e-12)


def test_independent_decode_errors_shrink_and_the_newest_plan_weighs_most():
    rng = np.random.default_rng(0)
    path = lambda t: np.array([np.sin(t), 0.5 * np.cos(2 * t), 0.1 * t])  # noqa: E731
    ens = TemporalEnsemble(0.3)
    raw_err, out_err = [], []
    for k in range(40):
        truth = plan(k * 0.1, path)
        noisy = truth + rng.normal(0.0, 0.01, truth.shape)
        out = ens(k * NS // 10, T, noisy)
        if k >= 10:
            raw_err.append(noisy[:8] - truth[:8])
            out_err.append(out[:8] - truth[:8])
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))  # noqa: E731
    assert rms(out_err) < 0.7 * rms(raw_err)
    # a sudden change of plan: the output moves most of the way at once, the newest plan weighing 1 against
    # the earlier ones' exp(-a / 0.3) each
    jump = ens(40 * NS // 10, T, plan(4.0, path) + 1.0)[0] - plan(4.0, path)[0]
    weights = np.exp(-np.arange(0, 8) * 0.1 / 0.3)
    assert np.all(np.abs(jump - 1.0 / weights.sum()) < 0.05)


def test_time_going_back_forgets_and_old_plans_fade_out():
    ens = TemporalEnsemble(0.1)
    a, b = np.zeros((16, J)), np.ones((16, J))
    ens(5 * NS, T, a)
    assert np.array_equal(ens(4 * NS, T, b), b)  # an earlier stamp: a new episode or a clock jump
    ens2 = TemporalEnsemble(0.1)  # plans older than the weight floor (0.01: 0.46 s at 0.1 s) are not averaged in
    ens2(0, T, a)
    assert np.array_equal(ens2(NS // 2, T, b), b)
    with pytest.raises(ValueError, match="time_constant_s"):
        TemporalEnsemble(0.0)
    with pytest.raises(ValueError, match="time_constant_s"):
        TemporalEnsemble(float("nan"))


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    tau=st.floats(0.01, 5.0),
    gaps_ms=st.lists(st.integers(0, 900), min_size=1, max_size=12),
)
def test_an_averaged_point_never_leaves_the_range_of_the_plans_for_its_instant(seed, tau, gaps_ms):
    """Whatever the timing: each output point lies between the smallest and largest of the targets the
    covering plans give for its instant (the newest decode's and the earlier ones', interpolated), per joint.
    Averaging cannot make a target no decode asked for, so a chunk inside the limits stays inside."""
    rng = np.random.default_rng(seed)
    ens = TemporalEnsemble(tau)
    past, stamp = [], 0
    for gap in [0] + gaps_ms:
        stamp += gap * 1_000_000
        positions = rng.uniform(-2.0, 2.0, (16, J))
        out = ens(stamp, T, positions)
        low, high = positions.copy(), positions.copy()
        for old_stamp, old_p in past:
            at = T + (stamp - old_stamp) * 1e-9
            covered = (at >= T[0]) & (at <= T[-1])
            for j in range(J):
                values = np.interp(at[covered], T, old_p[:, j])
                low[covered, j] = np.minimum(low[covered, j], values)
                high[covered, j] = np.maximum(high[covered, j], values)
        assert np.all(out >= low - 1e-12) and np.all(out <= high + 1e-12)
        assert np.all(np.isfinite(out))
        past.append((stamp, positions))
