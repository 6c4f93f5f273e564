"""sim.launch.xml through the launch runner: real processes, real DDS, simulated time.

One launched graph serves the whole module (starting MuJoCo and DDS discovery costs seconds).
"""

import json

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from image_checks import assert_cups_visible
from ros_helpers import LaunchedGraph, Probe
from vla_ros.ros.time import duration_msg_from_s, ns_from_time_msg
from vla_ros.sim import HOME_Q, ArmSim

COMMAND_JOINTS = [
    "shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "forearm_roll_joint",
    "wrist_pitch_joint", "wrist_roll_joint", "left_finger_joint",
]
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    log = tmp_path_factory.mktemp("launch") / "sim.log"
    with LaunchedGraph("sim.launch.xml", "policy:=none", "seed:=3", log_path=log) as g:
        probe = Probe("sim_test_probe")
        rec = {"js": [], "img": [], "info": [], "diag": [], "status": None, "description": None}
        n = probe.node
        n.create_subscription(JointState, "/joint_states", lambda m: rec["js"].append(m), 200)
        n.create_subscription(Image, "/camera/image_raw", lambda m: rec["img"].append(m), 50)
        n.create_subscription(CameraInfo, "/camera/camera_info", lambda m: rec["info"].append(m), 50)
        n.create_subscription(DiagnosticArray, "/diagnostics", lambda m: rec["diag"].append(m), 50)
        n.create_subscription(String, "/vla/episode_status", lambda m: rec.__setitem__("status", json.loads(m.data)), LATCHED)
        n.create_subscription(String, "/robot_description", lambda m: rec.__setitem__("description", m.data), LATCHED)
        probe.rec = rec
        probe.pub_cmd = n.create_publisher(Float64MultiArray, "/forward_position_controller/commands", 10)
        probe.pub_traj = n.create_publisher(JointTrajectory, "/joint_trajectory_controller/joint_trajectory", 10)
        assert probe.spin_until(lambda: len(rec["js"]) > 5 and rec["status"] is not None, 90), log.read_text()[-3000:]
        yield probe
        probe.close()
    assert g.proc.returncode == 0, log.read_text()[-3000:]


def latest_q(probe) -> np.ndarray:
    m = probe.rec["js"][-1]
    pos = dict(zip(m.name, m.position))
    return np.array([pos[j] for j in COMMAND_JOINTS])


def test_rates_and_stamps_over_ten_simulated_seconds(graph):
    rec = graph.rec
    rec["js"].clear()
    rec["img"].clear()
    rec["info"].clear()
    graph.spin_for_sim(10.0, wall_timeout_s=120)
    js = np.array([ns_from_time_msg(m.header.stamp) for m in rec["js"]]) * 1e-9
    img = np.array([ns_from_time_msg(m.header.stamp) for m in rec["img"]]) * 1e-9
    assert js[-1] - js[0] >= 9.5
    # The rates are rates of simulated time: every stamp lies one period (or, where this busy probe missed
    # a message, a whole number of periods) after the one before, never less.
    for stamps, rate_hz in ((js, 100.0), (img, 30.0)):
        steps = np.diff(stamps) * rate_hz
        assert np.all(np.abs(steps - np.round(steps)) < 1e-3) and np.round(steps).min() == 1, (rate_hz, steps)
    m = rec["img"][-1]
    assert (m.encoding, m.width, m.height, m.step) == ("rgb8", 320, 240, 960)
    info_stamps = {ns_from_time_msg(i.header.stamp) for i in rec["info"]}
    assert ns_from_time_msg(rec["img"][-2].header.stamp) in info_stamps  # camera_info goes with each frame
    info = rec["info"][-1]
    assert info.k[0] > 0 and info.width == 320 and info.height == 240
    assert set(COMMAND_JOINTS) <= set(rec["js"][-1].name)


def test_robot_description_is_latched_urdf(graph):
    desc = graph.rec["description"]
    assert desc is not None and "<robot name=\"vla_arm\"" in desc
    for joint in COMMAND_JOINTS:
        assert f'name="{joint}"' in desc


def test_image_shows_the_three_cups_where_they_project(graph):
    """On a fresh episode, so the arm is at home whatever the tests before did, in a frame taken after it."""
    episode = graph.rec["status"]["episode"]
    graph.call(graph.node.create_client(Trigger, "/sim/reset"), Trigger.Request())
    assert graph.spin_until(lambda: graph.rec["status"]["episode"] > episode, 30)
    t_reset = graph.rec["status"]["time_s"]
    assert graph.spin_until(lambda: graph.rec["img"] and ns_from_time_msg(graph.rec["img"][-1].header.stamp) * 1e-9 > t_reset + 0.05, 30)
    status = graph.rec["status"]
    model = ArmSim(seed=status["seed"])  # same camera model; used only for projection
    m = graph.rec["img"][-1]
    img = np.frombuffer(bytes(m.data), np.uint8).reshape(m.height, m.width, 3)
    assert_cups_visible(img, model, status["cups"])
    model.close()


def test_commanded_target_is_reached(graph):
    target = np.array(HOME_Q) + np.array([0.3, -0.15, 0.2, 0.2, -0.2, 0.4, -0.015])
    graph.pub_cmd.publish(Float64MultiArray(data=target.tolist()))
    t_end = graph.now_s() + 4.0
    reached = graph.spin_until(lambda: np.abs(latest_q(graph) - target).max() < 0.01 or graph.now_s() > t_end, 120)
    assert reached and np.abs(latest_q(graph) - target).max() < 0.01, latest_q(graph) - target


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


def test_bad_commands_are_rejected_with_diagnostics_and_the_arm_does_not_move(graph):
    graph.spin_for_sim(1.0)
    q0 = latest_q(graph)
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
    inf_cmd = home[:2] + [float("inf")] + home[3:]
    graph.pub_traj.publish(_traj(COMMAND_JOINTS, [0.5], [inf_cmd]))
    graph.spin_for_sim(1.0)
    assert np.abs(latest_q(graph) - q0).max() < 1e-3, latest_q(graph) - q0
    details = _rejections(graph)
    assert "bogus" in details["unknown_joint"] and "shoulder_pan_joint" in details["outside_limits"]


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
