"""sim.launch.xml through the launch runner: real processes, real DDS, simulated time.

One launched graph serves the whole module (starting MuJoCo and DDS discovery costs seconds).
"""

import json

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from image_checks import assert_cups_visible
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import LaunchedGraph, Probe
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, Header, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos, reset_from_msg
from vla_ros.ros.time import duration_msg_from_s, ns_from_time_msg
from vla_ros.sim import HOME_Q, ArmSim
from vla_ros.sim.pacing import Pacing

COMMAND_JOINTS = [
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "forearm_roll_joint",
    "wrist_pitch_joint",
    "wrist_roll_joint",
    "left_finger_joint",
]
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    log = tmp_path_factory.mktemp("launch") / "sim.log"
    with LaunchedGraph("sim.launch.xml", "policy:=none", "seed:=3", "wrist_camera:=true", log_path=log) as g:
        probe = Probe("sim_test_probe")
        rec = {
            "js": [],
            "img": [],
            "info": [],
            "wrist": [],
            "wrist_info": [],
            "diag": [],
            "status": None,
            "description": None,
            "resets": [],
        }
        n = probe.node
        n.create_subscription(JointState, "/joint_states", lambda m: rec["js"].append(m), 200)
        n.create_subscription(Image, "/camera/image_raw", lambda m: rec["img"].append(m), 50)
        n.create_subscription(CameraInfo, "/camera/camera_info", lambda m: rec["info"].append(m), 50)
        n.create_subscription(Image, "/wrist_camera/image_raw", lambda m: rec["wrist"].append(m), 50)
        n.create_subscription(CameraInfo, "/wrist_camera/camera_info", lambda m: rec["wrist_info"].append(m), 50)
        n.create_subscription(DiagnosticArray, "/diagnostics", lambda m: rec["diag"].append(m), 50)
        n.create_subscription(
            String, "/vla/episode_status", lambda m: rec.__setitem__("status", json.loads(m.data)), LATCHED
        )
        n.create_subscription(String, "/robot_description", lambda m: rec.__setitem__("description", m.data), LATCHED)
        n.create_subscription(
            Header, EPISODE_RESET_TOPIC, lambda m: rec["resets"].append(reset_from_msg(m)), episode_reset_qos()
        )
        probe.rec = rec
        probe.pub_cmd = n.create_publisher(Float64MultiArray, "/forward_position_controller/commands", 10)
        probe.pub_traj = n.create_publisher(JointTrajectory, "/joint_trajectory_controller/joint_trajectory", 10)
        assert probe.spin_until(lambda: len(rec["js"]) > 5 and rec["status"] is not None and rec["resets"], 90), (
            log.read_text()[-3000:]
        )
        yield probe
        probe.close()
    assert g.proc.returncode == 0, log.read_text()[-3000:]


def latest_q(probe) -> np.ndarray:
    m = probe.rec["js"][-1]
    pos = dict(zip(m.name, m.position))
    return np.array([pos[j] for j in COMMAND_JOINTS])


# Where the sim puts its samples (config/sim.yaml): 600 physics steps per simulated second, joint states every
# 6th step (100 Hz), frames every 20th (30 Hz), /clock every 3rd (200 Hz). A sample's stamp is its step's
# simulated time, step * 1e9 // 600 ns: the k-th sample of a stream at rate r Hz is stamped k * 1e9 // r ns.
JOINT_STATE_HZ, CAMERA_HZ, CLOCK_HZ = 100, 30, 200
SEQ = "publication_sequence_number"


