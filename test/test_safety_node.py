"""safety_filter_node over real DDS: the MuJoCo sim (sim.launch.xml, policy:=none) publishes /clock,
/joint_states and /robot_description; the node runs as its own process on simulated time; a probe sends
chunks and watches /vla/safe_action_chunk and /diagnostics. A second, in-process instance on remapped
topics shows that without a robot model or a joint state nothing passes, and that it says so.
"""

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import REPO, LaunchedGraph, Probe, node_cmd, spin_until, start_process, stop_cleanly
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos, reset_from_msg
from vla_ros.ros.time import duration_msg_from_s, ns_from_time_msg, seconds_from_duration_msg
from vla_ros.sim import HOME_Q, default_urdf_path

LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
STALE_S = 3  # seconds a stale chunk's stamp lies back: past the module's max_chunk_age_s (2 s)
DIVE = np.array([0.0, 1.6, 1.4, 0.0, 0.8, 0.0, 0.04])  # through the table


def _traj(points, dt, stamp, names=COMMANDED_JOINTS, t0=None):
    msg = JointTrajectory(joint_names=list(names))
    msg.header.stamp = stamp
    msg.header.frame_id = "base_link"
    for k, p in enumerate(points):
        t = (k + 1) * dt if t0 is None else t0 + k * dt
        msg.points.append(JointTrajectoryPoint(positions=[float(x) for x in p], time_from_start=duration_msg_from_s(t)))
    return msg


def _statuses(rec, suffix, node="safety_filter"):
    """(status, values) of ``node``'s statuses named ``<node>: <suffix>``."""
    out = []
    for arr in rec["diag"]:
        for s in arr.status:
            if s.name == f"{node}: {suffix}":
                out.append((s, {v.key: v.value for v in s.values}))
    return out


def _event(probe, kind):
    """The "chunk <kind>" status of the chunk sent last, told apart from late statuses of earlier chunks by
    the filter's running count of chunks (each gets one verdict), which equals the number the probe sent."""
    total = lambda kv: sum(int(kv.get(f"chunks.{v}", 0)) for v in ("pass", "modified", "truncated", "rejected"))  # noqa: E731
    return [(s, kv) for s, kv in _statuses(probe.rec, f"chunk {kind}") if total(kv) == probe.sent]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    logs = tmp_path_factory.mktemp("safety")
    # A chunk is stamped with the newest joint state the probe has and reaches the filter a DDS hop and a
    # busy machine later, in simulated time: half real time and max_chunk_age_s 2 s keep that lag from
    # making it stale (the stale test sends a chunk 5 s old), and the chunks' first points lie 1 s ahead.
    with LaunchedGraph("sim.launch.xml", "policy:=none", "seed:=3", "real_time_factor:=0.5", log_path=logs / "sim.log"):
        node = start_process(
            node_cmd(
                "safety_filter_node",
                "--params-file",
                str(REPO / "config" / "safety_filter.yaml"),
                "-p",
                "use_sim_time:=true",
                "-p",
                "max_chunk_age_s:=2.0",
            ),
            logs / "node.log",
        )
        probe = Probe("safety_test_probe")
        rec = {"js": [], "safe": [], "diag": [], "resets": []}
        n = probe.node
        n.create_subscription(
            Header, EPISODE_RESET_TOPIC, lambda m: rec["resets"].append(reset_from_msg(m)[0]), episode_reset_qos()
        )
        n.create_subscription(JointState, "/joint_states", lambda m: rec["js"].append(m), 50)
        n.create_subscription(JointTrajectory, "/vla/safe_action_chunk", lambda m: rec["safe"].append(m), 50)
        n.create_subscription(DiagnosticArray, "/diagnostics", lambda m: rec["diag"].append(m), 200)
        probe.pub = n.create_publisher(JointTrajectory, "/vla/action_chunk", 10)
        probe.rec, probe.sent = rec, 0
        try:
            ready = probe.spin_until(
                lambda: (
                    len(rec["js"]) > 5
                    and any(
                        kv.get("robot") == "vla_arm" and s.message == "filtering" for s, kv in _statuses(rec, "filter")
                    )
                ),
                120,
            )
            assert ready, (logs / "node.log").read_text()[-3000:] + (logs / "sim.log").read_text()[-2000:]
            yield probe
        finally:
            probe.close()
            problem = stop_cleanly(node, logs / "node.log")
        assert not problem, problem


