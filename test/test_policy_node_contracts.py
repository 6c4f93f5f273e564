"""policy_node's contracts against a probe that plays the robot (``sensor_feed``): it owns ``/clock`` and
decides which messages the node has received when a tick runs, so the node's chunks can be compared with
the in-process session's for the same messages.

Also: a paused camera stops the chunks and is reported at ERROR with the node's name; a model that cannot
load is refused with the reason and the running one stays; ``model=''`` is refused; the attention overlay
topic exists only while ``debug_attention`` is true; every rejection reason reaches the log; an episode
reset announcement restarts the window and later messages of the old episode are refused.
"""

import contextlib
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import REPO, stop
from sensor_feed import MS, SensorFeed, camera_frame, joint_state
from std_msgs.msg import Header, String

from vla_ros.model.config import tiny_config
from vla_ros.model.io import save_model
from vla_ros.model.model import VLATransformer
from vla_ros.params.policy import PARAMS, session_config_from_params
from vla_ros.params.spec import default_values
from vla_ros.policy import PolicySession
from vla_ros.ros.time import ns_from_time_msg, time_msg_from_ns
from vla_ros.tokens.text import shared_encoder

INSTRUCTION = "pick up the red cup"
# shape_chunks off: the in-process sessions these chunks are compared with do not shape, and the one test that
# shapes (the table lift) switches it on and off again.
PARAMS_SET = {
    "rate_hz": 10.0,
    "threads": 1,
    "diagnostics_period_s": 0.05,
    "max_image_age_s": 0.2,
    "source_timeout_s": 0.5,
    "shape_chunks": False,
}
FRAME_PERIOD_NS = 100 * MS // 3


def triangle(t_ns: int) -> float:
    """Every joint's position at ``t_ns``: up and down at 1 rad/s (or m/s) between 0 and 0.996, never a jump
    (once the node knows the robot's limits, the table-lift test's /robot_description, it refuses jumps)."""
    m = t_ns // MS % 1994
    return 0.001 * (m if m < 997 else 1994 - m)


def settled(values: dict | None) -> bool:
    """Whether every tick the node has started has finished when it reported: a tick ends in a chunk or in a
    skip it counts, so then ``ticks == chunks + skipped.*`` (a tick counts itself first)."""
    if values is None or "ticks" not in values:
        return False
    skipped = sum(int(v) for k, v in values.items() if k.startswith("skipped."))
    return int(values["ticks"]) == int(values["chunks"]) + skipped