def _stamps_and_sequence(graph, topics: dict, sim_s: float) -> dict:
    """Each of ``topics`` (key: (type, topic, depth)) as it arrives here, until every one has brought
    ``sim_s`` simulated seconds of stamps (not until /clock says so: on a loaded machine this probe may be
    seconds behind on a busy topic while /clock is current): [(stamp_ns, the sim's publication sequence
    number)] in publication order, and the last message of each."""
    got = {key: [] for key in topics}
    last = {}

    def keep(key):
        def on_msg(m, info):
            got[key].append((ns_from_time_msg(m.header.stamp), info[SEQ]))
            last[key] = m

        return on_msg

    reliable = ReliabilityPolicy.RELIABLE
    subs = [
        graph.node.create_subscription(t, topic, keep(key), QoSProfile(depth=depth, reliability=reliable))
        for key, (t, topic, depth) in topics.items()
    ]

    def spans() -> bool:
        return all(v and v[-1][0] - v[0][0] >= sim_s * 1e9 for v in got.values())  # (one publisher: in order)

    try:
        assert graph.spin_until(spans, 180), {key: (v[0][0], v[-1][0]) if v else None for key, v in got.items()}
    finally:
        for sub in subs:
            graph.node.destroy_subscription(sub)
    return {key: sorted(v, key=lambda e: e[1]) for key, v in got.items()}, last