def _latest(probe):
    m = probe.rec["js"][-1]
    pos = dict(zip(m.name, m.position))
    return np.array([pos[j] for j in COMMANDED_JOINTS]), m.header.stamp


def _send_and_wait(probe, msg, wall_s=20.0):
    probe.rec["safe"].clear()
    probe.rec["diag"].clear()
    probe.pub.publish(msg)
    probe.sent += 1
    stamp_ns = ns_from_time_msg(msg.header.stamp)
    got = probe.spin_until(
        lambda: (
            any(ns_from_time_msg(m.header.stamp) == stamp_ns for m in probe.rec["safe"]) or _event(probe, "rejected")
        ),
        wall_s,
    )
    return [m for m in probe.rec["safe"] if ns_from_time_msg(m.header.stamp) == stamp_ns] if got else []


def test_benign_chunk_passes_unchanged_with_its_stamp(graph):
    # The first point 1 s after the stamp: points the chunk reaches the filter after are (rightly) dropped.
    # A probe that runs behind on a loaded machine stamps with an old joint state: then it sends again.
    for _ in range(3):
        q, stamp = _latest(graph)
        pts = q + np.outer(
            np.arange(1, 11) / 10, np.r_[0.0, -0.05, 0.05, 0.1, -0.05, 0.1, -0.01]
        )  # pan still: see below
        msg = _traj(pts, 0.1, stamp, t0=1.0)
        out = _send_and_wait(graph, msg)
        assert len(out) == 1, _event(graph, "rejected")
        times = lambda m: [seconds_from_duration_msg(p.time_from_start) for p in m.points]  # noqa: E731
        if len(out[0].points) == len(msg.points) and times(out[0]) == pytest.approx(times(msg), abs=1e-9):
            break
        graph.spin_for_sim(0.5)  # modified (points dropped as past, or stretched from a moved state): again
    got = out[0]
    assert got.header.frame_id == "base_link" and list(got.joint_names) == list(COMMANDED_JOINTS)
    assert [list(p.positions) for p in got.points] == [list(p.positions) for p in msg.points]
    assert [seconds_from_duration_msg(p.time_from_start) for p in got.points] == pytest.approx(
        [seconds_from_duration_msg(p.time_from_start) for p in msg.points], abs=1e-9
    )


def test_chunk_through_the_table_is_cut_and_reported(graph):
    q, stamp = _latest(graph)
    pts = q + np.linspace(0.0, 1.0, 31)[1:, None] * (DIVE - q)
    out = _send_and_wait(graph, _traj(pts, 0.2, stamp, t0=1.0))
    assert len(out) == 1 and 0 < len(out[0].points) < 30
    assert graph.spin_until(lambda: _event(graph, "truncated"), 30)
    status, kv = _event(graph, "truncated")[-1]
    # on a loaded machine the chunk may arrive after its first points' times: those are dropped, so the
    # output starts at input index f (found by its positions) and ends right before the first unsafe one
    f = int(np.argmin(np.abs(pts - np.asarray(out[0].points[0].positions)).sum(axis=1)))
    np.testing.assert_allclose(out[0].points[0].positions, pts[f], atol=1e-9)
    assert kv["reason"] in ("table_collision", "stopping_distance")
    assert int(kv["first_unsafe_index"]) == f + len(out[0].points), (f, kv)
    assert int(kv["points_out"]) == len(out[0].points)


