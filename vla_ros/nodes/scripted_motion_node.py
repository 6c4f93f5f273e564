"""scripted_motion_node: the demo's stand-in motion until a trained policy ships.

Reads the simulator's privileged episode status (true cup positions, ``/vla/episode_status``) and sends one
JointTrajectory per episode to the joint trajectory controller: approach the named cup from above,
close the gripper, lift. It exists so the simulation, launch files and demo can be exercised end to end
before the learned pipeline lands; it is not a policy and never runs on a real robot.
"""

from __future__ import annotations

import json

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros.ros.node_main import run_node
from vla_ros.ros.params import ParamSpec, declare_parameters
from vla_ros.ros.time import duration_msg_from_s
from vla_ros.sim import CUP_COLORS
from vla_ros.sim.scripted import UnreachableError, pick_plan

COMMAND_JOINTS = [
    "shoulder_pan_joint",
    "shoulder_lift_joint",
    "elbow_joint",
    "forearm_roll_joint",
    "wrist_pitch_joint",
    "wrist_roll_joint",
    "left_finger_joint",
]

PARAMS = [
    ParamSpec("target_color", "red", "cup to pick", choices=tuple(CUP_COLORS)),
    ParamSpec("speed_scale", 1.0, "time scale of the scripted motion (> 1 is slower)", min_value=0.5, max_value=5.0),
    ParamSpec("trajectory_controller", "joint_trajectory_controller", "commands go to /<name>/joint_trajectory", read_only=True),
]


class ScriptedMotionNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("scripted_motion", **kwargs)
        p = declare_parameters(self, PARAMS)
        self._q_now: dict[str, float] = {}
        self._planned_episode = -1
        self._pending: dict | None = None  # status of an episode not planned yet
        self._q_stamp_s = -1.0
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
        self._pub = self.create_publisher(JointTrajectory, f"/{p['trajectory_controller']}/joint_trajectory", 10)
        self.create_subscription(JointState, "/joint_states", self._on_joints, 10)
        self.create_subscription(String, "/vla/episode_status", self._on_status, latched)

    def _on_joints(self, msg: JointState) -> None:
        self._q_now = dict(zip(msg.name, msg.position))
        self._q_stamp_s = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        if self._pending is not None:
            self._plan(self._pending)

    def _on_status(self, msg: String) -> None:
        status = json.loads(msg.data)
        if status["episode"] != self._planned_episode:
            self._pending = status
            self._plan(status)

    def _plan(self, status: dict) -> None:
        # Plan from joint states of the new episode, not from the last one's pose before the reset.
        if self._q_stamp_s < status["time_s"] or not all(j in self._q_now for j in COMMAND_JOINTS):
            return
        self._pending = None
        color = self.get_parameter("target_color").value
        try:
            times, points = pick_plan(
                status["cups"][color], [self._q_now[j] for j in COMMAND_JOINTS], self.get_parameter("speed_scale").value
            )
        except UnreachableError as err:
            self.get_logger().error(f"cannot pick the {color} cup: {err}")
            self._planned_episode = status["episode"]
            return
        traj = JointTrajectory(joint_names=COMMAND_JOINTS)  # stamp 0: start on arrival
        for t, q in zip(times, points):
            traj.points.append(JointTrajectoryPoint(positions=q.tolist(), time_from_start=duration_msg_from_s(t)))
        self._pub.publish(traj)
        self._planned_episode = status["episode"]
        self.get_logger().info(f"episode {status['episode']}: scripted pick of the {color} cup ({len(times)} waypoints, {times[-1]:.1f} s)")


def main(args: list[str] | None = None) -> int:
    return run_node(ScriptedMotionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