def _assert_every_period_published_once(stream: list, rate_hz: int, what: str) -> int:
    """``stream``: [(stamp_ns, sequence number)] of one publisher, in publication order. Each stamp lies on
    the stream's grid (k * 1e9 // rate_hz), and between two messages received here the stamp advanced by
    exactly as many periods as the publisher published messages: the sim published every period once,
    none twice, none skipped. Returns how many it published that did not reach this probe."""
    stamps = np.array([s for s, _ in stream], dtype=np.int64)
    seq = np.array([q for _, q in stream], dtype=np.int64)
    k = (stamps * rate_hz + 500_000_000) // 1_000_000_000  # the nearest grid index
    assert np.array_equal(stamps, k * 1_000_000_000 // rate_hz), (
        what,
        stamps[stamps != k * 1_000_000_000 // rate_hz][:5],
    )
    steps, published = np.diff(k), np.diff(seq)
    bad = np.flatnonzero(steps != published)
    assert not bad.size, [(what, int(stamps[i]), int(stamps[i + 1]), int(published[i])) for i in bad[:5]]
    return int((published - 1).sum())


def test_rates_and_stamps_over_ten_simulated_seconds(graph):
    """Every stamp of /joint_states (100 Hz), and of the image and camera_info of both cameras (30 Hz) over
    ten simulated seconds, checked against the publisher's own count of what it sent (the DDS publication
    sequence number each message carries): the sim published one message per period on the period's
    stamp, none missing, none twice, and each camera's camera_info and the hand camera's frames on the
    stamps of the main camera's frames.

    Whether each message also reached this probe is the transport's business, not the sim's: the sim's
    sensor publishers keep the last 10 (joint states) / 5 (frames) samples for a reliable reader, so a
    reader whose process is held off the CPU for longer than that (100 ms of joint states, 170 ms of frames
    at real time: it happens on a loaded machine) loses the oldest: a sensor stream must not block the physics. Such a
    message shows as a gap in the sequence
    numbers, with the stamps stepping over exactly as many periods; the probe's own queues here are deep
    enough (20 s of joint states) that it cannot drop one itself."""
    got, last = _stamps_and_sequence(
        graph,
        {
            "js": (JointState, "/joint_states", 2000),
            "img": (Image, "/camera/image_raw", 600),
            "info": (CameraInfo, "/camera/camera_info", 600),
            "wrist": (Image, "/wrist_camera/image_raw", 600),
            "wrist_info": (CameraInfo, "/wrist_camera/camera_info", 600),
        },
        10.0,
    )
    lost = {
        key: _assert_every_period_published_once(stream, JOINT_STATE_HZ if key == "js" else CAMERA_HZ, key)
        for key, stream in got.items()
    }
    print(f"published but not received here (transport): {lost}")
    # The sim publishes a frame and its camera_info from each camera together at every frame step, so the
    # n-th message on each of the four carries the n-th frame's stamp: equal sequence numbers on equal
    # stamps. And every main-camera frame received here has its partner, but for the transport's losses and
    # the first and last period (the subscriptions started and ended a moment apart).
    frame_seq = dict(got["img"])
    for key in ("info", "wrist", "wrist_info"):
        seq = dict(got[key])
        both = frame_seq.keys() & seq.keys()
        assert len(both) >= len(frame_seq) - lost[key] - 2, (key, len(frame_seq), len(seq), len(both), lost)
        assert all(frame_seq[s] == seq[s] for s in both), (key, sorted((s, frame_seq[s], seq[s]) for s in both)[:5])
    m = last["img"]
    assert (m.encoding, m.width, m.height, m.step) == ("rgb8", 320, 240, 960) and len(m.data) == 240 * 960
    i = last["info"]
    assert i.k[0] > 0 and i.width == 320 and i.height == 240
    assert set(COMMAND_JOINTS) <= set(last["js"].name)


def test_the_hand_camera_publishes_frames_of_its_own_at_the_same_instants(graph):
    """wrist_camera:=true: /wrist_camera/image_raw + camera_info at the main camera's stamps, in the hand's
    optical frame, a picture of its own (the table and fingers from above, not the scene from the front)."""
    rec = graph.rec
    for key in ("img", "wrist", "wrist_info"):
        rec[key].clear()

    def pairs():  # (front, hand) frames received here with the same stamp
        main = {ns_from_time_msg(m.header.stamp): m for m in rec["img"]}
        return [(main[s], m) for m in rec["wrist"] if (s := ns_from_time_msg(m.header.stamp)) in main]

    # Waited for by the frames themselves (that the hand camera publishes every period is the rates test's):
    # on a loaded machine this probe may be seconds behind on the image topics while /clock is current.
    assert graph.spin_until(lambda: len(rec["wrist"]) >= 20 and len(pairs()) >= 15, 120), (
        len(rec["wrist"]),
        len(pairs()),
    )
    both = pairs()
    front, hand = both[-1]
    assert hand.header.frame_id == "wrist_camera_optical_frame" != front.header.frame_id
    assert (hand.encoding, hand.width, hand.height) == ("rgb8", front.width, front.height)
    assert np.abs(_pixels(hand).astype(int) - _pixels(front).astype(int)).mean() > 10  # another view
    info_stamps = {ns_from_time_msg(i.header.stamp) for i in rec["wrist_info"]}
    assert ns_from_time_msg(rec["wrist"][-2].header.stamp) in info_stamps
    assert rec["wrist_info"][-1].header.frame_id == "wrist_camera_optical_frame" and rec["wrist_info"][-1].k[0] > 0


def test_robot_description_is_latched_urdf(graph):
    desc = graph.rec["description"]
    assert desc is not None and '<robot name="vla_arm"' in desc
    for joint in COMMAND_JOINTS:
        assert f'name="{joint}"' in desc


def test_image_shows_the_three_cups_where_they_project(graph):
    """On a fresh episode, so the arm is at home whatever the tests before did, in a frame taken after it."""
    episode = graph.rec["status"]["episode"]
    graph.call(graph.node.create_client(Trigger, "/sim/reset"), Trigger.Request())
    assert graph.spin_until(lambda: graph.rec["status"]["episode"] > episode, 30)
    t_reset = graph.rec["status"]["time_s"]
    assert graph.spin_until(
        lambda: graph.rec["img"] and ns_from_time_msg(graph.rec["img"][-1].header.stamp) * 1e-9 > t_reset + 0.05, 30
    )
    status = graph.rec["status"]
    model = ArmSim(seed=status["seed"])  # same camera model; used only for projection
    m = graph.rec["img"][-1]
    img = np.frombuffer(bytes(m.data), np.uint8).reshape(m.height, m.width, 3)
    assert_cups_visible(img, model, status["cups"])
    model.close()


def test_commanded_target_is_reached(graph):
    """Sent at 100 Hz as a forward position controller does: right after a reset the sim refuses commands far
    from the reset pose for reset_hold_s (they could be from before the reset), so one message may be lost."""
    target = np.array(HOME_Q) + np.array([0.3, -0.15, 0.2, 0.2, -0.2, 0.4, -0.015])
    graph.rec["js"].clear()
    assert graph.spin_until(lambda: graph.rec["js"], 30), "no joint states"  # a test before may have cleared them
    timer = graph.node.create_timer(0.01, lambda: graph.pub_cmd.publish(Float64MultiArray(data=target.tolist())))
    try:
        # The deadline only bounds a sim that never gets there; on a loaded machine the probe's 100 Hz timer
        # sends fewer commands per simulated second, so it is generous.
        t_end = graph.now_s() + 10.0
        reached = graph.spin_until(lambda: np.abs(latest_q(graph) - target).max() < 0.01 or graph.now_s() > t_end, 120)
    finally:
        graph.node.destroy_timer(timer)
    assert reached and np.abs(latest_q(graph) - target).max() < 0.01, (graph.now_s(), latest_q(graph) - target)


def _rejections(probe) -> dict[str, str]:
    found = {}
    for arr in probe.rec["diag"]:
        for s in arr.status:
            if s.name.endswith("command rejected"):
                kv = {v.key: v.value for v in s.values}
                found[kv["reason"]] = kv["detail"]
    return found


def _traj(names, times, points, stamp=None) -> JointTrajectory:
    msg = JointTrajectory(joint_names=names)
    for t, p in zip(times, points):
        msg.points.append(JointTrajectoryPoint(positions=[float(x) for x in p], time_from_start=duration_msg_from_s(t)))
    return msg


def _joint_states_until(graph, stamp_ns: int) -> None:
    """Spin until a joint state stamped ``stamp_ns`` or later has arrived here (the probe's clock is no
    guide: on a loaded machine it may be current while the joint states it has taken are seconds old)."""
    assert graph.spin_until(lambda: graph.rec["js"] and _stamp_ns(graph.rec["js"][-1]) >= stamp_ns, 120), stamp_ns


def _diag_stamp_ns(graph, name_end: str, **values) -> int | None:
    """The stamp of the first /diagnostics status received whose name ends with ``name_end`` and whose
    values include ``values``, or None."""
    for arr in graph.rec["diag"]:
        for s in arr.status:
            if s.name.endswith(name_end) and values.items() <= {v.key: v.value for v in s.values}.items():
                return ns_from_time_msg(arr.header.stamp)
    return None


def test_bad_commands_are_rejected_with_diagnostics_and_the_arm_does_not_move(graph):
    """Each malformed command is refused with its reason on /diagnostics, and the arm holds still through
    all of them: every joint state from before the first to half a second after the sim refused the last
    (a trajectory to an infinite position, which would have taken 0.5 s) shows the pose it started at."""
    assert graph.spin_until(lambda: graph.rec["js"], 60)
    _joint_states_until(
        graph, _stamp_ns(graph.rec["js"][-1]) + 1_000_000_000
    )  # at rest (a test before may have moved it)
    q0, n0 = latest_q(graph), len(graph.rec["js"]) - 1  # (by index: a test before may have restarted the clock)
    home = list(HOME_Q)
    bad = [
        ("wrong_size", lambda: graph.pub_cmd.publish(Float64MultiArray(data=home[:5]))),
        ("non_finite", lambda: graph.pub_cmd.publish(Float64MultiArray(data=home[:6] + [float("nan")]))),
        ("outside_limits", lambda: graph.pub_cmd.publish(Float64MultiArray(data=[9.0] + home[1:]))),
        ("unknown_joint", lambda: graph.pub_traj.publish(_traj(["bogus"] + COMMAND_JOINTS[1:], [1.0], [home]))),
        ("non_increasing_time", lambda: graph.pub_traj.publish(_traj(COMMAND_JOINTS, [1.0, 1.0], [home, home]))),
    ]
    graph.rec["diag"].clear()
    for _code, send in bad:
        send()
    codes = [c for c, _ in bad]
    assert graph.spin_until(lambda: set(codes) <= set(_rejections(graph)), 60), _rejections(graph)
    details = _rejections(graph)
    assert "bogus" in details["unknown_joint"] and "shoulder_pan_joint" in details["outside_limits"]
    inf_cmd = home[:2] + [float("inf")] + home[3:]
    graph.rec["diag"].clear()
    graph.pub_traj.publish(_traj(COMMAND_JOINTS, [0.5], [inf_cmd]))
    assert graph.spin_until(
        lambda: _diag_stamp_ns(graph, "command rejected", source="joint_trajectory", reason="non_finite"), 60
    )
    _joint_states_until(
        graph, _diag_stamp_ns(graph, "command rejected", source="joint_trajectory", reason="non_finite") + 500_000_000
    )
    moved = [_q(m) - q0 for m in graph.rec["js"][n0:] if np.abs(_q(m) - q0).max() >= 1e-3]
    assert not moved, moved[:3]


def _set_seed(probe, seed: int) -> None:
    client = probe.node.create_client(SetParameters, "/sim/set_parameters")
    value = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=seed)
    result = probe.call(client, SetParameters.Request(parameters=[ParameterMsg(name="seed", value=value)]))
    assert result.results[0].successful, result.results[0].reason