@pytest.mark.parametrize(
    "make, code",
    [
        (lambda q, stamp: _traj([np.r_[q[:2], np.nan, q[3:]]] * 3, 0.1, stamp), "non_finite"),
        (lambda q, stamp: _traj([q, q], 0.1, stamp, names=["bogus"] + list(COMMANDED_JOINTS[1:])), "unknown_joint"),
        (lambda q, stamp: _traj([q, q, q], -0.1, stamp, t0=0.5), "non_increasing_time"),
        (
            lambda q, stamp: _traj(
                [q + 0.01], 0.1, type(stamp)(sec=max(stamp.sec - STALE_S, 0), nanosec=stamp.nanosec)
            ),
            "stale_chunk",
        ),
        (
            lambda q, stamp: JointTrajectory(joint_names=list(COMMANDED_JOINTS), header=_traj([q], 0.1, stamp).header),
            "empty_chunk",
        ),
    ],
)
def test_bad_chunks_are_rejected_with_the_reason_and_nothing_passes(graph, make, code):
    q, stamp = _latest(graph)
    if code == "stale_chunk":  # old, but not from before the newest episode began (that is before_reset)
        # on the joint states' own stamps: /clock may run ahead of them on a loaded machine
        since = max([0] + graph.rec["resets"]) * 1e-9 + STALE_S + 0.5
        assert graph.spin_until(lambda: ns_from_time_msg(_latest(graph)[1]) * 1e-9 >= since, 120), (
            "joint states stopped"
        )
        q, stamp = _latest(graph)
    out = _send_and_wait(graph, make(q, stamp))
    assert out == []
    assert graph.spin_until(lambda: _event(graph, "rejected"), 30)
    status, kv = _event(graph, "rejected")[-1]
    assert kv["reason"] == code and status.message.startswith(code)
    assert int(kv[f"rejected.{code}"]) >= 1


def _pv(value) -> ParameterValue:
    if isinstance(value, bool):
        return ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value)
    if isinstance(value, int):
        return ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=value)
    if isinstance(value, float):
        return ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=value)
    return ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY, string_array_value=value)


def _set(probe, name, value, node="safety_filter"):
    client = probe.node.create_client(SetParameters, f"/{node}/set_parameters")
    result = probe.call(client, SetParameters.Request(parameters=[ParameterMsg(name=name, value=_pv(value))]))
    return result.results[0]


def _get(probe, name, node="safety_filter"):
    from rcl_interfaces.srv import GetParameters

    client = probe.node.create_client(GetParameters, f"/{node}/get_parameters")
    v = probe.call(client, GetParameters.Request(names=[name])).values[0]
    return {
        ParameterType.PARAMETER_BOOL: v.bool_value,
        ParameterType.PARAMETER_INTEGER: v.integer_value,
        ParameterType.PARAMETER_DOUBLE: v.double_value,
    }.get(v.type, list(v.string_array_value))


def _filter_values(probe):
    """The newest periodic 'filter' status values (published every second)."""
    n = len(_statuses(probe.rec, "filter"))
    assert probe.spin_until(lambda: len(_statuses(probe.rec, "filter")) > n, 20)
    return _statuses(probe.rec, "filter")[-1][1]


def test_a_huge_chunk_is_refused_before_it_is_deserialized(graph):
    q, stamp = _latest(graph)
    msg = _traj([q], 0.1, stamp)
    msg.points = [msg.points[0]] * 100_000
    assert _send_and_wait(graph, msg, wall_s=60) == []
    status, kv = _statuses(graph.rec, "chunk rejected")[-1]
    assert (
        kv["reason"] == "too_many_points"
        and "100000 points > max_chunk_points=1000 (refused before deserializing)" in kv["detail"]
    )


