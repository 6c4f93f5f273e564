"""Our side of the ros2_control contracts, checked against upstream's documented rules (Gazebo and real
ros2_control cannot run here).

* JTC's message validation per distro (``validate_jtc_trajectory``) and the joint-set/order rules
  (``check_controller_joints``), on hand-made messages that show each rule can fail.
* Every JointTrajectory a real controller_node process emits while it drives the MuJoCo sim through
  chunks, blends, a chunk running out and an e-stop passes JTC's validation on Humble, Jazzy and Kilted,
  with the defaults and with the parameters of config/ros2_controllers.yaml; and consecutive messages join
  without a jump, so JTC replacing one by the next moves nothing.
* The joint check against a real rclpy process that plays ros2_control's controller nodes: a forward
  controller configured with another order gets nothing and an ERROR is reported; a JTC with the same set
  in another order is verified and its messages flow.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from ros_helpers import (
    REPO,
    LaunchedGraph,
    Probe,
    controller_trusts,
    node_cmd,
    override_params,
    spin_until,
    start_process,
    stop,
)
from std_msgs.msg import String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros.chunks import COMMANDED_JOINTS, ActionChunk
from vla_ros.control.ros2_control import JTC_DISTROS, check_controller_joints, controlled_stop, validate_jtc_trajectory
from vla_ros.ros.chunk_msgs import msg_from_chunk
from vla_ros.ros.time import ns_from_time_msg

JOINTS = list(COMMANDED_JOINTS)
JTC_TOPIC = "/joint_trajectory_controller/joint_trajectory"


def ros2_controllers_yaml() -> dict:
    return yaml.safe_load((REPO / "config" / "ros2_controllers.yaml").read_text())


def recommended_jtc_params() -> dict:
    """The JTC parameters config/ros2_controllers.yaml (the README's controller file) sets that bear on validation."""
    p = ros2_controllers_yaml()["joint_trajectory_controller"]["ros__parameters"]
    return {k: p[k] for k in ("allow_partial_joints_goal", "allow_nonzero_velocity_at_trajectory_end") if k in p}


def traj(names, points, stamp_ns=0, tfs_s=None, velocities=None, effort=None) -> JointTrajectory:
    msg = JointTrajectory(joint_names=list(names))
    msg.header.stamp = Time(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)
    tfs_s = tfs_s if tfs_s is not None else [0.01 * (k + 1) for k in range(len(points))]
    for k, q in enumerate(points):
        ns = round(tfs_s[k] * 1e9)
        p = JointTrajectoryPoint(
            positions=[float(x) for x in q], time_from_start=Duration(sec=ns // 10**9, nanosec=ns % 10**9)
        )
        if velocities is not None:
            p.velocities = [float(x) for x in velocities[k]]
        if effort is not None:
            p.effort = [float(x) for x in effort]
        msg.points.append(p)
    return msg


# ---- upstream's rules, each shown to fail ------------------------------------------------------------
def test_jtc_validation_follows_each_distros_rules():
    q = np.zeros((3, 7))
    ok = traj(JOINTS, q, velocities=np.zeros((3, 7)))
    now = 5 * 10**9
    assert all(validate_jtc_trajectory(ok, JOINTS, now, d) is None for d in JTC_DISTROS)
    # The velocity at the end: allowed by Humble's default, refused by Jazzy's and Kilted's.
    moving = traj(JOINTS, q, velocities=np.full((3, 7), 0.1))
    assert validate_jtc_trajectory(moving, JOINTS, now, "humble") is None
    for d in ("jazzy", "kilted"):
        assert "last trajectory point" in validate_jtc_trajectory(moving, JOINTS, now, d)
        assert (
            validate_jtc_trajectory(moving, JOINTS, now, d, {"allow_nonzero_velocity_at_trajectory_end": True}) is None
        )
    tiny = traj(JOINTS, q, velocities=np.full((3, 7), 1e-8))  # below float epsilon counts as zero
    assert validate_jtc_trajectory(tiny, JOINTS, now, "jazzy") is None
    # Joint set: all of them, none unknown; the order is free.
    assert "don't match" in validate_jtc_trajectory(traj(JOINTS[:6], q[:, :6]), JOINTS, now, "kilted")
    assert (
        validate_jtc_trajectory(traj(JOINTS[:6], q[:, :6]), JOINTS, now, "kilted", {"allow_partial_joints_goal": True})
        is None
    )
    assert "bogus" in validate_jtc_trajectory(traj(JOINTS[:6] + ["bogus"], q), JOINTS, now, "humble")
    assert validate_jtc_trajectory(traj(JOINTS[::-1], q), JOINTS, now, "humble") is None
    # Times: strictly increasing, a first point at 0 allowed.
    assert validate_jtc_trajectory(traj(JOINTS, q, tfs_s=[0.0, 0.01, 0.02]), JOINTS, now, "jazzy") is None
    assert "strictly increasing" in validate_jtc_trajectory(
        traj(JOINTS, q, tfs_s=[0.0, 0.02, 0.02]), JOINTS, now, "jazzy"
    )
    # Stamp: 0 starts on arrival; a non-zero stamp whose trajectory is over by now is dropped.
    assert validate_jtc_trajectory(traj(JOINTS, q, stamp_ns=0), JOINTS, 10**12, "jazzy") is None
    late = traj(JOINTS, q, stamp_ns=now - 31_000_000)  # ends 30 ms after its stamp, received 31 ms after it
    assert all("ends in the past" in validate_jtc_trajectory(late, JOINTS, now, d) for d in JTC_DISTROS)
    assert validate_jtc_trajectory(traj(JOINTS, q, stamp_ns=now - 29_000_000), JOINTS, now, "jazzy") is None
    # Field sizes and effort.
    short = traj(JOINTS, q, velocities=np.zeros((3, 6)))
    assert "velocities (6)" in validate_jtc_trajectory(short, JOINTS, now, "humble")
    assert "no points" not in (validate_jtc_trajectory(traj(JOINTS, []), JOINTS, now, "humble") or "no points")
    with_effort = traj(JOINTS, q, effort=np.zeros(7))
    assert all("effort" in validate_jtc_trajectory(with_effort, JOINTS, now, d) for d in JTC_DISTROS)
    assert validate_jtc_trajectory(with_effort, JOINTS, now, "jazzy", {"effort_command_interface": True}) is None
    assert validate_jtc_trajectory(
        with_effort, JOINTS, now, "humble", {"effort_command_interface": True}
    )  # Humble: never


def test_the_joint_check_compares_order_for_forward_controllers_and_sets_for_jtc():
    shuffled = [JOINTS[i] for i in (5, 0, 6, 2, 1, 4, 3)]
    assert check_controller_joints("forward_position", JOINTS, JOINTS) is None
    assert "order differs" in check_controller_joints("forward_position", JOINTS, shuffled)
    assert "order differs" in check_controller_joints("forward_position", JOINTS, JOINTS[:6])
    assert "'velocity'" in check_controller_joints("forward_position", JOINTS, JOINTS, interface_name="velocity")
    assert check_controller_joints("joint_trajectory", JOINTS, shuffled) is None
    assert "no joints ['left_finger_joint']" in check_controller_joints("joint_trajectory", JOINTS, JOINTS[:6])
    assert "do not send joints ['extra_joint']" in check_controller_joints(
        "joint_trajectory", JOINTS, JOINTS + ["extra_joint"]
    )
    assert check_controller_joints("joint_trajectory", JOINTS, JOINTS + ["extra_joint"], allow_partial=True) is None
    assert "empty" in check_controller_joints("joint_trajectory", JOINTS, [])


def hermite(t0, t1, q0, v0, q1, v1, t):
    """Cubic Hermite between (q0, v0) at t0 and (q1, v1) at t1: JTC's spline for positions + velocities."""
    h = t1 - t0
    s = (t - t0) / h
    return (
        (2 * s**3 - 3 * s**2 + 1) * q0
        + (s**3 - 2 * s**2 + s) * h * v0
        + (-2 * s**3 + 3 * s**2) * q1
        + (s**3 - s**2) * h * v1
    )


def test_the_controlled_stop_brakes_within_the_limits_along_a_parabola():
    q, v = np.array([0.1, -0.2, 1.98]), np.array([1.0, -0.5, 0.4])
    amax = np.array([10.0, 10.0, 2.0])
    lower, upper = np.full(3, -2.0), np.full(3, 2.0)
    duration, q_end = controlled_stop(q, v, amax, lower, upper, 0.01)
    assert duration == pytest.approx(0.2)  # joint 3 needs 0.4 / 2.0; the others brake less hard
    np.testing.assert_allclose(q_end[:2], q[:2] + v[:2] * 0.1)
    assert q_end[2] == 2.0  # 1.98 + 0.04 is past the limit: clamped
    ts = np.linspace(0.0, duration, 9)
    np.testing.assert_allclose(
        hermite(0.0, duration, q[:2], v[:2], q_end[:2], 0.0, ts[:, None]),
        q[:2] + np.outer(ts, v[:2]) - np.outer(ts**2, v[:2] / (2 * duration)),
        atol=1e-12,
    )
    assert controlled_stop(q, np.zeros(3), amax, lower, upper, 0.01)[0] == 0.01  # at rest: one period, no motion


def test_the_shipped_controller_file_matches_the_controller_nodes_joints_and_the_docs():
    from vla_ros.params import controller
    from vla_ros.params.spec import values_from_yaml

    # the joints controller_node runs with from its shipped file (empty there: the bundled arm's, from its URDF)
    values = values_from_yaml(controller.PARAMS, [REPO / "config" / "controller.yaml"], "controller")
    ours = list(controller.config_from_params(values).joint_names)
    assert ours == list(COMMANDED_JOINTS)
    shipped = ros2_controllers_yaml()
    assert shipped["forward_position_controller"]["ros__parameters"]["joints"] == ours  # by index: same order
    jtc = shipped["joint_trajectory_controller"]["ros__parameters"]
    assert check_controller_joints("joint_trajectory", ours, jtc["joints"]) is None and jtc["joints"] == ours
    assert jtc["command_interfaces"] == ["position"]
    assert jtc["allow_nonzero_velocity_at_trajectory_end"] is False  # the strictest setting: what we must pass
    types = {k: v["type"] for k, v in shipped["controller_manager"]["ros__parameters"].items() if isinstance(v, dict)}
    assert types == {
        "joint_state_broadcaster": "joint_state_broadcaster/JointStateBroadcaster",
        "forward_position_controller": "position_controllers/JointGroupPositionController",
        "joint_trajectory_controller": "joint_trajectory_controller/JointTrajectoryController",
    }
    # The documentation shows this very file.
    doc = (REPO / "docs" / "simulators.md").read_text()
    blocks = [b.split("\n", 1)[1] for b in doc.split("```")[1::2] if b.startswith("yaml\n")]
    assert any(yaml.safe_load(b) == shipped for b in blocks)


# ---- a real controller process driving the sim through JTC's interface -------------------------------
def start_controller(log_path, *ros_args: str) -> subprocess.Popen:
    return start_process(node_cmd("controller_node", *ros_args), log_path)


def sample_message(msg: JointTrajectory, t_ns: int) -> np.ndarray:
    """JTC's sample of ``msg`` at ``t_ns`` (its stamp is the start, its points have positions and velocities),
    in the message's joint order; holds the last point after the end."""
    stamp = ns_from_time_msg(msg.header.stamp)
    times = np.array([stamp + ns_from_time_msg(p.time_from_start) for p in msg.points], dtype=np.float64)
    assert times[0] <= t_ns, "sampled before its first point: JTC would start from its own state"
    k = int(np.searchsorted(times, t_ns, side="right"))
    if k >= len(times):
        return np.array(msg.points[-1].positions)
    a, b = msg.points[k - 1], msg.points[k]
    return hermite(
        times[k - 1] * 1e-9,
        times[k] * 1e-9,
        np.array(a.positions),
        np.array(a.velocities),
        np.array(b.positions),
        np.array(b.velocities),
        t_ns * 1e-9,
    )


def test_every_streamed_trajectory_passes_jtc_validation_and_they_join_without_a_jump(tmp_path):
    received = []  # every JointTrajectory the controller emits
    states = []
    with LaunchedGraph(
        "sim.launch.xml",
        "policy:=none",
        "image_width:=64",
        "image_height:=48",
        "real_time_factor:=0.5",
        log_path=tmp_path / "sim.log",
    ) as g:
        ctl = start_controller(
            tmp_path / "controller.log",
            "--params-file",
            str(REPO / "config" / "controller.yaml"),
            "-p",
            "use_sim_time:=true",
            "-p",
            "output_interface:=joint_trajectory",
            "--params-file",
            override_params(tmp_path / "trust.yaml", "controller", trusted_publishers=["/jtc_stream_probe"]),
        )
        probe = Probe("jtc_stream_probe")
        try:
            n = probe.node
            n.create_subscription(JointTrajectory, JTC_TOPIC, received.append, 500)

            inputs = []

            def on_diag(msg):
                states.extend(
                    {kv.key: kv.value for kv in s.values} | {"_message": s.message}
                    for s in msg.status
                    if s.name == "controller: state"
                )
                inputs.extend(
                    {kv.key: kv.value for kv in s.values} for s in msg.status if s.name == "controller: inputs"
                )

            n.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 50)
            pub = n.create_publisher(JointTrajectory, "/vla/safe_action_chunk", 10)
            estop = n.create_client(Trigger, "/controller/estop")
            resume = n.create_client(Trigger, "/controller/resume")
            assert probe.spin_until(lambda: len(received) > 20 and pub.get_subscription_count() > 0, 120), (
                tmp_path / "controller.log"
            ).read_text()[-3000:]
            assert probe.spin_until(lambda: controller_trusts(inputs, "/jtc_stream_probe"), 60), inputs[-1:]

            def now_s():
                return probe.now_s()

            def current() -> np.ndarray:
                return np.array(received[-1].points[0].positions)  # JOINTS order (the controller's)

            def send(q_from, delta, duration_s=1.0, stamp_s=None):
                k = int(duration_s / 0.02) + 1
                s = np.clip(np.arange(k) / (k - 1), 0.0, 1.0)
                path = q_from + np.outer((1.0 - np.cos(np.pi * s)) / 2.0, delta)
                stamp = now_s() if stamp_s is None else stamp_s
                pub.publish(msg_from_chunk(ActionChunk(tuple(JOINTS), round(stamp * 1e9), 0.02 * np.arange(k), path)))

            delta = np.array([0.2, -0.15, 0.15, -0.2, 0.1, 0.25, -0.01])
            q0 = current()
            for _ in range(3):  # a chunk refused on arrival (a loaded machine) is sent again, stamped anew
                t0 = now_s()
                send(q0, delta)  # a 1 s move
                probe.spin_for_sim(0.4)
                if np.abs(current() - q0).max() > 1e-3:
                    break
            assert np.abs(current() - q0).max() > 1e-3, (states[-1:], (tmp_path / "controller.log").read_text()[-2000:])
            send(q0, 1.3 * delta, stamp_s=t0)  # a new chunk mid-move: blended in
            probe.spin_for_sim(1.2)  # it runs out and the arm stops
            q1 = current()
            np.testing.assert_allclose(q1, q0 + 1.3 * delta, atol=1e-6)
            send(q1, -delta, duration_s=2.0)
            probe.spin_for_sim(0.5)
            assert probe.call(estop, Trigger.Request()).success  # braking from full speed
            probe.spin_for_sim(0.5)
            assert probe.call(resume, Trigger.Request()).success
            probe.spin_for_sim(0.2)
        finally:
            code = stop(ctl)
            probe.close()
    log = (tmp_path / "controller.log").read_text()
    assert code == 0 and "control cycle failed" not in log, log[-3000:]
    assert "in joint order " + str(JOINTS) in log  # reported at start-up
    assert g.proc.returncode == 0

    assert len(received) > 100, len(
        received
    )  # about 3 s of simulated time at up to 100 Hz (fewer when the machine is busy)
    # JTC's stamp rule refuses a trajectory that is over when it arrives. Our side of it: stamped with the
    # sender's clock and still running a look-ahead (5 periods) later, so judged as arriving late_s after
    # its stamp. (How late messages really arrive depends on this machine's load, not on the messages.)
    late_s = 0.05
    for distro in JTC_DISTROS:
        for params in ({}, recommended_jtc_params()):
            reasons = {
                validate_jtc_trajectory(
                    m, JOINTS, ns_from_time_msg(m.header.stamp) + round(late_s * 1e9), distro, params
                )
                for m in received
            }
            assert reasons == {None}, (distro, params, reasons)
    speeds = []
    for m in received:
        assert list(m.joint_names) == JOINTS and ns_from_time_msg(m.header.stamp) > 0
        assert ns_from_time_msg(m.points[0].time_from_start) == 0  # starts from its own first point
        assert len(m.points) == 7 and not any(m.points[-1].velocities)  # 5 periods of look-ahead, then at rest
        speeds.append(np.abs(m.points[0].velocities).max())
    assert max(speeds) > 0.3  # the messages covered fast motion, not only holds
    # JTC replaces each trajectory by the next when it arrives: where the old one would be at the new one's
    # stamp is where the new one starts, so the switch moves nothing. Where the plan changes (the e-stop) the
    # two differ by what a change of acceleration does between the two stamps: braking at the limit
    # (10 rad/s^2) against the old plan's own acceleration (at most the limit too), at most a t^2.
    excess = []
    for a, b in zip(received, received[1:]):
        t = ns_from_time_msg(b.header.stamp)
        dt = (t - ns_from_time_msg(a.header.stamp)) * 1e-9
        jump = np.abs(sample_message(a, t) - np.array(b.points[0].positions)).max()
        excess.append(jump - (10.0 * dt**2 + 1e-6))
    assert max(excess) <= 0.0, (max(excess), int(np.argmax(excess)))
    assert any(s.get("stops.estop") == "1" for s in states)


# ---- the joint check against a process playing ros2_control ------------------------------------------
def test_the_controller_sends_only_to_a_ros2_control_controller_configured_with_its_joints(tmp_path):
    """Two controller processes start first (wall time), then the fake ros2_control: a forward controller
    whose joints are in another order, and a JTC with our joints in another order."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node

    swapped = JOINTS[1:] + JOINTS[:1]
    shuffled = [JOINTS[i] for i in (5, 0, 6, 2, 1, 4, 3)]
    env_topic = "/check_test/joint_states"
    ctl_fwd = start_controller(
        tmp_path / "fwd.log",
        "-r",
        "__node:=ctl_fwd",
        "-r",
        f"/joint_states:={env_topic}",
        "-p",
        "position_controller:=vla_fwd",
        "-p",
        "controller_check_timeout_s:=30.0",
    )
    ctl_jtc = start_controller(
        tmp_path / "jtc.log",
        "-r",
        "__node:=ctl_jtc",
        "-r",
        f"/joint_states:={env_topic}",
        "-p",
        "output_interface:=joint_trajectory",
        "-p",
        "trajectory_controller:=vla_jtc",
        "-p",
        "trajectory_stamp:=zero",
    )
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("check_test_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    outputs, fakes = {}, []
    node.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda m: outputs.update(
            {
                s.name.split(":")[0]: (s.level, s.message, {kv.key: kv.value for kv in s.values})
                for s in m.status
                if s.name.endswith(": output")
            }
        ),
        50,
    )
    node.create_subscription(String, "/vla_test/fake_ros2_control", lambda m: fakes.append(json.loads(m.data)), 50)

    def wait(predicate, timeout_s):
        return spin_until(predicate, timeout_s, executor.spin_once)

    fake = None
    try:
        # Before ros2_control is up nobody receives: both wait, sending nothing.
        assert wait(lambda: {"ctl_fwd", "ctl_jtc"} <= set(outputs), 60), [
            p.read_text()[-2000:] for p in tmp_path.glob("*.log")
        ]
        assert all(
            outputs[n][2]["check"] == "no_receiver" and outputs[n][0] == DiagnosticStatus.WARN
            for n in ("ctl_fwd", "ctl_jtc")
        )
        fake = start_process(
            [
                sys.executable,
                str(REPO / "test" / "fake_ros2_control.py"),
                f"forward:vla_fwd:{','.join(swapped)}",
                f"trajectory:vla_jtc:{','.join(shuffled)}",
                "--joint-states",
                ",".join(JOINTS),
                "--ros-args",
                "-r",
                f"/joint_states:={env_topic}",
            ],
            tmp_path / "fake.log",
        )
        assert wait(lambda: fakes and fakes[-1]["vla_jtc"]["received"] > 200, 90), (
            outputs,
            fakes[-1:],
            (tmp_path / "fake.log").read_text()[-2000:],
        )
        assert wait(
            lambda: outputs["ctl_fwd"][2]["check"] == "mismatch" and outputs["ctl_jtc"][2]["check"] == "verified", 30
        ), outputs
        level, message, values = outputs["ctl_fwd"]
        assert level == DiagnosticStatus.ERROR and "order differs" in message and int(values["withheld_cycles"]) > 100
        assert values["controller.joints"] == ",".join(swapped) and values["joints"] == ",".join(JOINTS)
        level, message, values = outputs["ctl_jtc"]
        assert level == DiagnosticStatus.OK and values["controller.joints"] == ",".join(shuffled)
        last = fakes[-1]
        assert last["vla_fwd"]["received"] == 0  # never a command in the wrong order
        # Stamped 0 (start on arrival), no message can arrive too late, however busy this machine is: every
        # rule holds for every message. (Stamped now, JTC's stamp rule is checked on simulated time above.)
        assert last["vla_jtc"]["rejected"] == {d: 0 for d in JTC_DISTROS}, last["vla_jtc"]["reasons"]
    finally:
        codes = [stop(p) for p in (ctl_fwd, ctl_jtc) + ((fake,) if fake else ())]
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert codes[:2] == [0, 0], [p.read_text()[-2000:] for p in (tmp_path / "fwd.log", tmp_path / "jtc.log")]
    assert "vla_fwd: joint order differs" in (tmp_path / "fwd.log").read_text()