def test_reset_with_same_seed_reproduces_cups_and_other_seed_changes_them(graph):
    reset = graph.node.create_client(Trigger, "/sim/reset")
    _set_seed(graph, 21)
    first = json.loads(graph.call(reset, Trigger.Request()).message)["cups"]
    graph.spin_for_sim(0.5)
    again = json.loads(graph.call(reset, Trigger.Request()).message)["cups"]
    _set_seed(graph, 22)
    other = json.loads(graph.call(reset, Trigger.Request()).message)["cups"]
    assert first == again
    assert first != other
    assert graph.spin_until(lambda: graph.rec["status"]["seed"] == 22, 30)


def test_invalid_parameter_change_is_refused_with_a_reason(graph):
    client = graph.node.create_client(SetParameters, "/sim/set_parameters")
    value = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=-2.0)
    result = graph.call(client, SetParameters.Request(parameters=[ParameterMsg(name="real_time_factor", value=value)]))
    assert not result.results[0].successful
    assert "real_time_factor" in result.results[0].reason
    ro = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=64)
    result = graph.call(client, SetParameters.Request(parameters=[ParameterMsg(name="image_width", value=ro)]))
    assert not result.results[0].successful  # read-only: needs a restart


def _set_param(probe, name: str, value) -> None:
    from rclpy.parameter import Parameter

    client = probe.node.create_client(SetParameters, "/sim/set_parameters")
    result = probe.call(client, SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()]))
    assert result.results[0].successful, result.results[0].reason


