"""scripted_motion_node: a privileged scripted pick (``sim.launch.xml policy:=scripted``).

Reads the simulator's privileged episode status (true cup positions, ``/vla/episode_status``) and sends one
JointTrajectory per episode to the joint trajectory controller: approach the named cup from above,
close the gripper, lift. It exercises the simulation and launch files without a model and is the
reference motion of ``vla-ros demo --policy scripted``; it is not a policy and never runs on a real
robot. It reports on ``/diagnostics`` once a second: episodes planned, the last plan, failures.
"""

from __future__ import annotations

import json

from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.params.scripted_motion import PARAMS
from vla_ros.ros.diagnostics import ERROR, OK, WARN, Diagnostics
from vla_ros.ros.node_main import run_node
from vla_ros.ros.params import declare_parameters
from vla_ros.ros.qos import latched_qos
from vla_ros.ros.time import duration_msg_from_s, time_msg_from_ns
from vla_ros.sim.scripted import UnreachableError, pick_plan

COMMAND_JOINTS = list(COMMANDED_JOINTS)


class ScriptedMotionNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("scripted_motion", **kwargs)
        p = declare_parameters(self, PARAMS)
        self._q_now: dict[str, float] = {}
        self._planned_episode = -1
        self._pending: dict | None = None  # status of an episode not planned yet
        self._q_stamp_s = -1.0
        latched = latched_qos()
        self._pub = self.create_publisher(JointTrajectory, f"/{p['trajectory_controller']}/joint_trajectory", 10)
        self.create_subscription(JointState, "/joint_states", self._on_joints, 10)
        self.create_subscription(String, "/vla/episode_status", self._on_status, latched)
        self.diag = Diagnostics(self, hardware_id="scripted")
        self._report = {"episodes_planned": 0, "last_plan": "", "problem": ""}
        self.create_timer(1.0, self._publish_diagnostics)

    def _publish_diagnostics(self) -> None:
        r = self._report
        if r["problem"]:
            level, message = ERROR, r["problem"]
        elif r["episodes_planned"]:
            level, message = OK, r["last_plan"]
        else:
            level, message = WARN, "waiting for /vla/episode_status and /joint_states"
        values = {"episodes_planned": r["episodes_planned"], "target_color": self.get_parameter("target_color").value}
        values.update(self.diag.rejection_values())
        self.diag.publish(
            time_msg_from_ns(self.get_clock().now().nanoseconds), [("scripted pick", level, message, values)]
        )

    def _on_joints(self, msg: JointState) -> None:
        self._q_now = dict(zip(msg.name, msg.position))
        self._q_stamp_s = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        if self._pending is not None:
            self._plan(self._pending)

    def _on_status(self, msg: String) -> None:
        try:
            status = json.loads(msg.data)
            status["episode"], status["time_s"], status["cups"]
        except (ValueError, KeyError, TypeError) as err:
            self.diag.count_rejection("bad_status")
            self.get_logger().warning(f"unreadable /vla/episode_status: {err}", throttle_duration_sec=5.0)
            return
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
        except (UnreachableError, KeyError) as err:
            self.get_logger().error(f"cannot pick the {color} cup: {err}")
            self.diag.count_rejection("unreachable" if isinstance(err, UnreachableError) else "unknown_cup")
            self._report["problem"] = f"episode {status['episode']}: cannot pick the {color} cup: {err}"
            self._planned_episode = status["episode"]
            return
        traj = JointTrajectory(joint_names=COMMAND_JOINTS)  # stamp 0: start on arrival
        for t, q in zip(times, points):
            traj.points.append(JointTrajectoryPoint(positions=q.tolist(), time_from_start=duration_msg_from_s(t)))
        self._pub.publish(traj)
        self._planned_episode = status["episode"]
        self._report.update(
            episodes_planned=self._report["episodes_planned"] + 1,
            problem="",
            last_plan=f"episode {status['episode']}: {color} cup, {len(times)} waypoints, {times[-1]:.1f} s",
        )
        self.get_logger().info(
            f"episode {status['episode']}: scripted pick of the {color} cup ({len(times)} waypoints, {times[-1]:.1f} s)"
        )


def main(args: list[str] | None = None) -> int:
    return run_node(ScriptedMotionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