class Player:
    """Plays the robot in steps of 100 ms of simulated time. A step publishes the joint states (100 Hz) and
    frames (30 Hz) stamped in (t, t + 100 ms] while /clock reads t + 50 ms, waits until the node has them,
    then moves /clock to t + 150 ms: the node's 10 Hz timer ticks once, on exactly those messages."""

    def __init__(self, feed: SensorFeed, t0_ns: int) -> None:
        self.feed, self.t = feed, t0_ns
        self.sent = {"joints": 0, "images": 0}
        self.wrist = None  # a publisher on /wrist_camera/image_raw: every frame goes out on it too
        self.frame = camera_frame  # stamp ns -> the camera's frame (a test may send frozen or relabelled ones)
        self.log = []  # (receive time, [(type, msg)]) per step, for an in-process replay

    def totals(self):
        v = self.feed.latest() or {}
        return int(v.get("joint_states.received", 0)), int(v.get("image.received", 0))

    def ticks(self) -> int:
        return int((self.feed.latest() or {}).get("ticks", -1))

    def report_after(self, ticks: int) -> dict:
        """The node's first report in which it has started more than ``ticks`` ticks and finished them all.
        Nothing else ticks it (the clock stands still until the next step), so later reports say the same."""
        done = lambda: self.ticks() > ticks and settled(self.feed.latest())  # noqa: E731
        assert self.feed.spin_until(done, 60), self.feed.latest()
        return self.feed.latest()

    def step(self, camera: bool = True):
        f, t = self.feed, self.t
        now = t + 50 * MS
        if f.clock_ns != now:  # the first step: the clock jumps from 0, the timer ticks once on nothing
            ticks = self.ticks()
            f.set_clock(now)
            self.report_after(ticks)
        batch = []
        first_frame = -(-(t + 1) // FRAME_PERIOD_NS)
        for k in range(1, 11):
            batch.append(("sensor_msgs/msg/JointState", joint_state(t + k * 10 * MS, q=triangle(t + k * 10 * MS))))
        if camera:
            for i in range(first_frame, (t + 100 * MS) // FRAME_PERIOD_NS + 1):
                batch.append(("sensor_msgs/msg/Image", self.frame(i * FRAME_PERIOD_NS)))
        for type_name, msg in batch:
            (f.pub_image if type_name.endswith("Image") else f.pub_joints).publish(msg)
            self.sent["images" if type_name.endswith("Image") else "joints"] += 1
            if self.wrist is not None and type_name.endswith("Image"):
                self.wrist.publish(msg)
        assert f.wait_received(self.sent["joints"], self.sent["images"]), (self.sent, f.latest())
        before, chunks = f.latest(), len(f.chunks)
        assert settled(before), before
        self.t = t + 100 * MS
        f.set_clock(self.t + 50 * MS)
        # The tick's end, in the node's own counters; then its chunk, if it made one, on the topic.
        after = self.report_after(int(before["ticks"]))
        assert int(after["ticks"]) == int(before["ticks"]) + 1, (before, after)  # one tick per step
        made = int(after["chunks"]) - int(before["chunks"])
        if made:
            assert f.spin_until(lambda: len(f.chunks) > chunks, 60), after
        assert len(f.chunks) == chunks + made, (len(f.chunks), chunks, after)
        self.log.append((now, batch))
        return f.chunks[-1][1] if made else None

    def new_episode(self) -> int:
        """Announce an episode starting at the current time; returns its start stamp."""
        start = self.t + 1 * MS
        self.feed.pub_reset.publish(Header(stamp=time_msg_from_ns(start), frame_id="7"))
        expected = f"{start * 1e-9:.9f}"
        assert self.feed.spin_until(lambda: (self.feed.latest() or {}).get("episode_start_s") == expected, 30)
        return start


@contextlib.contextmanager
def tiny_policy(tmp, probe: str, params: dict):
    """A policy_node on simulated time with a tiny untrained model (ONNX, the default backend) and
    ``params``, fed by a ``SensorFeed`` named ``probe``; up once it reports, the instruction published.
    Yields the feed (``proc``, ``folder``, ``log_path``, ``config`` and a ``Player`` at 1 s on it)."""
    torch.manual_seed(0)
    config = tiny_config(chunk_length=8, chunk_rate_hz=20.0, window_seconds=0.3, max_lateness_s=0.1)
    save_model(VLATransformer(config), tmp / "tiny", onnx=True)
    feed = SensorFeed(probe)
    log_path = tmp / "policy.log"
    log = open(log_path, "w")
    args = [
        sys.executable,
        "-m",
        "vla_ros.nodes.policy_node",
        "--ros-args",
        "-p",
        "use_sim_time:=true",
        "-p",
        f"model:={tmp / 'tiny'}",
    ]
    for name, value in params.items():
        args += ["-p", f"{name}:={value}"]
    proc = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    feed.proc, feed.folder, feed.log_path, feed.config = proc, tmp / "tiny", log_path, config
    # up when it reports (its clock still at 0: the 10 Hz timer's deadlines fall on multiples of 100 ms)
    assert feed.spin_until(lambda: feed.latest() is not None, 120), log_path.read_text()[-2000:]
    feed.pub_instruction.publish(String(data=INSTRUCTION))
    feed.player = Player(feed, 1000 * MS)
    yield feed
    code = stop(proc)
    feed.close()
    log.close()
    assert code == 0, log_path.read_text()[-3000:]


@pytest.fixture(scope="module")
def robot(tmp_path_factory):
    with tiny_policy(tmp_path_factory.mktemp("policy_contracts"), "contracts_probe", PARAMS_SET) as feed:
        yield feed


def node_and_session_chunks(robot, **params) -> list[tuple[np.ndarray, np.ndarray]]:
    """A new episode of 8 steps through the node, the same messages through an in-process session with the
    node's parameters (``params`` on top): (published, local) positions of every chunk, after checking both
    publish on the same steps with the same stamps."""
    player = robot.player
    player.new_episode()
    player.log.clear()
    node_chunks = [player.step() for _ in range(8)]
    assert sum(c is not None for c in node_chunks) >= 6, robot.latest()

    values = default_values(PARAMS) | PARAMS_SET | params
    session = PolicySession.from_pretrained(
        robot.folder, backend="onnx", threads=1, config=session_config_from_params(values)
    )
    session.set_instruction(INSTRUCTION, 0)
    pairs = []
    for (now, batch), node_chunk in zip(player.log, node_chunks):
        for type_name, msg in batch:
            session.add_message(
                type_name, msg, now, "/camera/image_raw" if type_name.endswith("Image") else "/joint_states"
            )
        local = session.tick(now + 100 * MS).chunk
        assert (local is None) == (node_chunk is None)
        if local is None:
            continue
        assert ns_from_time_msg(node_chunk.header.stamp) == local.stamp_ns
        pairs.append((np.array([p.positions for p in node_chunk.points]), local.positions))
    return pairs


def test_the_node_and_the_in_process_session_give_the_same_chunks_for_the_same_messages(robot):
    for published, local in node_and_session_chunks(robot):
        np.testing.assert_allclose(published, local, rtol=0, atol=1e-6)


def test_temporal_ensembling_follows_a_run_time_change(robot):
    """``temporal_ensemble_s`` set to 0 at run time: the node publishes each decode alone, as a session
    without averaging does, and no longer what the shipped 0.4 s average gives; a negative value is refused."""

    def set_tau(value: float):
        return set_param(
            robot, "temporal_ensemble_s", ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
        )

    shipped = default_values(PARAMS)["temporal_ensemble_s"]
    assert shipped > 0
    result = set_tau(0.0)
    assert result.successful, result.reason
    try:
        pairs = node_and_session_chunks(robot, temporal_ensemble_s=0.0)
        for published, local in pairs:
            np.testing.assert_allclose(published, local, rtol=0, atol=1e-6)
        refused = set_tau(-1.0)
        assert not refused.successful and "temporal_ensemble_s" in refused.reason
    finally:
        assert set_tau(shipped).successful
    differs = node_and_session_chunks(robot, temporal_ensemble_s=0.0)
    assert max(np.abs(p - q).max() for p, q in differs) > 1e-4  # the shipped node averages: a raw session differs


def test_a_paused_camera_stops_the_chunks_and_is_reported_with_the_nodes_name(robot):
    player = robot.player
    assert player.step() is not None and player.step() is not None
    last_frame = max(
        ns_from_time_msg(m.header.stamp) for _, batch in player.log[-1:] for t, m in batch if t.endswith("Image")
    )
    paused_at = time.monotonic()
    chunks = [player.step(camera=False) for _ in range(6)]  # 0.6 s of joint states, no frame
    stamps = [ns_from_time_msg(c.header.stamp) for c in chunks if c is not None]
    assert stamps and max(stamps) <= last_frame + 200 * MS  # max_image_age_s = 0.2: then no chunk
    assert chunks[-1] is None and chunks[-2] is None
    reasons = {s[2]["status"] for s in robot.statuses(since=paused_at)}
    assert reasons & {"stale_image", "no_image"}, reasons
    # the wall-clock watchdog: the camera is silent, whatever the simulated time does
    assert robot.spin_until(
        lambda: any(s[0] == b"\x02" and "no image" in s[1] for s in robot.statuses(since=paused_at)), 30
    )
    assert (
        "no image message for more than 0.5 s" in robot.log_path.read_text()
        and "[policy]" in robot.log_path.read_text()
    )
    assert any(player.step() is not None for _ in range(4))  # frames again: chunks again


def set_param(robot, name: str, value: ParameterValue):
    client = robot.node.create_client(SetParameters, "/policy/set_parameters")
    assert client.wait_for_service(timeout_sec=30)
    future = client.call_async(SetParameters.Request(parameters=[ParameterMsg(name=name, value=value)]))
    assert robot.spin_until(future.done, 60)
    robot.node.destroy_client(client)
    return future.result().results[0]


def test_switching_to_a_wrist_camera_model_subscribes_to_the_hand_camera_and_needs_it(robot, tmp_path):
    """A run-time model change to a model with a second camera: the node subscribes to
    /wrist_camera/image_raw, publishes no chunk while only the main camera sends (the reason names the
    wrist camera), chunks once both do, and counts the wrist frames apart; back to the one-camera model,
    it unsubscribes."""
    from sensor_msgs.msg import Image

    torch.manual_seed(3)
    config = tiny_config(
        chunk_length=8, chunk_rate_hz=20.0, window_seconds=0.3, max_lateness_s=0.1, cameras=("camera", "wrist_camera")
    )
    save_model(VLATransformer(config), tmp_path / "wrist", onnx=True)
    player = robot.player

    def use(folder):
        result = set_param(
            robot, "model", ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=str(folder))
        )
        assert result.successful, result.reason
        assert robot.spin_until(lambda: (robot.latest() or {}).get("model") == str(folder), 30)
        player.sent = {"joints": 0, "images": 0}  # a new session counts from zero

    def wrist_subscribed() -> bool:
        return any(
            i.node_name == "policy" for i in robot.node.get_subscriptions_info_by_topic("/wrist_camera/image_raw")
        )

    use(tmp_path / "wrist")
    blind_at = time.monotonic()
    assert all(player.step() is None for _ in range(4))  # the main camera only
    messages = [s[1] for s in robot.statuses(since=blind_at) if s[2].get("status") in ("no_image", "stale_image")]
    assert messages and "wrist_camera" in messages[-1], messages
    player.wrist = robot.node.create_publisher(
        Image, "/wrist_camera/image_raw", QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
    )
    try:
        assert robot.spin_until(wrist_subscribed, 30)
        chunks = [player.step() for _ in range(5)]
        assert sum(c is not None for c in chunks) >= 3, robot.latest()
        values = robot.latest()
        assert int(values["image_wrist_camera.received"]) >= 10 and int(values["image_wrist_camera.accepted"]) >= 10
    finally:
        use(robot.folder)
        robot.node.destroy_publisher(player.wrist)
        player.wrist = None
    assert robot.spin_until(lambda: not wrist_subscribed(), 30)
    assert any(player.step() is not None for _ in range(4))


def test_a_model_that_cannot_load_is_refused_and_the_running_one_stays(robot):
    missing = set_param(
        robot, "model", ParameterValue(type=ParameterType.PARAMETER_STRING, string_value="/nonexistent")
    )
    assert not missing.successful and "cannot load model /nonexistent" in missing.reason
    empty = set_param(robot, "model", ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=""))
    assert not empty.successful and "model must name" in empty.reason
    assert any(robot.player.step() is not None for _ in range(3))  # still publishing
    assert robot.latest()["model"] == str(robot.folder)


