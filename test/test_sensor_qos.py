"""``sensor_qos:=best_effort`` reaches every /joint_states subscription: robot.launch.xml's policy, safety filter
and controller (real processes on wall time) all hear a best-effort publisher, the way drivers using
SensorDataQoS publish. A controller left at the default (reliable) cannot hear it, and says so."""

import os
import signal
import subprocess
import sys
import time

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import REPO, LaunchedGraph
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.control import bundled_urdf_path
from vla_ros.sim import HOME_Q

TOPIC = "/qos_test/joint_states"


def test_a_best_effort_joint_state_publisher_is_heard_by_all_three_nodes(tmp_path):
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("qos_test_probe", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    seen = {}  # status name -> values of the newest status
    node.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda m: seen.update(
            {s.name: {kv.key: kv.value for kv in s.values} | {"_message": s.message} for s in m.status}
        ),
        100,
    )
    commands = []
    node.create_subscription(Float64MultiArray, "/qos_test_forward/commands", lambda m: commands.append(m), 10)
    unheard = []
    node.create_subscription(Float64MultiArray, "/qos_test_reliable/commands", lambda m: unheard.append(m), 10)
    pub = node.create_publisher(JointState, TOPIC, QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT))

    def publish_joint_state():
        msg = JointState(name=list(COMMANDED_JOINTS), position=list(HOME_Q))
        msg.header.stamp = node.get_clock().now().to_msg()
        pub.publish(msg)

    node.create_timer(0.01, publish_joint_state)

    def spin_until(predicate, timeout_s):
        end = time.monotonic() + timeout_s
        while time.monotonic() < end and not predicate():
            executor.spin_once(timeout_sec=0.05)
        return predicate()

    reliable_log = tmp_path / "reliable_controller.log"
    reliable = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vla_ros.nodes.controller_node",
            "--ros-args",
            "-r",
            "__node:=controller_reliable",
            "-r",
            f"/joint_states:={TOPIC}",
            "-p",
            "position_controller:=qos_test_reliable",
        ],
        stdout=open(reliable_log, "w"),
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        with LaunchedGraph(
            "robot.launch.xml",
            "sensor_qos:=best_effort",
            f"joint_states_topic:={TOPIC}",
            "position_controller:=qos_test_forward",
            f"robot_description_file:={bundled_urdf_path()}",
            log_path=tmp_path / "robot.log",
        ):
            heard = {
                "policy": lambda: int(seen.get("policy: policy", {}).get("tokens.received", 0)) > 10,
                "safety filter": lambda: (
                    float(seen.get("safety_filter: filter", {}).get("joint_state_age_s", "inf")) < 1.0
                ),
                "controller": lambda: len(commands) > 10,  # it starts from a joint state: it heard them
            }
            ok = spin_until(lambda: all(h() for h in heard.values()), 180)
            assert ok, ({k: h() for k, h in heard.items()}, (tmp_path / "robot.log").read_text()[-3000:])
            assert seen["controller: state"]["_message"] != "waiting for joint states"
            # The default (reliable) subscription never matches the best-effort publisher, and reports it.
            reliable_state = lambda: seen.get("controller_reliable: state", {})  # noqa: E731
            assert spin_until(lambda: int(reliable_state().get("rejected.incompatible_qos", 0)) >= 1, 30), (
                reliable_state()
            )
            assert (
                reliable_state()["_message"] == "waiting for joint states" and not unheard
            )  # it would send from a joint state
    finally:
        os.killpg(reliable.pid, signal.SIGINT)
        reliable.wait(timeout=20)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)
    assert "sensor_qos:=best_effort" in reliable_log.read_text()  # the log names the fix
