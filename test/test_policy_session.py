"""The policy session (rclpy-free) with a tiny random-weight model: the rules every user of it gets.

Messages are the ones the sim node publishes (``vla_ros.ros.sim_msgs``), fed on simulated time. Checked:
the chunk is stamped with the newest observation, cut to the horizon and smoothed as configured; no chunk
without a recent camera frame (a paused camera) or a recent joint state; a new episode restarts the window
and refuses older stamps; one restart when the announcement and the clock jump both come; counts per source
add up (received = accepted + rejected) and losses show in the stamps; frames too large are refused from
their header; instructions with control characters are refused; one throttled log stream per reason;
temporal ensembling averages the decodes, starts over with each episode and follows a run-time change.
"""

import dataclasses

import cv2
import numpy as np
import pytest
import torch
from sensor_msgs.msg import CompressedImage, Image, JointState

from vla_ros.chunks import COMMANDED_JOINTS, TemporalEnsemble, smooth_positions
from vla_ros.model.config import tiny_config
from vla_ros.model.model import VLATransformer
from vla_ros.model.runtime import StreamingPolicy
from vla_ros.policy import PolicySession, SessionConfig, stream_config
from vla_ros.policy.intake import StampGaps
from vla_ros.ros.rejections import ReasonLog
from vla_ros.ros.time import time_msg_from_ns
from vla_ros.tokens import Kind, StreamConfig, TokenizerConfig, TokenStream
from vla_ros.tokens.convert import (
    TokenError,
    check_image_size,
    compressed_image_size,
    instruction_text,
    rgb_from_compressed_msg,
)
from vla_ros.tokens.text import shared_encoder

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

NS = 1_000_000_000
MS = 1_000_000
NAMES = list(COMMANDED_JOINTS) + ["right_finger_joint"]


def joints(t_ns: int, q: float = 0.1) -> JointState:
    msg = JointState(name=NAMES, position=[q] * 8, velocity=[0.0] * 8, effort=[0.0] * 8)
    msg.header.stamp = time_msg_from_ns(t_ns)
    return msg


def frame(t_ns: int, width: int = 32, height: int = 24, encoding: str = "rgb8", value: int = 90) -> Image:
    msg = Image(
        height=height, width=width, encoding=encoding, step=width * 3, data=bytes([value % 256]) * (width * height * 3)
    )
    msg.header.stamp = time_msg_from_ns(t_ns)
    return msg


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return VLATransformer(
        tiny_config(chunk_length=8, chunk_rate_hz=20.0, window_seconds=0.3, max_lateness_s=0.1)
    ).eval()


def make_session(model, **config) -> PolicySession:
    torch.set_num_threads(1)
    session = PolicySession(
        StreamingPolicy.from_model(model, device="cpu"),
        shared_encoder(model.config.max_text_tokens),
        SessionConfig(**config),
    )
    session.set_instruction("pick up the red cup", 0)
    return session