def test_joint_states_are_validated_where_they_arrive_and_refusals_counted(graph):
    """A NaN, an unstamped and a ragged joint state are refused on arrival, each counted under its own
    reason (before, a NaN was noticed only when a chunk came, and not counted; stamp 0 was taken as now)."""
    before = _filter_values(graph)
    pub = graph.node.create_publisher(JointState, "/joint_states", 10)
    q, stamp = _latest(graph)
    nan = JointState(name=list(COMMANDED_JOINTS), position=[float("nan")] + list(q[1:]))
    nan.header.stamp = stamp
    unstamped = JointState(name=list(COMMANDED_JOINTS), position=list(q))
    ragged = JointState(name=list(COMMANDED_JOINTS), position=list(q[:3]))
    ragged.header.stamp = stamp
    codes = ("joint_state_non_finite", "joint_state_unstamped", "joint_state_size")
    assert graph.spin_until(lambda: pub.get_subscription_count() > 0, 20)
    for msg in (nan, unstamped, ragged):
        pub.publish(msg)

    def counted():
        values = _statuses(graph.rec, "filter")[-1][1]
        return all(int(values.get(f"rejected.{c}", 0)) > int(before.get(f"rejected.{c}", 0)) for c in codes)

    assert graph.spin_until(counted, 30), _statuses(graph.rec, "filter")[-1][1]
    graph.node.destroy_publisher(pub)
    # The sim's good joint states still pass chunks.
    q, stamp = _latest(graph)
    assert (
        len(
            _send_and_wait(
                graph, _traj(q + np.outer(np.arange(1, 6) / 50, np.r_[np.ones(6) * 0.1, 0.0]), 0.1, stamp, t0=0.4)
            )
        )
        == 1
    )


def test_after_an_announced_reset_old_chunks_are_refused_and_a_chunk_from_the_measured_state_passes(graph):
    """The episode announcement: chunks stamped before the new episode are refused (before_reset); the
    first chunk of the new episode that starts at the measured state passes (no unreachable_first_point
    deadlock). The announcement is latched (transient local), so this runs late in the module."""
    q_old, stamp_old = _latest(graph)
    # The announcement is stamped with a later joint state: /clock may run ahead of /joint_states on a
    # loaded machine, so wait for the state itself to be 0.1 s newer, not for the clock.
    newer = lambda: ns_from_time_msg(_latest(graph)[1]) - ns_from_time_msg(stamp_old) >= 100_000_000  # noqa: E731
    assert graph.spin_until(newer, 30), "joint states stopped"
    q, stamp = _latest(graph)
    graph.reset_pub = graph.node.create_publisher(Header, EPISODE_RESET_TOPIC, episode_reset_qos())  # kept: latched
    graph.reset_pub.publish(Header(frame_id="7", stamp=stamp))
    # A new publisher is matched by DDS in wall time, which a fixed stretch of sim time may not cover on a
    # loaded machine: the chunk below is sent once the filter says it has taken the announcement.
    episode = lambda: [kv["episode"] for _, kv in _statuses(graph.rec, "inputs")][-1:]  # noqa: E731
    assert graph.spin_until(lambda: episode() == ["7"], 20), episode()
    assert _send_and_wait(graph, _traj([q_old, q_old], 0.1, stamp_old, t0=0.4)) == []
    verdict = _event(graph, "rejected")  # this chunk's own verdict, not a late status of an earlier one
    assert verdict and verdict[-1][1]["reason"] == "before_reset", [(s.message, kv) for s, kv in verdict]
    q, stamp = _latest(graph)
    first = _traj(q + np.outer(np.arange(0, 5) / 50, np.r_[np.ones(6) * 0.05, 0.0]), 0.1, stamp, t0=0.3)
    out = _send_and_wait(graph, first)
    assert len(out) == 1, _statuses(graph.rec, "chunk rejected")[-1:]