def test_start_up_announces_the_current_episode_to_a_late_subscriber(graph):
    """The announcement is latched: the probe, started after the sim, got the current episode's."""
    assert graph.spin_until(
        lambda: graph.rec["resets"] and graph.rec["resets"][-1][1] == graph.rec["status"]["episode"], 30
    )
    stamp_ns, episode = graph.rec["resets"][-1]
    assert stamp_ns * 1e-9 <= graph.rec["status"]["time_s"] + 1e-6  # (the status rounds to microseconds)


def _stamp_ns(m) -> int:
    return ns_from_time_msg(m.header.stamp)


def _q(m) -> np.ndarray:
    pos = dict(zip(m.name, m.position))
    return np.array([pos[j] for j in COMMAND_JOINTS])


def _pixels(m) -> np.ndarray:
    return np.frombuffer(bytes(m.data), np.uint8).astype(np.float32)


def _drive_and_reset(graph, restart: bool, resets: int = 3):
    """Hold the arm at a pose far from HOME, reset (a new seed each time, so the cups move too), wait 0.3 s
    of the new episode; ``resets`` times. Returns the targets, the replies and what arrived meanwhile."""
    _set_param(graph, "reset_clock_on_reset", restart)
    reset = graph.node.create_client(Trigger, "/sim/reset")
    js, img = [], []
    subs = [
        graph.node.create_subscription(JointState, "/joint_states", js.append, 500),
        graph.node.create_subscription(Image, "/camera/image_raw", img.append, 100),
    ]
    targets, replies = [], []
    try:
        for k in range(resets):
            target = np.array(HOME_Q) + np.array([0.4, -0.2, 0.3, 0.5, -0.3, 0.6, 0.0]) * (1 if k % 2 else -1)
            target[6] -= 0.02  # the gripper's stroke ends at HOME's "open"
            graph.pub_cmd.publish(Float64MultiArray(data=list(HOME_Q)))  # starts at the reset pose (reset_hold_s)
            graph.pub_cmd.publish(Float64MultiArray(data=target.tolist()))
            assert graph.spin_until(lambda: js and np.abs(_q(js[-1]) - target).max() < 0.01, 120), _q(js[-1]) - target
            reached_ns = _stamp_ns(js[-1])
            assert graph.spin_until(lambda: _stamp_ns(js[-1]) >= reached_ns + 300_000_000, 60)  # steady, with frames
            _set_param(graph, "seed", 40 + k)
            last_old_ns = _stamp_ns(js[-1])
            n_before = len(js), len(img)
            reply = json.loads(graph.call(reset, Trigger.Request()).message)

            def new_episode_seen(stream, n) -> bool:
                return any(
                    _stamp_ns(m) >= reply["start_ns"] + 300_000_000 and (not restart or _stamp_ns(m) < last_old_ns)
                    for m in stream[n:]
                )

            # 0.3 s of the new episode on both streams: stamps from its start on (with a restarted clock: after
            # the jump back). Frames are larger and may arrive later than joint states on a loaded machine.
            assert graph.spin_until(
                lambda: new_episode_seen(js, n_before[0]) and new_episode_seen(img, n_before[1]), 60
            )
            assert graph.spin_until(lambda: graph.rec["resets"][-1][1] == reply["episode"], 30)
            targets.append(target)
            replies.append(reply)
    finally:
        for sub in subs:
            graph.node.destroy_subscription(sub)
        _set_param(graph, "reset_clock_on_reset", False)
    return targets, replies, js, img