def test_the_attention_overlay_topic_exists_only_while_debug_attention_is_true(robot):
    def topics():
        return {name for name, _ in robot.node.get_publisher_names_and_types_by_node("policy", "/")}

    assert robot.spin_until(lambda: "/vla/action_chunk" in topics(), 30)
    assert "/policy/attention_overlay" not in topics()
    on = set_param(robot, "debug_attention", ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=True))
    assert on.successful and robot.spin_until(lambda: "/policy/attention_overlay" in topics(), 30)
    off = set_param(robot, "debug_attention", ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=False))
    assert off.successful and robot.spin_until(lambda: "/policy/attention_overlay" not in topics(), 30)


def test_every_rejection_reason_reaches_the_log(robot):
    player = robot.player
    player.step()
    t = player.t
    # a burst of late joint states, then one frame of an unknown encoding and one empty frame
    for k in range(20):
        robot.pub_joints.publish(joint_state(t - 400 * MS + k * MS, 0.0))
    robot.pub_image.publish(camera_frame(t - 5 * MS, encoding="yuv422"))
    empty = camera_frame(t - 4 * MS)
    empty.data, empty.height, empty.width = b"", 0, 0
    robot.pub_image.publish(empty)
    player.sent["joints"] += 20
    player.sent["images"] += 2
    assert robot.wait_received(player.sent["joints"], player.sent["images"])
    text = robot.log_path.read_text()
    for code in ("late", "unknown_encoding", "empty_image"):
        assert f": {code}:" in text, code
    # Received is counted on arrival, a rejection when the window takes the message in: wait for both. How
    # many of the burst are late depends on how far the policy had drained when it came (lateness is judged
    # against the newest stamp it consumed), so the count is checked for "some", the log for the reason.
    counted = lambda v: (
        int(v.get("joint_states.rejected.late", 0)) >= 1 and int(v.get("image.rejected.unknown_encoding", 0)) >= 1
    )  # noqa: E731
    assert robot.spin_until(lambda: counted(robot.latest()), 30), robot.latest()
    assert int(robot.latest()["image.rejected.unknown_encoding"]) == 1


