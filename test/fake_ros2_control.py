"""Plays ros2_control's side for tests, as a real rclpy process: controller nodes named like ros2_control
controllers, each with the ``joints`` parameter (and ``interface_name`` or ``allow_partial_joints_goal``) that
the real ones declare, subscribing where they do (``~/commands`` for a forward position controller,
``~/joint_trajectory`` for JTC), plus a joint_state_broadcaster stand-in on ``/joint_states`` (wall time).

Every JTC message received is judged with upstream's rules for each distro
(``vla_ros.control.ros2_control.validate_jtc_trajectory``, the controller's clock as "now"), and the counts
are published as JSON on ``/vla_test/fake_ros2_control`` (std_msgs/String) five times a second.

    python test/fake_ros2_control.py forward:vla_fwd:a,b,c trajectory:vla_jtc:c,a,b --joint-states a,b,c
"""

from __future__ import annotations

import argparse
import json
import sys

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from vla_ros.control.ros2_control import JTC_DISTROS, validate_jtc_trajectory

REPORT_TOPIC = "/vla_test/fake_ros2_control"


class FakeController(Node):
    def __init__(self, kind: str, name: str, joints: list[str]) -> None:
        super().__init__(name)
        self.kind, self.joints = kind, joints
        self.declare_parameter("joints", joints)
        self.received = 0
        self.rejected = {d: 0 for d in JTC_DISTROS}
        self.reasons: dict[str, str] = {}
        if kind == "forward":
            self.declare_parameter("interface_name", "position")  # what JointGroupPositionController sets
            self.create_subscription(Float64MultiArray, "~/commands", self._on_forward, 10)
        else:
            self.declare_parameter("allow_partial_joints_goal", False)
            self.create_subscription(JointTrajectory, "~/joint_trajectory", self._on_trajectory, 10)

    def _on_forward(self, msg: Float64MultiArray) -> None:
        self.received += 1

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        self.received += 1
        now_ns = self.get_clock().now().nanoseconds
        for distro in JTC_DISTROS:
            reason = validate_jtc_trajectory(msg, self.joints, now_ns, distro)
            if reason:
                self.rejected[distro] += 1
                self.reasons[distro] = reason

    def report(self) -> dict:
        return {"kind": self.kind, "received": self.received, "rejected": self.rejected, "reasons": self.reasons}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("controllers", nargs="*", help="kind:name:joint,joint,... (kind: forward or trajectory)")
    parser.add_argument("--joint-states", default="", help="publish these joints at 0 on /joint_states at 100 Hz")
    args = parser.parse_args(rclpy.utilities.remove_ros_args(sys.argv)[1:])
    rclpy.init()
    executor = SingleThreadedExecutor()
    fakes = []
    for spec in args.controllers:
        kind, name, joints = spec.split(":")
        fakes.append(FakeController(kind, name, joints.split(",")))
        executor.add_node(fakes[-1])
    hub = Node("fake_ros2_control_hub")
    executor.add_node(hub)
    report = hub.create_publisher(String, REPORT_TOPIC, 10)
    hub.create_timer(0.2, lambda: report.publish(String(data=json.dumps({f.get_name(): f.report() for f in fakes}))))
    if args.joint_states:
        names = args.joint_states.split(",")
        js = hub.create_publisher(JointState, "/joint_states", 10)

        def publish_joint_states() -> None:
            msg = JointState(name=names, position=[0.0] * len(names))
            msg.header.stamp = hub.get_clock().now().to_msg()
            js.publish(msg)

        hub.create_timer(0.01, publish_joint_states)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