def _assert_exact_split(before: list, after: list, is_old, is_new) -> None:
    """Every message on the old side shows the old episode, every one on the new side the new one."""
    assert before and after, (len(before), len(after))
    assert all(is_old(m) for m in before), [_stamp_ns(m) for m in before if not is_old(m)]
    assert all(is_new(m) for m in after), [_stamp_ns(m) for m in after if not is_new(m)]


def _near(q_ref):
    return lambda m: np.abs(_q(m) - q_ref).max() < 0.02


def _closer_to(frame, other):
    """A classifier of frames: closer to ``frame`` than to ``other`` (mean absolute pixel difference)."""
    a, b = _pixels(frame), _pixels(other)
    assert np.abs(a - b).mean() > 1.0, "the reset must change the picture (arm pose, cup layout)"
    return lambda m: np.abs(_pixels(m) - a).mean() < np.abs(_pixels(m) - b).mean()


WINDOW_NS = 250_000_000  # of each episode next to a reset, checked message by message


def test_reset_is_announced_and_splits_every_sensor_stream_exactly_by_stamp(graph):
    """Monotonic clock: joint states and frames stamped before the announced stamp show the old episode (arm
    at the commanded pose), those stamped at or after it the new one (arm at HOME, cups moved), whatever
    order they arrive in; the announcement's stamp and number match the reply and /vla/episode_status."""
    targets, replies, js, img = _drive_and_reset(graph, restart=False)
    announced = {ep: stamp for stamp, ep in graph.rec["resets"]}
    for k, (target, reply) in enumerate(zip(targets, replies)):
        start = reply["start_ns"]
        assert announced[reply["episode"]] == start
        if k:
            assert reply["episode"] == replies[k - 1]["episode"] + 1 and start > replies[k - 1]["start_ns"]
        before = [m for m in js if start - WINDOW_NS <= _stamp_ns(m) < start]
        after = [m for m in js if start <= _stamp_ns(m) < start + WINDOW_NS]
        _assert_exact_split(before, after, _near(target), _near(np.array(HOME_Q)))
        frames_before = [m for m in img if start - WINDOW_NS <= _stamp_ns(m) < start]
        frames_after = [m for m in img if start <= _stamp_ns(m) < start + WINDOW_NS]
        new_ref = next(m for m in img if _stamp_ns(m) >= start + WINDOW_NS)
        old_ref = frames_before[0]
        _assert_exact_split(frames_before, frames_after, _closer_to(old_ref, new_ref), _closer_to(new_ref, old_ref))
    assert graph.spin_until(lambda: graph.rec["status"]["episode"] == replies[-1]["episode"], 30)