def expected_cache_tokens(config, steps) -> int:
    """The tokens the model's cache holds after ``steps`` (the Player's log since an episode began), from what
    was sent and the model's configuration alone: the instruction's word pieces, then every joint state and
    frame stamped within W + lateness of the newest joint state (that far back inclusive; frames newer than
    the newest joint state wait for the next tick): one token per joint state, one per patch of a frame."""
    sent = [(type_name, ns_from_time_msg(msg.header.stamp)) for _, batch in steps for type_name, msg in batch]
    newest = max(stamp for type_name, stamp in sent if type_name.endswith("JointState"))
    oldest = newest - round((config.window_seconds + config.max_lateness_s) * 1e9)
    kept = [type_name for type_name, stamp in sent if oldest <= stamp <= newest]
    text = len(shared_encoder(config.max_text_tokens)(INSTRUCTION).tokens)  # [CLS] pick up the red cup [SEP]
    return text + sum(1 if t.endswith("JointState") else config.num_visual_tokens for t in kept)


def test_an_episode_reset_restarts_the_window_and_refuses_the_old_episodes_messages(robot):
    """After an announced reset a message stamped before the episode's start is refused (counted as
    before_reset), the chunks are stamped in the new episode, and the model's cache holds the instruction and
    the new episode's last W + lateness of observations, exactly the count the messages sent since give."""
    player = robot.player
    player.step()
    before = int((robot.latest() or {}).get("joint_states.rejected.before_reset", 0))
    start = player.new_episode()
    robot.pub_joints.publish(joint_state(start - 5 * MS, 0.0))  # in flight from the previous episode
    player.sent["joints"] += 1
    assert robot.wait_received(player.sent["joints"], player.sent["images"])
    v = robot.latest()
    assert int(v["joint_states.rejected.before_reset"]) == before + 1
    # 0.6 s of the new episode: longer than the model's W + lateness (0.4 s), so the oldest have left the cache
    steps = 6
    chunks = [player.step() for _ in range(steps)]
    assert all(ns_from_time_msg(c.header.stamp) >= start for c in chunks if c is not None)
    assert chunks[-1] is not None, robot.latest()
    v = robot.latest()
    assert settled(v), v
    window_s = robot.config.window_seconds + robot.config.max_lateness_s
    assert steps * 0.1 > window_s + 0.1, window_s  # the case this checks: some of the episode is out of the window
    expected = expected_cache_tokens(robot.config, player.log[-steps:])
    assert int(v["tokens_in_cache"]) == expected, (expected, v)