def test_a_second_filter_started_with_the_opt_in_may_be_loosened_and_says_so(graph, tmp_path):
    """allow_runtime_loosening:=true (read-only) lets a loosening through, logged at WARN and reported on
    /diagnostics as loosened. On its own topics, so the module's strict filter is untouched."""
    log_path = tmp_path / "loose.log"
    proc = start_process(
        node_cmd(
            "safety_filter_node",
            "-r",
            "__node:=safety_filter_loose",
            "--params-file",
            str(REPO / "config" / "safety_filter.yaml"),
            "-p",
            "use_sim_time:=true",
            "-r",
            "/vla/action_chunk:=/loose/action_chunk",
            "-r",
            "/vla/safe_action_chunk:=/loose/safe_action_chunk",
            "-p",
            "allow_runtime_loosening:=true",
        ),
        log_path,
    )
    try:
        assert graph.spin_until(
            lambda: any(
                s.message == "filtering" for s, _ in _statuses(graph.rec, "filter", node="safety_filter_loose")
            ),
            120,
        ), log_path.read_text()[-2000:]
        assert _set(graph, "table_enabled", False, node="safety_filter_loose").successful
        assert _get(graph, "table_enabled", node="safety_filter_loose") is False
        assert graph.spin_until(
            lambda: any(
                "table_enabled: True -> False (loosened)" in s.message and s.level == DiagnosticStatus.WARN
                for s, _ in _statuses(graph.rec, "parameters", node="safety_filter_loose")
            ),
            20,
        )
        assert (
            "parameter table_enabled: True -> False (loosened) (allowed by allow_runtime_loosening)"
            in log_path.read_text()
        )
    finally:
        problem = stop_cleanly(proc, log_path)
    assert not problem, problem


@pytest.mark.parametrize(
    "name, loose",
    [
        ("table_enabled", False),
        ("check_stopping", False),
        ("workspace_enabled", False),
        ("clearance_m", 0.0),
        ("default_acceleration_rad_s2", 1000.0),
        ("position_margin_rad", 0.0),
        ("max_time_scale", 50.0),
        ("max_chunk_age_s", 5.0),
        ("max_horizon_s", 300.0),
        ("self_clearance_m", 0.0),
    ],
)
def test_every_loosening_at_run_time_is_refused_naming_the_parameter_and_reads_back_unchanged(graph, name, loose):
    was = _get(graph, name)
    result = _set(graph, name, loose)
    assert not result.successful and result.reason.startswith(name) and "allow_runtime_loosening" in result.reason, (
        result.reason
    )
    assert _get(graph, name) == was


def test_removing_an_obstacle_is_refused_adding_one_and_tightening_are_taken_and_reported(graph):
    far_box = ["box name=far center=5,5,5 size=0.1,0.1,0.1"]  # out of reach: changes no chunk of the other tests
    assert _set(graph, "obstacles", far_box).successful
    refused = _set(graph, "obstacles", [""])
    assert not refused.successful and "obstacles: removing or changing" in refused.reason
    assert _get(graph, "obstacles") == far_box
    assert _set(graph, "clearance_m", 0.012).successful  # tightening
    assert _get(graph, "clearance_m") == 0.012
    assert graph.spin_until(
        lambda: any("clearance_m: 0.01 -> 0.012" in s.message for s, _ in _statuses(graph.rec, "parameters")), 20
    )
    values = _filter_values(graph)
    assert values["params.change.0"] == "clearance_m: 0.01 -> 0.012" and int(values["params.refused"]) >= 1


def test_parameter_changes_are_validated_and_never_loosen_the_urdf(graph):
    bad = _set(graph, "velocity_scale", 1.5)
    assert not bad.successful and "velocity_scale" in bad.reason
    loose = _set(graph, "limit_overrides", ["elbow_joint: velocity=9.0"])
    assert not loose.successful and "would loosen the URDF velocity limit 2.5" in loose.reason
    nonsense = _set(graph, "obstacles", ["pyramid center=0,0,0"])
    assert not nonsense.successful and "'pyramid'" in nonsense.reason
    negative = _set(graph, "clearance_m", -0.1)
    assert not negative.successful and "clearance_m" in negative.reason
    # A stricter velocity limit is taken at once: the same benign chunk now comes back slowed down.
    ok = _set(graph, "limit_overrides", ["shoulder_pan_joint: velocity=0.05"])
    assert ok.successful, ok.reason
    q, stamp = _latest(graph)
    pts = q + np.outer(np.arange(1, 11) / 10, np.r_[0.1, 0, 0, 0, 0, 0, 0])  # 0.1 rad/s on the pan joint
    out = _send_and_wait(graph, _traj(pts, 0.1, stamp))
    assert len(out) == 1
    assert seconds_from_duration_msg(out[0].points[-1].time_from_start) > 1.5  # stretched about 2x
    # Taking the override back loosens the limit: refused at run time, so it stays for the rest of the module
    # (the other tests' chunks keep the pan joint still or under 0.05 rad/s).
    back = _set(graph, "limit_overrides", [""])
    assert not back.successful and "shoulder_pan_joint velocity 0.05 -> 2" in back.reason