def test_reset_with_a_restarted_clock_is_announced_at_zero_and_splits_at_the_jump(graph):
    """reset_clock_on_reset: the announcement is stamped 0; each stream jumps back exactly once per reset,
    everything after the jump (stamped >= 0) is the new episode, everything before it the old one."""
    targets, replies, js, img = _drive_and_reset(graph, restart=True)
    assert [r["start_ns"] for r in replies] == [0] * len(replies)
    assert graph.rec["resets"][-len(replies) :] == [(0, r["episode"]) for r in replies]
    for stream in (js, img):
        stamps = np.array([_stamp_ns(m) for m in stream])
        jumps = list(np.flatnonzero(np.diff(stamps) < 0) + 1)  # the first message after each jump back
        assert len(jumps) == len(replies), [stamps[i - 1 : i + 1] for i in jumps]
        bounds = [0, *jumps, len(stream)]
        for k, i in enumerate(jumps):
            old_episode, new_episode = stream[bounds[k] : i], stream[i : bounds[k + 2]]
            before = [m for m in old_episode if _stamp_ns(m) >= stamps[i - 1] - WINDOW_NS]
            after = [m for m in new_episode if _stamp_ns(m) < WINDOW_NS]
            if stream is js:
                _assert_exact_split(before, after, _near(targets[k]), _near(np.array(HOME_Q)))
            else:
                new_ref = next(m for m in new_episode if _stamp_ns(m) >= WINDOW_NS)
                _assert_exact_split(before, after, _closer_to(before[0], new_ref), _closer_to(new_ref, before[0]))


def test_commands_from_before_a_reset_do_not_yank_the_arm_back(graph):
    """After ~/reset, a position command far from the reset pose (one still in flight from the old episode)
    is refused with reason before_reset and the arm stays put, until a command at the reset pose arrives
    (a controller re-anchored there); then commands apply as before."""
    reset = graph.node.create_client(Trigger, "/sim/reset")
    far = np.array(HOME_Q) + np.array([0.4, -0.2, 0.3, 0.5, -0.3, 0.6, -0.02])
    _set_param(graph, "reset_hold_s", 60.0)  # longer than any wall-clock delay here: the test is not a race
    try:
        graph.pub_cmd.publish(Float64MultiArray(data=list(HOME_Q)))  # (the tests before ended with a reset)
        graph.pub_cmd.publish(Float64MultiArray(data=far.tolist()))
        assert graph.spin_until(lambda: np.abs(latest_q(graph) - far).max() < 0.01, 120), latest_q(graph) - far
        n0 = len(graph.rec["js"])  # what arrives from now on (older ones may be of another clock epoch)
        start_ns = json.loads(graph.call(reset, Trigger.Request()).message)["start_ns"]
        graph.rec["diag"].clear()
        graph.pub_cmd.publish(Float64MultiArray(data=far.tolist()))  # the old episode's target, late

        def dropped():
            return [
                (s.level, {v.key: v.value for v in s.values})
                for a in graph.rec["diag"]
                for s in a.status
                if s.name.endswith("command dropped")
            ]

        assert graph.spin_until(dropped, 60), _rejections(graph)
        level, values = dropped()[0]
        assert values["reason"] == "before_reset" and "taken for a command sent before the reset" in values["detail"]
        assert level == b"\x00" and int(values["commands.before_reset"]) >= 1  # counted, and not as bad input
        assert "before_reset" not in _rejections(graph)
        # The arm stays put: every joint state of the new episode, to half a second after the sim dropped the
        # late command, shows the reset pose.
        _joint_states_until(graph, _diag_stamp_ns(graph, "command dropped") + 500_000_000)
        yanked = [
            _q(m)
            for m in graph.rec["js"][n0:]
            if _stamp_ns(m) >= start_ns and np.abs(_q(m) - np.array(HOME_Q)).max() >= 0.02
        ]
        assert not yanked, yanked[:3]
        graph.pub_cmd.publish(Float64MultiArray(data=list(HOME_Q)))
        graph.pub_cmd.publish(Float64MultiArray(data=far.tolist()))
        assert graph.spin_until(lambda: np.abs(latest_q(graph) - far).max() < 0.01, 120), latest_q(graph) - far
    finally:
        _set_param(graph, "reset_hold_s", 0.5)


