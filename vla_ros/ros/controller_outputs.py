"""The controller's output interfaces: one class per ``output_interface``, chosen once (``make_output``).

Each creates its publisher (depth 10, reliable), fills its one message every control cycle and publishes it:

- ``forward_position``: std_msgs/Float64MultiArray on ``/<position_controller>/commands`` (ros2_control
  forward position controller; values in the order of the ``joints`` parameter);
- ``joint_trajectory``: trajectory_msgs/JointTrajectory on ``/<trajectory_controller>/joint_trajectory``
  (ros2_control joint trajectory controller, JTC): every period a trajectory stamped now whose first point
  (``time_from_start`` 0) is this period's command, then ``trajectory_points`` points of look-ahead one
  period apart, then a controlled stop to rest. JTC follows it from its own first point, never from the
  measured state (so nothing snaps back between messages, whatever ``interpolate_from_desired_state`` or
  ``open_loop_control`` say), every distro accepts it (the last velocity is zero), and if the stream
  stops JTC brakes the arm within the acceleration limits (``vla_ros.control.ros2_control``);
- ``isaac``: sensor_msgs/JointState on ``isaac_topic`` (Isaac Sim's ROS 2 bridge).

Only the control loop calls ``sample`` (under the node's lock, right after the core's update) and ``publish``:
the message and the look-ahead buffers are the loop's own.
"""

from __future__ import annotations

import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_ros.control.ros2_control import controlled_stop
from vla_ros.ros.time import duration_msg_from_s, time_msg_from_ns

QUEUE_DEPTH = 10
# Rows of the JTC look-ahead buffers: this period's command, up to 50 look-ahead periods (the maximum of
# trajectory_points), the stop.
TRAJECTORY_ROWS = 52


class CommandOutput:
    """One output interface: ``topic`` (as configured; the publisher's ``topic_name`` is the resolved one),
    ``controller`` (the ros2_control controller behind it, for the joints check; Isaac has none),
    ``published`` (messages sent)."""

    name = ""  # the output_interface value
    msg_type: type = object
    # After a stall the executor resumes at rest; JTC runs each trajectory's look-ahead by itself, so the arm
    # is along it, not at rest.
    resume_at_rest = True

    def __init__(self, node, params: dict, joints: list[str], period_s: float) -> None:
        self.joints = list(joints)
        self.period_s = period_s
        self.topic = self.topic_for(params)
        self.controller = self.controller_for(params)
        self.publisher = node.create_publisher(self.msg_type, self.topic, QUEUE_DEPTH)
        self.msg = self.make_msg()
        self.published = 0

    def topic_for(self, params: dict) -> str:
        raise NotImplementedError

    def controller_for(self, params: dict) -> str:
        return ""

    def make_msg(self):
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.name} on {self.publisher.topic_name}"

    def sample(self, core, points: int) -> None:
        """Under the node's lock, right after ``core.update``: what else the message needs from the core
        (``points`` of look-ahead, for an output that sends some)."""

    def fill(self, q: list[float], now_ns: int, points: int) -> None:
        """Put this cycle's command ``q`` (in the order of ``joints``) at ROS time ``now_ns`` into ``msg``."""
        raise NotImplementedError

    def publish(self, q: list[float], now_ns: int, points: int) -> None:
        self.fill(q, now_ns, points)
        self.publisher.publish(self.msg)
        self.published += 1


class ForwardPositionOutput(CommandOutput):
    name = "forward_position"
    msg_type = Float64MultiArray

    def topic_for(self, params: dict) -> str:
        return f"/{params['position_controller']}/commands"

    def controller_for(self, params: dict) -> str:
        return params["position_controller"]

    def make_msg(self):
        return Float64MultiArray()

    def fill(self, q: list[float], now_ns: int, points: int) -> None:
        self.msg.data = q


class JointTrajectoryOutput(CommandOutput):
    name = "joint_trajectory"
    msg_type = JointTrajectory
    resume_at_rest = False

    def __init__(self, node, params: dict, joints: list[str], period_s: float) -> None:
        super().__init__(node, params, joints, period_s)
        self._q = np.zeros((TRAJECTORY_ROWS, len(self.joints)))
        self._v = np.zeros((TRAJECTORY_ROWS, len(self.joints)))
        self._stop_s = 0.0
        self._limits: tuple = (None,)
        # now: JTC plays each message at absolute times from its stamp (latency compensated); zero: from arrival.
        self._stamp = time_msg_from_ns(0) if params["trajectory_stamp"] == "zero" else None

    def topic_for(self, params: dict) -> str:
        return f"/{params['trajectory_controller']}/joint_trajectory"

    def controller_for(self, params: dict) -> str:
        return params["trajectory_controller"]

    def make_msg(self):
        return JointTrajectory(joint_names=self.joints)

    def sample(self, core, points: int) -> None:
        """Row 0 = this period's command, rows 1..k = the next k periods' commands if no input arrives, row
        k+1 = a controlled stop from there (within the acceleration limits, at least one period long so the
        times stay strictly increasing)."""
        k = points
        cfg = core.config
        if self._limits[0] is not cfg:  # arrays of the limits, rebuilt only when a parameter change swapped the config
            self._limits = (
                cfg,
                *(np.asarray(x) for x in (cfg.acceleration_limits, cfg.position_lower, cfg.position_upper)),
            )
        tq, tv = self._q, self._v
        tq[0], tv[0] = core.q_cmd, core.v_cmd
        core.preview(self.period_s, tq[1 : k + 1], tv[1 : k + 1])
        self._stop_s, tq[k + 1] = controlled_stop(tq[k], tv[k], *self._limits[1:], self.period_s)
        tv[k + 1] = 0.0

    def fill(self, q: list[float], now_ns: int, points: int) -> None:
        k = points
        tq, tv = self._q, self._v
        times_s = [i * self.period_s for i in range(k + 1)] + [k * self.period_s + self._stop_s]
        self.msg.header.stamp = self._stamp if self._stamp is not None else time_msg_from_ns(now_ns)
        self.msg.points = [
            JointTrajectoryPoint(
                positions=tq[i].tolist(), velocities=tv[i].tolist(), time_from_start=duration_msg_from_s(t)
            )
            for i, t in enumerate(times_s)
        ]


class IsaacOutput(CommandOutput):
    name = "isaac"
    msg_type = JointState

    def topic_for(self, params: dict) -> str:
        return params["isaac_topic"]

    def make_msg(self):
        return JointState(name=self.joints)

    def fill(self, q: list[float], now_ns: int, points: int) -> None:
        self.msg.header.stamp = time_msg_from_ns(now_ns)
        self.msg.position = q


OUTPUTS: dict[str, type[CommandOutput]] = {
    cls.name: cls for cls in (ForwardPositionOutput, JointTrajectoryOutput, IsaacOutput)
}


def make_output(node, params: dict, joints: list[str], period_s: float) -> CommandOutput:
    """The output ``params["output_interface"]`` names, its publisher created on ``node``."""
    interface = params["output_interface"]
    if interface not in OUTPUTS:
        raise ValueError(f"output_interface must be one of {sorted(OUTPUTS)}, got {interface!r}")
    return OUTPUTS[interface](node, params, joints, period_s)