def use_model(robot, folder) -> None:
    """A run-time model change, done once the node reports the new model (a new session counts from zero)."""
    result = set_param(robot, "model", ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=str(folder)))
    assert result.successful, result.reason
    assert robot.spin_until(lambda: (robot.latest() or {}).get("model") == str(folder), 60), robot.latest()
    robot.player.sent = {"joints": 0, "images": 0}


def constant_model(folder, config, positions) -> None:
    """A model whose every chunk point is ``positions``: the action head's weights and bias are zero, so what
    it outputs is the action normalisation's mean."""
    import dataclasses

    torch.manual_seed(5)
    model = VLATransformer(dataclasses.replace(config, action_mean=tuple(float(x) for x in positions)))
    with torch.no_grad():
        model.action_head.weight.zero_()
        model.action_head.bias.zero_()
    save_model(model, folder, onnx=True)


def test_the_table_lift_raises_every_point_that_comes_near_the_table_and_no_other(robot, tmp_path):
    """Shaping on, with the robot description on /robot_description: a model whose every point puts the hand
    into the table (the safety filter's own collision model says so) has every published point lifted, and
    ``shaping.lifted_points`` grows by exactly the points published; a model whose every point keeps the arm
    far above the table has none lifted. The counts are read between steps, when no tick runs."""
    from ros_helpers import REPO as repo

    from vla_ros.params import safety_filter as filter_params
    from vla_ros.params.spec import values_from_yaml
    from vla_ros.safety import SafetyFilter, load_robot
    from vla_ros.sim import default_urdf_path

    urdf = default_urdf_path().read_text()
    filter_config = filter_params.config_from_params(
        values_from_yaml(
            filter_params.PARAMS,
            [repo / "config" / "limits.yaml", repo / "config" / "safety_filter.yaml"],
            "safety_filter",
        )
    )
    checker = SafetyFilter(load_robot(urdf), filter_config).checker
    names = list(checker.robot.joint_names)

    def table_distance(q) -> float:
        full = np.zeros(len(names))
        full[[names.index(j) for j in robot.config.joint_names]] = q
        d = checker.distances(full)
        return float(min(d[i] for i, kind in enumerate(checker.kinds) if kind == "table_collision"))

    down = np.array([0.0, 1.2, 1.2, 0.0, 1.0, 0.0, 0.02])  # shoulder and elbow bent forward: the hand in the table
    up = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.02])  # straight up
    margin = default_values(PARAMS)["shaping_table_margin_m"]
    assert table_distance(down) < filter_config.clearance_m, table_distance(down)
    assert table_distance(up) > filter_config.clearance_m + margin + 0.05, table_distance(up)
    for name, q in (("down", down), ("up", up)):
        constant_model(tmp_path / name, robot.config, q)

    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
    description = robot.node.create_publisher(String, "/robot_description", latched)
    description.publish(String(data=urdf))
    try:
        assert set_param(
            robot, "shape_chunks", ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=True)
        ).successful
        assert robot.spin_until(lambda: (robot.latest() or {}).get("shaping") == "on", 60), robot.latest()
        for name, must_lift in (("down", True), ("up", False)):
            use_model(robot, tmp_path / name)
            robot.player.step()  # the new session's first tick
            lifted_before = int(robot.latest()["shaping.lifted_points"])
            chunks = [c for c in (robot.player.step() for _ in range(4)) if c is not None]
            v = robot.latest()
            assert settled(v) and len(chunks) >= 2, v
            points = sum(len(c.points) for c in chunks)
            assert points == len(chunks) * robot.config.chunk_length  # the whole chunk is published (and shaped)
            assert int(v["shaping.lifted_points"]) - lifted_before == (points if must_lift else 0), (name, v)
            if not must_lift:  # nothing to do: the points go out as decoded
                np.testing.assert_allclose(
                    [p.positions for c in chunks for p in c.points[1:]], [up] * (points - len(chunks)), atol=1e-5
                )
    finally:
        assert set_param(
            robot, "shape_chunks", ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=False)
        ).successful
        use_model(robot, robot.folder)
        robot.node.destroy_publisher(description)
    assert robot.spin_until(lambda: (robot.latest() or {}).get("shaping") == "off", 60), robot.latest()