def _advance_within(graph, sim_s: float, wall_timeout_s: float = 20.0) -> bool:
    t0 = graph.now_s()
    return graph.spin_until(lambda: graph.now_s() >= t0 + sim_s, wall_timeout_s)


def _pacing_excess_s(graph, factor: float, sim_s: float) -> float:
    """Hold ``sim_s`` simulated seconds at ``factor`` and return how far the sim got ahead of that pace.

    Paced at f, the sim publishes the /clock message of simulated time s only after waiting until its
    pacing anchor says s - 1/clock_rate is due: s/f - w <= C + 1/(clock_rate f), w its wall time of
    publication (the DDS source timestamp the message carries: the sim's own clock, not this probe's,
    which may be late by any amount on a loaded machine) and C = s0/f - w0 of the anchor (s0, w0). The
    anchor only moves back (C only falls): when the sim lags more than max_lag_s behind it re-anchors at
    the lagging message, so every message has s/f - w >= C_then - max_lag_s. Hence for any two messages
    i before j, g_j - g_i <= max_lag_s + 1/(clock_rate f) with g = s/f - w, on any CPU and under any load;
    a sim running faster than f gains (rate/f - 1) wall seconds per second held. Returned: the largest
    g_j - g_i over the hold, i before j."""
    clock = []
    sub = graph.node.create_subscription(
        Clock,
        "/clock",
        lambda m, info: clock.append((ns_from_time_msg(m.clock), info["source_timestamp"], info[SEQ])),
        QoSProfile(depth=2000, reliability=ReliabilityPolicy.RELIABLE),
    )
    try:
        assert graph.spin_until(lambda: len(clock) > 1 and clock[-1][0] - clock[0][0] >= sim_s * 1e9, 120), (
            factor,
            clock[-1:],
        )
    finally:
        graph.node.destroy_subscription(sub)
    clock.sort(key=lambda c: c[2])  # publication order
    sim = np.array([c[0] - clock[0][0] for c in clock]) * 1e-9
    wall = np.array([c[1] - clock[0][1] for c in clock]) * 1e-9
    g = sim / factor - wall
    return float((g[1:] - np.minimum.accumulate(g[:-1])).max())


def test_real_time_factor_changes_take_effect_at_once_both_ways(graph):
    """Issue 14: 1.0 -> 0.5 froze simulated time for as long as it had run since the pacing last
    re-anchored, and 1.0 again did not wake it. Each change must apply at once: simulated time advances
    (a frozen sim fails the generous 20 s), and over each 4 s hold the sim never gets ahead of the new
    factor's pace by more than its pacing allows (``_pacing_excess_s``), measured on the sim's own
    publication times, so a late probe on a loaded machine cannot make it pass or fail. A sim at 1.1 times
    the factor would be 0.36 s ahead by the end of a hold; slower than the factor is load, not a fault."""
    # The bound of _pacing_excess_s: the pacing's lag allowance, one /clock period at the factor, and 10 ms
    # for the wall clocks (the pacing's monotonic clock and the realtime clock DDS stamps with may drift
    # apart by NTP's slew, at most 0.5 ms/s, over a hold that a loaded machine may stretch).
    max_lag_s = Pacing(1.0).max_lag_s
    graph.rec["img"].clear()
    try:
        for factor, hold_s in ((1.0, 4.0), (0.5, 4.0), (0.05, 0.0), (1.0, 0.0), (0.0, 0.0), (1.0, 4.0)):
            _set_param(graph, "real_time_factor", factor)
            need = 0.05 if factor == 0.05 else 0.2
            assert _advance_within(graph, need), (
                f"simulated time stuck at {graph.now_s():.3f} s after real_time_factor {factor}"
            )
            if hold_s:  # (every /clock message of the hold comes after the change applied: 0.2 s went by)
                excess = _pacing_excess_s(graph, factor, hold_s * factor)
                assert excess <= max_lag_s + 1.0 / (CLOCK_HZ * factor) + 0.01, (factor, excess)
            graph.rec["img"].clear()
            graph.rec["js"].clear()
    finally:
        _set_param(graph, "real_time_factor", 1.0)
