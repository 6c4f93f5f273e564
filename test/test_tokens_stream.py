"""The token window's time rules, as properties over random 30 Hz + 100 Hz streams, and its time base."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vla_ros.tokens import Kind, StreamConfig, TokenStream

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NS = 1_000_000_000
CAM, JOINTS = "/camera/image_raw", "/joint_states"


def make_events(seed, seconds, max_delay_s, drop_p, dup_p, burst_p, future_p, base_ns=0):
    """(arrival_ns, stamp_ns, kind, source) for a 30 Hz camera and 100 Hz joints with stamp jitter,
    random delivery delays, bursts (a run of messages held back and delivered together), drops,
    duplicates and a few stamps from a clock that runs ahead. Sorted by arrival."""
    rng = np.random.default_rng(seed)
    events = []
    for rate, kind, source, jitter_s in ((30, Kind.IMAGE, CAM, 0.003), (100, Kind.STATE, JOINTS, 0.001)):
        n = int(seconds * rate)
        stamps = base_ns + np.round((np.arange(n) / rate + rng.uniform(0, jitter_s, n)) * NS).astype(np.int64)
        delays = rng.uniform(0, max_delay_s, n)
        burst_until = 0.0
        for i, stamp in enumerate(stamps):
            if rng.random() < drop_p:
                continue
            t = (stamp - base_ns) / NS
            if rng.random() < burst_p:  # hold this and what follows until a release time
                burst_until = t + rng.uniform(0.0, 1.5 * max_delay_s + 0.01)
            arrival_s = max(t + delays[i], burst_until if t < burst_until else 0.0)
            if rng.random() < future_p:
                stamp = stamp + NS  # a driver clock one second ahead
            arrival = base_ns + int(arrival_s * NS)
            events.append((arrival, int(stamp), kind, source))
            if rng.random() < dup_p:
                events.append((arrival + int(rng.uniform(0, 0.02) * NS), int(stamp), kind, source))
    events.sort(key=lambda e: e[0])
    return events


def reference(events, config: StreamConfig, drain_every=7):
    """A naive model of the rules: accept unless future, late or duplicate; window = accepted within W.
    Late is measured from the newest stamp a consumer drained (every ``drain_every`` messages, as ``feed``
    does), before the first drain from the newest accepted."""
    newest, consumed, accepted, keys, pending, rejected = None, None, [], set(), [], {}
    window_ns = round(config.window_s * NS)
    for i, (arrival, stamp, kind, source) in enumerate(events):
        key = (stamp, int(kind), source)
        reference_ns = consumed if consumed is not None else newest
        if stamp > arrival + config.max_future_s * NS:
            code = "future_stamp"
        elif reference_ns is not None and stamp < reference_ns - round(config.lateness_s * NS):
            code = "late"
        elif key in keys:
            code = "duplicate"
        else:
            code = None
            accepted.append(key)
            pending.append(key)
            keys.add(key)
            newest = stamp if newest is None else max(newest, stamp)
        if code:
            rejected[code] = rejected.get(code, 0) + 1
        if i % drain_every == 0:
            drained = [k for k in pending if k[0] >= newest - window_ns] if newest is not None else []
            if drained:
                consumed = max(consumed or drained[0][0], max(k[0] for k in drained))
            pending = []
    cutoff = newest - window_ns
    return sorted(k for k in accepted if k[0] >= cutoff), rejected


def feed(stream, events, drain_every=7):
    drained = []
    for i, (arrival, stamp, kind, source) in enumerate(events):
        size = 4 if kind == Kind.IMAGE else 2
        stream.add(kind, source, stamp, lambda s=stamp, n=size: np.full(n, s % 1000, np.float32), now_ns=arrival)
        w = stream.window()
        if w:  # invariants after every message: sorted, nothing older than the window
            keys = [o.key for o in w]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
            assert w[0].stamp_ns >= stream.newest_ns - round(stream.config.window_s * NS)
        if i % drain_every == 0:
            drained.extend(stream.drain())
    drained.extend(stream.drain())
    return drained


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31),
    seconds=st.floats(0.5, 3.0),
    max_delay_s=st.floats(0.0, 0.25),
    drop_p=st.floats(0.0, 0.3),
    dup_p=st.floats(0.0, 0.2),
    burst_p=st.floats(0.0, 0.1),
    future_p=st.sampled_from([0.0, 0.02]),
    window_s=st.sampled_from([0.3, 0.5, 1.0]),
    lateness_s=st.sampled_from([0.0, 0.05, 0.1]),
)
def test_window_invariants_over_random_interleavings(
    seed, seconds, max_delay_s, drop_p, dup_p, burst_p, future_p, window_s, lateness_s
):
    config = StreamConfig(window_s=window_s, lateness_s=lateness_s, max_future_s=0.5)
    events = make_events(seed, seconds, max_delay_s, drop_p, dup_p, burst_p, future_p)
    stream = TokenStream(stream=config)
    drained = feed(stream, events)
    expected_window, expected_rejected = reference(events, config)
    assert [o.key for o in stream.window()] == expected_window
    assert dict(stream.stats.rejected) == expected_rejected
    assert stream.counts_add_up()
    assert stream.stats.received == len(events)
    # every accepted observation still in the window reached the consumer exactly once
    drained_keys = [o.key for o in drained]
    assert len(drained_keys) == len(set(drained_keys))
    assert set(expected_window) <= set(drained_keys)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31),
    seconds=st.floats(0.5, 2.0),
    drop_p=st.floats(0.0, 0.3),
    lateness_s=st.sampled_from([0.02, 0.05, 0.1]),
)
def test_nothing_is_lost_within_the_lateness_bound(seed, seconds, drop_p, lateness_s):
    """Delays (reordering) up to the lateness bound minus the stamp jitter: every delivered message is used."""
    config = StreamConfig(window_s=0.5, lateness_s=lateness_s)
    events = make_events(seed, seconds, lateness_s - 0.004, drop_p, 0.0, 0.0, 0.0)
    stream = TokenStream(stream=config)
    feed(stream, events)
    assert sum(stream.stats.rejected.values()) == 0
    assert sum(stream.stats.accepted.values()) == len(events)
    assert stream.stats.accepted["state"] == sum(1 for e in events if e[2] == Kind.STATE)


@pytest.mark.parametrize("base_s", [0, 1_700_000_000, 1_700_000_000 + 86_400])
def test_results_do_not_depend_on_when_ros_time_starts(base_s):
    config = StreamConfig(window_s=0.5, lateness_s=0.05)
    runs = {}
    for base in (0, base_s * NS):
        events = make_events(3, 2.0, 0.08, 0.1, 0.05, 0.05, 0.0, base_ns=base)
        stream = TokenStream(stream=config)
        feed(stream, events)
        runs[base] = stream
    a, b = runs[0], runs[base_s * NS]
    ta, tb = [o.t_s for o in a.window()], [o.t_s for o in b.window()]
    assert ta == tb  # exactly equal, not just close: times are integer differences from the epoch
    assert [o.stamp_ns - base_s * NS for o in b.window()] == [o.stamp_ns for o in a.window()]
    assert dict(a.stats.rejected) == dict(b.stats.rejected) and a.stats.as_dict() == b.stats.as_dict()
    assert all(np.array_equal(x.data, y.data) for x, y in zip(a.window(), b.window()))
    assert 0.45 < ta[-1] - ta[0] <= 0.5


def test_a_backwards_clock_jump_clears_the_window_and_is_reported():
    stream = TokenStream(stream=StreamConfig(window_s=0.5, lateness_s=0.05, clock_jump_s=1.0))
    for i in range(300):  # 3 s of joints at 100 Hz starting at t = 100 s
        t = 100 * NS + i * NS // 100
        assert stream.add(Kind.STATE, JOINTS, t, lambda: np.zeros(2, np.float32), now_ns=t) is not None
    generation, epoch = stream.generation, stream.epoch_ns
    before = len(stream)
    # simulator reset: /clock and stamps restart at 0
    obs = stream.add(Kind.STATE, JOINTS, 0, lambda: np.zeros(2, np.float32), now_ns=0)
    assert obs is not None and obs.t_s == 0.0
    assert stream.stats.clock_jumps == 1 and stream.generation == generation + 1
    assert stream.stats.cleared == before and len(stream) == 1 and stream.epoch_ns == 0 != epoch
    assert stream.drain() == [obs]
    assert stream.counts_add_up()
    # a small wobble of the receive clock is not a jump
    stream.add(Kind.STATE, JOINTS, 10 * NS // 1000, lambda: np.zeros(2, np.float32), now_ns=-NS // 100)
    assert stream.stats.clock_jumps == 1


def test_without_receive_times_a_far_older_stamp_is_the_jump():
    stream = TokenStream(stream=StreamConfig(window_s=0.5, lateness_s=0.05, clock_jump_s=1.0))
    for i in range(200):
        stream.add(Kind.STATE, JOINTS, 50 * NS + i * NS // 100, lambda: np.zeros(2, np.float32))
    stream.add(Kind.STATE, JOINTS, 51 * NS + NS // 2, lambda: np.zeros(2, np.float32))  # 0.49 s old: late, not a jump
    assert stream.stats.rejected["late"] == 1 and stream.stats.clock_jumps == 0
    stream.add(Kind.STATE, JOINTS, 0, lambda: np.zeros(2, np.float32))
    assert stream.stats.clock_jumps == 1 and len(stream) == 1


def test_future_duplicate_and_late_are_counted_separately():
    stream = TokenStream(stream=StreamConfig(window_s=1.0, lateness_s=0.1, max_future_s=0.5))
    z = lambda: np.zeros(2, np.float32)  # noqa: E731
    assert stream.add(Kind.STATE, JOINTS, 10 * NS, z, now_ns=10 * NS)
    assert stream.add(Kind.STATE, JOINTS, 11 * NS, z, now_ns=10 * NS) is None  # 1 s ahead of the clock
    assert stream.add(Kind.STATE, JOINTS, 10 * NS, z, now_ns=10 * NS) is None  # same stamp again
    assert stream.add(Kind.IMAGE, CAM, 10 * NS, z, now_ns=10 * NS)  # same stamp, other source: kept
    assert stream.add(Kind.STATE, JOINTS, 10 * NS - NS // 20, z, now_ns=10 * NS)  # 50 ms old: inserted in order
    assert stream.add(Kind.STATE, JOINTS, 10 * NS - NS // 5, z, now_ns=10 * NS) is None  # 200 ms old: late
    assert dict(stream.stats.rejected) == {"future_stamp": 1, "duplicate": 1, "late": 1}
    assert [o.key for o in stream.window()] == sorted(o.key for o in stream.window())
    assert stream.stats.reordered == 2 and stream.counts_add_up()  # the frame sorts before the same-stamp state


def test_a_late_frame_is_not_decoded():
    stream = TokenStream(stream=StreamConfig(window_s=1.0, lateness_s=0.1))
    stream.add(Kind.STATE, JOINTS, 5 * NS, lambda: np.zeros(2, np.float32))

    def explode():
        raise AssertionError("decoded a frame that was going to be dropped")

    assert stream.add(Kind.IMAGE, CAM, 4 * NS, explode) is None


def test_frames_are_thinned_per_camera_to_the_models_frame_rate():
    """A 15 Hz model (interval 0.75 / 15 = 50 ms) fed two 30 Hz cameras and 100 Hz joints takes every other
    frame of each camera, the same stamps on both, every joint state, and counts the rest as thinned
    (never decoded, not rejected); a late frame between two taken ones is thinned too, a 15 Hz camera passes
    whole."""
    wrist = "/wrist_camera/image_raw"
    stream = TokenStream(
        stream=StreamConfig(window_s=1.0, lateness_s=0.1, min_frame_interval_s=0.05), cameras={CAM: 0, wrist: 1}
    )
    period = NS // 30

    def explode():
        raise AssertionError("decoded a frame that was thinned")

    decoded = []

    def frame(stamp):
        decoded.append(stamp)
        return np.zeros(4, np.float32)

    events = [(10 * NS + i * period, src) for i in range(30) for src in (CAM, wrist)]
    events += [(10 * NS + i * NS // 100, JOINTS) for i in range(100)]
    for stamp, src in sorted(events, key=lambda e: e[0]):
        if src == JOINTS:
            assert stream.add(Kind.STATE, JOINTS, stamp, lambda: np.zeros(2, np.float32), now_ns=stamp)
            continue
        thin = (stamp - 10 * NS) // period % 2 == 1
        before = stream.stats.thinned
        got = stream.add(Kind.IMAGE, src, stamp, explode if thin else (lambda s=stamp: frame(s)), now_ns=stamp)
        assert (got is None) == thin, (stamp, src)
        assert stream.stats.thinned == before + thin  # counted as thinned, never as a rejection
        assert not stream.last_rejection_code
    frames = [o for o in stream.window() if o.kind == Kind.IMAGE]
    for camera in (0, 1):
        stamps = [o.stamp_ns for o in frames if o.camera == camera]
        assert stamps == [10 * NS + i * period for i in range(0, 30, 2)]
    assert stream.stats.thinned == 30 and not stream.stats.rejected and stream.counts_add_up()
    assert len(decoded) == 30  # 15 frames of each camera
    # a frame arriving late, between two kept ones, is thinned; one where a kept frame is missing is taken
    assert stream.add(Kind.IMAGE, CAM, 10 * NS + 27 * period, explode, now_ns=11 * NS) is None
    assert stream.stats.thinned == 31
    stream2 = TokenStream(stream=StreamConfig(window_s=1.0, lateness_s=0.1, min_frame_interval_s=0.05))
    for i in range(15):  # a camera at the model's rate loses nothing
        assert stream2.add(Kind.IMAGE, CAM, 10 * NS + i * NS // 15, lambda: np.zeros(4, np.float32), now_ns=11 * NS)
    assert stream2.stats.thinned == 0
    with pytest.raises(ValueError, match="min_frame_interval_s"):
        StreamConfig(min_frame_interval_s=-0.1)
