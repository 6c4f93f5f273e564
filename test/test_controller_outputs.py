"""The controller's output interfaces (``vla_ros.ros.controller_outputs``), each on a real rclpy node with a
real chunk executor behind it, its messages taken off DDS by a second node.

The launched controller's outputs (joint order, the sim following JTC) are covered in test_controller_node.py
and test_ros2_control_output.py; these check each class alone: its topic, message type and fill.
"""

import threading

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.control import ChunkExecutor
from vla_ros.control.ros2_control import JTC_DISTROS, validate_jtc_trajectory
from vla_ros.params.controller import OUTPUT_INTERFACES, PARAMS, config_from_params
from vla_ros.params.spec import default_values
from vla_ros.ros.controller_outputs import OUTPUTS, make_output
from vla_ros.ros.time import ns_from_time_msg
from vla_ros.sim import HOME_Q

JOINTS = list(COMMANDED_JOINTS)
PERM = [5, 0, 6, 2, 1, 4, 3]  # an output order unlike the canonical one
PERM_NAMES = [JOINTS[i] for i in PERM]
NOW_NS = 7_000_000_000


@pytest.fixture
def graph():
    """(node the output is created on, executor spinning it and a probe node, probe)."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("outputs_test", context=context)
    probe = Node("outputs_test_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(probe)
    yield node, executor, probe
    executor.shutdown()
    node.destroy_node()
    probe.destroy_node()
    rclpy.try_shutdown(context=context)


def params(**overrides) -> dict:
    return default_values(PARAMS) | {"joints": PERM_NAMES} | overrides


def core_at_home(p: dict) -> ChunkExecutor:
    """An executor holding the arm at HOME (measured state in, one update out)."""
    core = ChunkExecutor(config_from_params(p))
    q = np.asarray(HOME_Q)[PERM]
    assert core.set_measured(q, NOW_NS, NOW_NS) is None
    return core


def send_one(graph, output, msg_type, p: dict):
    """One control cycle through ``output`` (sample under the lock, then publish), the message the probe got."""
    node, executor, probe = graph
    got = []
    probe.create_subscription(msg_type, output.publisher.topic_name, got.append, 10)
    core = core_at_home(p)
    q = core.update(NOW_NS, core.config.period_s)
    assert q is not None
    q = q.tolist()
    k = p["trajectory_points"]
    stop = threading.Event()
    timer = threading.Timer(20.0, stop.set)
    timer.start()
    try:
        while not got and not stop.is_set():  # resent until discovery has matched the probe
            output.sample(core, k)
            output.publish(q, NOW_NS, k)
            executor.spin_once(timeout_sec=0.05)
    finally:
        timer.cancel()
    assert got, f"nothing on {output.publisher.topic_name}"
    return got[-1], q


def test_every_output_interface_parameter_value_has_its_class():
    assert tuple(OUTPUTS) == OUTPUT_INTERFACES
    assert all(cls.name == name for name, cls in OUTPUTS.items())


def test_an_unknown_interface_is_refused_with_the_choices(graph):
    with pytest.raises(ValueError, match="output_interface must be one of"):
        make_output(graph[0], params(output_interface="ethercat"), PERM_NAMES, 0.01)


def test_forward_position_sends_the_command_array_in_the_joint_order_to_the_position_controller(graph):
    p = params(output_interface="forward_position", position_controller="outputs_test_fwd")
    output = make_output(graph[0], p, PERM_NAMES, 0.01)
    assert output.topic == "/outputs_test_fwd/commands" and output.controller == "outputs_test_fwd"
    assert output.describe() == "forward_position on /outputs_test_fwd/commands"
    assert output.resume_at_rest and output.publisher.msg_type is Float64MultiArray
    msg, q = send_one(graph, output, Float64MultiArray, p)
    np.testing.assert_allclose(msg.data, np.asarray(HOME_Q)[PERM], atol=1e-12)
    assert list(msg.data) == q and output.published >= 1


def test_isaac_sends_a_stamped_joint_state_naming_the_joints(graph):
    p = params(output_interface="isaac", isaac_topic="/outputs_test/joint_command")
    output = make_output(graph[0], p, PERM_NAMES, 0.01)
    assert output.topic == "/outputs_test/joint_command" and output.controller == ""
    assert output.resume_at_rest and output.publisher.msg_type is JointState
    msg, q = send_one(graph, output, JointState, p)
    assert list(msg.name) == PERM_NAMES and list(msg.position) == q
    assert ns_from_time_msg(msg.header.stamp) == NOW_NS


@pytest.mark.parametrize("stamp", ["now", "zero"])
def test_joint_trajectory_sends_the_command_then_the_look_ahead_then_a_stop_that_every_jtc_accepts(graph, stamp):
    p = params(
        output_interface="joint_trajectory", trajectory_controller="outputs_test_jtc", trajectory_stamp=stamp,
        trajectory_points=3,
    )  # fmt: skip
    output = make_output(graph[0], p, PERM_NAMES, 0.01)
    assert output.topic == "/outputs_test_jtc/joint_trajectory" and output.controller == "outputs_test_jtc"
    # JTC runs each trajectory's look-ahead by itself: after a stall the arm is along it, not at rest
    assert not output.resume_at_rest and output.publisher.msg_type is JointTrajectory
    msg, q = send_one(graph, output, JointTrajectory, p)
    assert list(msg.joint_names) == PERM_NAMES
    assert ns_from_time_msg(msg.header.stamp) == (NOW_NS if stamp == "now" else 0)
    # this period's command, 3 periods of look-ahead, the stop (at rest: one period after the last)
    assert [ns_from_time_msg(pt.time_from_start) for pt in msg.points] == [
        0,
        10_000_000,
        20_000_000,
        30_000_000,
        40_000_000,
    ]
    assert list(msg.points[0].positions) == q
    for pt in msg.points:  # held at HOME: every point there, at rest
        np.testing.assert_allclose(pt.positions, np.asarray(HOME_Q)[PERM], atol=1e-12)
        assert list(pt.velocities) == [0.0] * len(PERM_NAMES)
    for distro in JTC_DISTROS:
        assert validate_jtc_trajectory(msg, PERM_NAMES, NOW_NS, distro) is None, distro