def test_without_robot_model_or_joint_state_nothing_passes_and_it_says_so():
    """An in-process node on remapped topics: no description, then no joint state, then both."""
    ctx = Context()
    rclpy.init(context=ctx)
    from vla_ros.nodes.safety_filter_node import SafetyFilterNode

    remap = [
        "--ros-args",
        "-r",
        "__node:=safety_filter_alone",
        "-r",
        "/robot_description:=/alone/robot_description",
        "-r",
        "/joint_states:=/alone/joint_states",
        "-r",
        "/vla/action_chunk:=/alone/action_chunk",
        "-r",
        "/vla/safe_action_chunk:=/alone/safe_action_chunk",
        "-p",
        "diagnostics_period_s:=0.2",
    ]
    node = SafetyFilterNode(context=ctx, cli_args=remap)
    peer = Node("alone_probe", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    ex.add_node(peer)
    rec = {"diag": [], "safe": []}
    peer.create_subscription(DiagnosticArray, "/diagnostics", lambda m: rec["diag"].append(m), 100)
    peer.create_subscription(JointTrajectory, "/alone/safe_action_chunk", lambda m: rec["safe"].append(m), 10)
    pub_chunk = peer.create_publisher(JointTrajectory, "/alone/action_chunk", 10)
    pub_js = peer.create_publisher(JointState, "/alone/joint_states", 10)
    pub_desc = peer.create_publisher(String, "/alone/robot_description", LATCHED)

    def wait(pred, wall_s=30.0):
        return spin_until(pred, wall_s, ex.spin_once)

    def mine(suffix):
        return _statuses(rec, suffix, "safety_filter_alone")

    def chunk_now():
        now = node.get_clock().now().to_msg()
        return _traj([np.array(HOME_Q) + 0.01 * k * np.r_[np.ones(6), 0.0] for k in range(1, 4)], 0.1, now)

    try:
        assert wait(lambda: mine("filter"))
        status, kv = mine("filter")[-1]
        assert "nothing passes" in status.message and "no robot model" in status.message
        pub_chunk.publish(chunk_now())
        assert wait(lambda: mine("chunk rejected"))
        assert mine("chunk rejected")[-1][1]["reason"] == "no_robot_model"

        pub_desc.publish(String(data=default_urdf_path().read_text()))
        rec["diag"].clear()
        assert wait(lambda: any("no joint state" in s.message for s, _ in mine("filter"))), [
            s.message for s, _ in mine("filter")
        ]
        pub_chunk.publish(chunk_now())
        assert wait(lambda: mine("chunk rejected"))
        assert mine("chunk rejected")[-1][1]["reason"] == "no_joint_state"

        js = JointState(name=list(COMMANDED_JOINTS), position=list(HOME_Q))
        js.header.stamp = node.get_clock().now().to_msg()
        pub_js.publish(js)
        assert wait(lambda: node._state is not None)
        pub_chunk.publish(chunk_now())
        assert wait(lambda: rec["safe"]), mine("chunk rejected")[-1:] if mine("chunk rejected") else "nothing"
        assert rec["safe"][0].joint_names == list(COMMANDED_JOINTS)
    finally:
        ex.shutdown()
        node.destroy_node()
        peer.destroy_node()
        rclpy.shutdown(context=ctx)


def test_stopped_inputs_are_reported_on_the_steady_clock_while_simulated_time_stands_still():
    """An in-process filter on simulated time whose /clock, joint states and chunks come from this test:
    with the policy silent the inputs status warns naming the chunk topic; with the clock and the joint
    states stopped too (a dead simulator) it is ERROR and says so; the ROS-time joint state age, which
    stood still at a few ms for the whole outage in the issue, is no longer the only witness."""
    import time

    from rosgraph_msgs.msg import Clock as ClockMsg

    from vla_ros.nodes.safety_filter_node import SafetyFilterNode
    from vla_ros.ros.time import time_msg_from_ns

    ctx = Context()
    rclpy.init(context=ctx)
    remap = [
        "--ros-args",
        "-r",
        "__node:=safety_filter_wd",
        "-p",
        "use_sim_time:=true",
        "-r",
        "/clock:=/wd/clock",
        "-r",
        "/joint_states:=/wd/joint_states",
        "-r",
        "/vla/action_chunk:=/wd/action_chunk",
        "-r",
        "/vla/safe_action_chunk:=/wd/safe_action_chunk",
        "-p",
        f"robot_description_file:={default_urdf_path()}",
        "-p",
        "diagnostics_period_s:=0.2",
    ]
    node = SafetyFilterNode(context=ctx, cli_args=remap)
    peer = Node("wd_probe", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    ex.add_node(peer)
    inputs = []
    peer.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda m: inputs.extend(
            (s, {v.key: v.value for v in s.values}) for s in m.status if s.name == "safety_filter_wd: inputs"
        ),
        100,
    )
    clock_pub = peer.create_publisher(ClockMsg, "/wd/clock", 10)
    js_pub = peer.create_publisher(JointState, "/wd/joint_states", 10)
    chunk_pub = peer.create_publisher(JointTrajectory, "/wd/action_chunk", 10)
    sim = {"ns": 50_000_000_000, "clock": True, "chunks": True}

    def tick():
        if not sim["clock"]:
            return
        sim["ns"] += 10_000_000
        clock_pub.publish(ClockMsg(clock=time_msg_from_ns(sim["ns"])))
        js = JointState(name=list(COMMANDED_JOINTS), position=list(HOME_Q))
        js.header.stamp = time_msg_from_ns(sim["ns"])
        js_pub.publish(js)
        if sim["chunks"] and sim["ns"] % 100_000_000 == 0:
            chunk_pub.publish(_traj([np.array(HOME_Q)] * 3, 0.1, time_msg_from_ns(sim["ns"])))

    peer.create_timer(0.01, tick)

    def spin_until(pred, wall_s=30.0):
        end = time.monotonic() + wall_s
        while time.monotonic() < end:
            ex.spin_once(timeout_sec=0.02)
            if pred():
                return True
        return False

    latest = lambda: inputs[-1] if inputs else (DiagnosticStatus(), {})  # noqa: E731
    try:
        assert spin_until(
            lambda: latest()[0].message == "all inputs arriving" and latest()[1]["silence_s.chunks"] != "never"
        ), latest()
        assert latest()[0].level == DiagnosticStatus.OK
        sim["chunks"] = False
        assert spin_until(lambda: "no chunk on /wd/action_chunk" in latest()[0].message), latest()
        assert latest()[0].level == DiagnosticStatus.WARN and "policy dead, frozen or idle?" in latest()[0].message
        sim["clock"] = False
        assert spin_until(
            lambda: "simulated time (/clock)" in latest()[0].message and "no joint states" in latest()[0].message
        ), latest()
        assert latest()[0].level == DiagnosticStatus.ERROR and "simulator dead or paused?" in latest()[0].message
        assert float(latest()[1]["silence_s.joint_states"]) > 0.5
        sim["clock"] = sim["chunks"] = True
        assert spin_until(lambda: latest()[0].level == DiagnosticStatus.OK), latest()
    finally:
        ex.shutdown()
        node.destroy_node()
        peer.destroy_node()
        rclpy.shutdown(context=ctx)