def feed(
    session,
    t0_ns: int,
    t1_ns: int,
    camera: bool = True,
    frame_delay_ns: int = 20 * MS,
    tick_every_ns: int = 100 * MS,
    wrist: bool = False,
):
    """Joint states at 100 Hz and frames at 30 Hz (delivered ``frame_delay_ns`` late) over [t0, t1), ticking
    every ``tick_every_ns``; the tick results in order, with the time of each tick. ``wrist``: the same
    frames again from ``/wrist_camera/image_raw``."""
    results, frames = [], []
    t = t0_ns
    while t < t1_ns:
        if (t // (10 * MS)) * 10 * MS == t:
            session.add_message("sensor_msgs/msg/JointState", joints(t), t, "/joint_states")
        if camera and t % (100 * MS // 3) < MS:
            frames.append((t + frame_delay_ns, frame(t)))
        while frames and frames[0][0] <= t:
            msg = frames.pop(0)[1]
            session.add_message("sensor_msgs/msg/Image", msg, t, "/camera/image_raw")
            if wrist:
                session.add_message("sensor_msgs/msg/Image", msg, t, "/wrist_camera/image_raw")
        if t % tick_every_ns == 0:
            results.append((t, session.tick(t)))
        t += MS
    return results


def test_the_stream_window_is_the_models_window_plus_lateness(model):
    cfg = stream_config(model.config)
    assert (cfg.window_s, cfg.lateness_s) == (pytest.approx(0.4), pytest.approx(0.1))
    assert make_session(model).stream.config == cfg


def test_chunks_are_stamped_with_the_newest_observation_cut_and_smoothed(model):
    session = make_session(model, publish_horizon=5, chunk_smoothing_degree=2)
    results = feed(session, 0, NS)
    chunks = [(t, r.chunk) for t, r in results if r.chunk is not None]
    assert len(chunks) >= 8
    for t, chunk in chunks:
        newest = max(o.stamp_ns for o in session.policy.raw_observations()) if t == chunks[-1][0] else None
        assert chunk.stamp_ns <= t and t - chunk.stamp_ns < 20 * MS  # the newest joint state, not an old frame
        assert chunk.positions.shape == (5, 7) and chunk.joint_names == COMMANDED_JOINTS
        np.testing.assert_allclose(chunk.time_from_start_s, (np.arange(5) + 1) / 20.0)
        if newest is not None:
            assert chunk.stamp_ns == newest
    # the published points are the first 5 of the model's 8, after a degree-2 fit over all 8
    session2 = make_session(model, chunk_smoothing_degree=0)
    raw = [r.chunk for _, r in feed(session2, 0, NS) if r.chunk is not None][-1]
    np.testing.assert_allclose(
        chunks[-1][1].positions, smooth_positions(raw.time_from_start_s, raw.positions, 2)[:5], atol=1e-6
    )


def test_temporal_ensembling_averages_the_decoded_plans_and_starts_over_with_each_episode(model):
    """``temporal_ensemble_s``: each published chunk is the ensemble of the decodes so far (the same decodes
    a session without it publishes), and a new episode's first chunk is its own decode again."""
    plain = make_session(model, chunk_smoothing_degree=0)
    averaged = make_session(model, chunk_smoothing_degree=0, temporal_ensemble_s=0.2)
    for t0, t1 in ((0, NS), (NS + 10 * MS, 2 * NS)):
        if t0:
            assert plain.begin_episode(NS + 5 * MS) and averaged.begin_episode(NS + 5 * MS)
        raw = [r.chunk for _, r in feed(plain, t0, t1) if r.chunk is not None]
        out = [r.chunk for _, r in feed(averaged, t0, t1) if r.chunk is not None]
        assert len(raw) == len(out) >= 5 and [c.stamp_ns for c in raw] == [c.stamp_ns for c in out]
        reference = TemporalEnsemble(0.2)
        expected = [reference(c.stamp_ns, c.time_from_start_s, c.positions) for c in raw]
        np.testing.assert_array_equal(out[0].positions, raw[0].positions)  # nothing earlier in this episode
        for got, want in zip(out, expected):
            np.testing.assert_allclose(got.positions, want, rtol=0, atol=1e-9)
        assert max(np.abs(o.positions - r.positions).max() for o, r in zip(out, raw)) > 1e-4  # it did average
    averaged.config = dataclasses.replace(averaged.config, temporal_ensemble_s=0.0)  # the node's run-time change
    raw = [r.chunk for _, r in feed(plain, 2 * NS, 2 * NS + 300 * MS) if r.chunk is not None]
    out = [r.chunk for _, r in feed(averaged, 2 * NS, 2 * NS + 300 * MS) if r.chunk is not None]
    assert len(raw) == len(out) >= 2
    for got, want in zip(out, raw):
        np.testing.assert_array_equal(got.positions, want.positions)
    with pytest.raises(ValueError, match="temporal_ensemble_s"):
        SessionConfig(temporal_ensemble_s=-0.1)


class NonFiniteOnce:
    """The real streaming policy, whose ``select_action`` returns NaN targets once, on call ``bad``."""

    def __init__(self, policy, bad: int) -> None:
        self.policy, self.bad, self.calls = policy, bad, 0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def select_action(self, observations):
        chunk = self.policy.select_action(observations)
        self.calls += 1
        return dataclasses.replace(chunk, positions=chunk.positions * np.nan) if self.calls == self.bad else chunk


def test_a_tick_without_a_chunk_starts_the_average_over(model):
    """A non-finite decode is not published and not averaged into later chunks; after it (as after any tick
    without a chunk: a paused camera, a stale state) the next chunk is its own decode again."""
    plain = make_session(model, chunk_smoothing_degree=0)
    averaged = make_session(model, chunk_smoothing_degree=0, temporal_ensemble_s=0.4)
    averaged.policy = NonFiniteOnce(averaged.policy, bad=4)
    raw = [r for _, r in feed(plain, 0, NS)]
    out = [r for _, r in feed(averaged, 0, NS)]
    decoded = [i for i, r in enumerate(raw) if r.chunk is not None]
    bad = decoded[3]
    assert (
        out[bad].chunk is None and out[bad].skip == "non_finite_output" and averaged.skipped["non_finite_output"] == 1
    )
    after = [i for i in decoded if i > bad]
    assert len(after) >= 3
    np.testing.assert_array_equal(
        out[after[0]].chunk.positions, raw[after[0]].chunk.positions
    )  # nothing older averaged in
    reference = TemporalEnsemble(0.4)
    for i in after:
        want = reference(raw[i].chunk.stamp_ns, raw[i].chunk.time_from_start_s, raw[i].chunk.positions)
        assert np.all(np.isfinite(out[i].chunk.positions))
        np.testing.assert_allclose(out[i].chunk.positions, want, rtol=0, atol=1e-9)


def test_no_chunk_while_the_camera_is_paused_though_joint_states_keep_coming(model):
    session = make_session(model, max_image_age_s=0.2)
    feed(session, 0, NS)
    paused = feed(session, NS, 2 * NS, camera=False)  # joint states go on at 100 Hz, no frame
    skips = [(t, r.skip) for t, r in paused]
    moving = [t for t, r in paused if r.chunk is not None]
    assert moving and max(moving) <= NS + 200 * MS  # chunks stop once the newest frame is 0.2 s old
    assert {s for t, s in skips if t > NS + 400 * MS} == {"no_image"}  # the old frames left the window
    assert "stale_image" in {s for _, s in skips}
    resumed = feed(session, 2 * NS, 2 * NS + 300 * MS)
    assert any(r.chunk is not None for _, r in resumed)


def test_a_wrist_camera_model_needs_both_cameras_and_counts_each_apart():
    """A model with a main and a wrist camera: frames from each topic are that camera's (each its own
    figures); with the wrist camera silent there is no chunk and the reason names it; a frame from a topic
    that is neither camera is refused as ``unknown_camera``, never taken for the main view."""
    torch.manual_seed(0)
    model = VLATransformer(
        tiny_config(
            chunk_length=8,
            chunk_rate_hz=20.0,
            window_seconds=0.3,
            max_lateness_s=0.1,
            cameras=("camera", "wrist_camera"),
        )
    ).eval()
    session = make_session(model, max_image_age_s=0.2)
    assert session.camera_topics == ("/camera/image_raw", "/wrist_camera/image_raw")
    both = feed(session, 0, NS, wrist=True)
    assert sum(r.chunk is not None for _, r in both) >= 8
    cameras = [o.camera for o in session.window() if o.kind == Kind.IMAGE]
    assert cameras.count(0) == cameras.count(1) > 0
    session.add_message("sensor_msgs/msg/Image", frame(NS), NS, "/side_camera/image_raw")
    values = session.source_values()
    assert values["image.accepted"] == values["image_wrist_camera.accepted"] == 30
    assert values["image.rejected.unknown_camera"] == 1
    blind = feed(session, NS, 2 * NS)  # the main camera goes on, the wrist camera is silent
    late = [r for t, r in blind if t > NS + 300 * MS]
    assert late and all(r.chunk is None and r.skip in ("stale_image", "no_image") for r in late)
    assert all("wrist_camera" in r.detail for r in late)
    session.set_camera_topics(["/camera/image_raw", "/hand/image_raw"])  # a node with its own topic names
    assert any(r.chunk is not None for _, r in feed_topics(session, 2 * NS, 2 * NS + 400 * MS, "/hand/image_raw"))
    with pytest.raises(ValueError, match="need 2 distinct image topics"):
        session.set_camera_topics(["/camera/image_raw"])


def test_a_15_hz_model_takes_every_other_frame_of_each_30_hz_camera_and_says_so():
    """``max_frame_rate_hz`` 15 with two 30 Hz cameras: each camera's accepted frames are half of what came,
    the rest counted as thinned, neither rejected nor dropped; the cache is sized for 15 Hz and chunks
    come as with every frame."""
    torch.manual_seed(0)
    cfg = tiny_config(
        chunk_length=8,
        chunk_rate_hz=20.0,
        window_seconds=0.3,
        max_lateness_s=0.1,
        cameras=("camera", "wrist_camera"),
        max_frame_rate_hz=15.0,
    )
    assert cfg.min_frame_interval_s == pytest.approx(0.05) and cfg.frame_rate_hz == 15.0
    assert cfg.cache_capacity < cfg.replace(max_frame_rate_hz=0.0).cache_capacity
    session = make_session(VLATransformer(cfg).eval(), max_image_age_s=0.2)
    assert session.stream.config.min_frame_interval_s == pytest.approx(0.05)
    results = feed(session, 0, NS, wrist=True)
    assert sum(r.chunk is not None for _, r in results) >= 8
    values = session.source_values()
    for name in ("image", "image_wrist_camera"):
        assert values[f"{name}.received"] == 30
        assert values[f"{name}.accepted"] == values[f"{name}.thinned"] == 15
        assert values[f"{name}.rejected"] == 0 and values[f"{name}.dropped_pct"] == 0.0
    stamps = {c: [o.stamp_ns for o in session.window() if o.kind == Kind.IMAGE and o.camera == c] for c in (0, 1)}
    assert stamps[0] == stamps[1] and all(b - a > 50 * MS for a, b in zip(stamps[0], stamps[0][1:]))
    with pytest.raises(ValueError, match="max_frame_rate_hz"):
        tiny_config(max_frame_rate_hz=-1.0)


def feed_topics(session, t0_ns, t1_ns, wrist_topic):
    """``feed`` with both cameras, the second on ``wrist_topic``."""
    results = []
    for t in range(t0_ns, t1_ns, 10 * MS):
        session.add_message("sensor_msgs/msg/JointState", joints(t), t, "/joint_states")
        if t % (100 * MS) == 0:
            session.add_message("sensor_msgs/msg/Image", frame(t), t, "/camera/image_raw")
            session.add_message("sensor_msgs/msg/Image", frame(t), t, wrist_topic)
            results.append((t, session.tick(t)))
    return results


def test_no_chunk_without_a_recent_joint_state(model):
    session = make_session(model, max_state_age_s=0.05)
    feed(session, 0, NS)
    r = session.tick(NS + 100 * MS)  # nothing for 100 ms
    assert r.chunk is None and r.skip == "stale_joint_state" and "0.1" in r.detail


def test_a_new_episode_restarts_the_window_and_refuses_older_stamps(model):
    session = make_session(model)
    feed(session, 0, NS)
    old = session.policy.raw_observations()
    assert old and session.begin_episode(NS + 5 * MS)
    assert session.window() == []
    obs, reason = session.add_message("sensor_msgs/msg/JointState", joints(NS - 10 * MS), NS + 6 * MS, "/joint_states")
    assert obs is None and reason.startswith("before_reset")
    feed(session, NS + 10 * MS, NS + 300 * MS)
    assert session.policy.raw_observations()[0].stamp_ns >= NS + 5 * MS  # the cache forgot the old episode
    assert session.sources["joint_states"].rejected["before_reset"] == 1
    assert not session.begin_episode(NS + 5 * MS)  # the same announcement again changes nothing


def test_an_announced_restart_of_the_clock_is_one_reset_in_either_order():
    z = lambda: np.zeros(2, np.float32)  # noqa: E731
    for announcement_first in (True, False):
        s = TokenStream(stream=StreamConfig(window_s=0.5, lateness_s=0.05, clock_jump_s=1.0))
        for i in range(300):  # 3 s from t = 10 s
            t = 10 * NS + i * 10 * MS
            s.add(Kind.STATE, "/j", t, z, now_ns=t)
        generation = s.generation
        if announcement_first:
            assert s.begin_episode(0)  # reset_clock_on_reset: the new episode starts at 0
        for i in range(5):  # the new episode's first messages, the receive clock back at 0
            assert s.add(Kind.STATE, "/j", i * 10 * MS, z, now_ns=i * 10 * MS) is not None
        if not announcement_first:
            assert not s.begin_episode(0)  # the jump already restarted the window inside this episode
        assert s.generation == generation + 1, announcement_first
        assert [o.stamp_ns for o in s.window()] == [i * 10 * MS for i in range(5)]
        assert s.counts_add_up()
    # a later jump nobody announced still clears the window, and lifts the floor of the old timeline
    s = TokenStream(stream=StreamConfig(window_s=0.5, lateness_s=0.05, clock_jump_s=1.0))
    s.begin_episode(5 * NS)
    for i in range(200):
        s.add(Kind.STATE, "/j", 5 * NS + i * 10 * MS, z, now_ns=5 * NS + i * 10 * MS)
    assert s.add(Kind.STATE, "/j", 0, z, now_ns=0) is not None and s.stats.clock_jumps == 1 and len(s) == 1


def test_counts_per_source_add_up_and_losses_show_in_the_stamps(model):
    session = make_session(model)
    dropped = {30, 31, 32, 77}  # joint states 30-32 and 77 never arrive (a DDS queue that overflowed)
    for i in range(120):
        if i not in dropped:
            session.add_message(
                "sensor_msgs/msg/JointState", joints(i * 10 * MS or 1), i * 10 * MS, "/joint_states"
            )  # 0: unstamped, refused
    session.tick(1195 * MS)  # the policy takes everything up to 1.19 s
    session.add_message("sensor_msgs/msg/JointState", joints(500 * MS), 1200 * MS, "/joint_states")  # late
    session.add_message("sensor_msgs/msg/Image", frame(1190 * MS, encoding="yuv422"), 1200 * MS, "/camera/image_raw")
    values = session.source_values()
    assert values["joint_states.received"] == 117 and values["joint_states.accepted"] == 116
    assert values["joint_states.lost"] == 4 and values["joint_states.rejected.late"] == 1
    assert values["joint_states.dropped"] == 5 and values["joint_states.dropped_pct"] == pytest.approx(
        100 * 5 / 121, abs=1e-3
    )
    assert values["image.rejected.unknown_encoding"] == 1 and values["image.accepted"] == 0
    assert values["joint_states.period_ms"] == pytest.approx(10.0)


def test_stamp_gaps_learn_the_period_and_tell_losses_from_outages():
    gaps = StampGaps(learn=8, outage_periods=50)
    stamps = [i * 33_333_333 for i in range(40)]
    stamps = stamps[:20] + stamps[22:]  # two frames lost
    stamps += [stamps[-1] + 3 * NS]  # a camera paused for 3 s: an outage, not 90 losses
    for s in stamps:
        gaps.add(s)
    assert (gaps.lost, gaps.outages, gaps.period_ns) == (2, 1, 33_333_333)


def test_a_frame_too_large_is_refused_from_its_header():
    config = TokenizerConfig(max_input_pixels=64 * 48)
    with pytest.raises(TokenError) as err:
        check_image_size(640, 480, config)
    assert err.value.code == "image_too_large"
    stream = TokenStream(config, StreamConfig())
    assert stream.add_message("sensor_msgs/msg/Image", frame(0, 640, 480), 0, "/cam") is None
    assert stream.last_rejection_code == "image_too_large"
    assert stream.add_message("sensor_msgs/msg/Image", frame(10 * MS, 64, 48), 10 * MS, "/cam") is not None
    # compressed: the size is read from the PNG/JPEG header; an oversized frame is never decoded
    big = np.full((480, 640, 3), 60, np.uint8)
    for ext in (".png", ".jpg"):
        ok, data = cv2.imencode(ext, big)
        assert ok and compressed_image_size(data.reshape(-1)) == (640, 480)
        msg = CompressedImage(format=ext[1:], data=data.tobytes())
        with pytest.raises(TokenError) as err:
            rgb_from_compressed_msg(msg, config)
        assert err.value.code == "image_too_large"
        assert rgb_from_compressed_msg(msg).shape == (480, 640, 3)  # without a limit it decodes
    with pytest.raises(TokenError) as err:
        compressed_image_size(np.frombuffer(b"\xff\xd8\xff\xe0\x00\x10JFIF", np.uint8))
    assert err.value.code == "corrupt_image"


def test_an_instruction_with_a_control_character_is_refused_not_cut():
    with pytest.raises(TokenError) as err:
        instruction_text("pick up\x00 the red cup")
    assert err.value.code == "control_character" and "U+0000" in str(err.value)
    assert instruction_text("pick up\tthe  red cup\n") == "pick up the red cup"  # whitespace is normalised


def test_each_reason_has_its_own_log_throttle():
    """The policy node's refusals for timing: logged on one throttle per reason, counted by the session only."""
    lines, now = [], [0.0]
    log = ReasonLog(lines.append, period_s=2.0, clock=lambda: now[0])
    log.reject("/joint_states", "late", "0", log_only=True)
    for i in range(1, 10):
        now[0] = 0.1 * i
        log.reject("/joint_states", "late", str(i), log_only=True)
    assert lines == ["rejected /joint_states: late: 0"]
    now[0] = 0.5
    log.reject(
        "/camera/image_raw", "corrupt_image", "x", log_only=True
    )  # a rare reason is not hidden by a frequent one
    assert lines[-1] == "rejected /camera/image_raw: corrupt_image: x"
    now[0] = 2.5
    log.reject("/joint_states", "late", "10", log_only=True)
    assert (
        lines[-1] == "rejected /joint_states: late: 10 (and 9 more like it since the last report)"
    )  # the held-back count
    assert not log.counter and not log.recent.recent(now[0])  # log only: neither counted nor held for a status


def test_frames_newer_than_every_joint_state_wait_so_lagging_joint_states_are_not_late(model):
    """A busy executor takes one message per topic per round: joint states (100 Hz) fall behind frames
    (30 Hz). Frames newer than the newest joint state wait for the next tick, so nothing is late."""
    session = make_session(model)
    lag = 250 * MS  # joint states arrive 250 ms behind frames of the same instant (lateness is 100 ms)
    events = [
        (t + lag, "sensor_msgs/msg/JointState", joints(t or 1)) for t in range(0, 2 * NS, 10 * MS)
    ]  # 0: unstamped
    events += [(t, "sensor_msgs/msg/Image", frame(t)) for t in range(0, 2 * NS, NS // 30)]
    events.sort(key=lambda e: e[0])
    chunks, next_tick = [], 100 * MS
    for arrival, type_name, msg in events:
        while next_tick <= arrival:
            r = session.tick(next_tick)
            if r.chunk is not None:
                chunks.append((next_tick, r.chunk.stamp_ns))
            next_tick += 100 * MS
        session.add_message(
            type_name, msg, arrival, "/joint_states" if type_name.endswith("JointState") else "/camera/image_raw"
        )
    values = session.source_values()
    assert values["joint_states.rejected"] == 0 and values["image.rejected"] == 0, values
    assert values["joint_states.unused"] == 0 and session.policy.total_dropped_late == 0
    assert len(chunks) >= 15
    assert all(0 <= now - stamp <= lag + 10 * MS for now, stamp in chunks)  # anchored at the newest joint state
