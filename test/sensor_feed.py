"""A probe that plays the robot for one node under test: it owns ``/clock`` and publishes joint states and
camera frames with chosen stamps, so a test decides exactly what the node has received when it ticks."""

from __future__ import annotations

import time

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Header, String
from trajectory_msgs.msg import JointTrajectory

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.ros.episode import EPISODE_RESET_TOPIC, episode_reset_qos
from vla_ros.ros.time import ns_from_time_msg, time_msg_from_ns

MS = 1_000_000
NAMES = list(COMMANDED_JOINTS) + ["right_finger_joint"]


def joint_state(t_ns: int, q: float) -> JointState:
    msg = JointState(
        name=NAMES, position=[q, -q, 0.5 * q, 0.0, q, 0.0, 0.01, 0.01], velocity=[0.1] * 8, effort=[0.0] * 8
    )
    msg.header.stamp = time_msg_from_ns(t_ns)
    return msg


def camera_frame(t_ns: int, width: int = 48, height: int = 36, encoding: str = "rgb8") -> Image:
    rng = np.random.default_rng(t_ns // MS)
    msg = Image(
        height=height,
        width=width,
        encoding=encoding,
        step=width * 3,
        data=rng.integers(0, 256, width * height * 3, dtype=np.uint8).tobytes(),
    )
    msg.header.stamp = time_msg_from_ns(t_ns)
    msg.header.frame_id = "camera"
    return msg


class SensorFeed:
    """Publishes /clock, /joint_states, /camera/image_raw, /vla/instruction and /vla/episode_reset; records
    /vla/action_chunk (with the receive time on /clock) and /diagnostics."""

    def __init__(self, name: str = "sensor_feed") -> None:
        if not rclpy.ok():
            rclpy.init()
        self.node = Node(name, parameter_overrides=[Parameter("use_sim_time", Parameter.Type.BOOL, True)])
        n = self.node
        reliable = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
        self.pub_clock = n.create_publisher(Clock, "/clock", 10)
        self.pub_joints = n.create_publisher(JointState, "/joint_states", reliable)
        self.pub_image = n.create_publisher(Image, "/camera/image_raw", reliable)
        latched = QoSProfile(
            depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE
        )
        self.pub_instruction = n.create_publisher(String, "/vla/instruction", latched)
        self.pub_reset = n.create_publisher(Header, EPISODE_RESET_TOPIC, episode_reset_qos())
        self.chunks: list[tuple[int, JointTrajectory]] = []
        self.diag: list[tuple[float, object]] = []
        n.create_subscription(
            JointTrajectory, "/vla/action_chunk", lambda m: self.chunks.append((self.now_ns(), m)), 100
        )
        n.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 200)
        self.clock_ns = 0

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            self.diag.append((time.monotonic(), st))

    def now_ns(self) -> int:
        return self.node.get_clock().now().nanoseconds

    def set_clock(self, t_ns: int) -> None:
        self.clock_ns = t_ns
        self.pub_clock.publish(Clock(clock=time_msg_from_ns(t_ns)))

    def statuses(self, name: str = "policy: policy", since: float = 0.0):
        """(level, message, values) of the node's status reports received after wall time ``since``."""
        return [
            (st.level, st.message, {kv.key: kv.value for kv in st.values})
            for t, st in self.diag
            if st.name == name and t > since
        ]

    def latest(self, name: str = "policy: policy", since: float = 0.0) -> dict | None:
        s = self.statuses(name, since)
        return s[-1][2] if s else None

    def spin_until(self, predicate, wall_timeout_s: float = 60.0) -> bool:
        end = time.monotonic() + wall_timeout_s
        while time.monotonic() < end:
            rclpy.spin_once(self.node, timeout_sec=0.01)
            if predicate():
                return True
        return False

    def wait_received(self, joints: int, images: int, wall_timeout_s: float = 30.0) -> bool:
        """Until the node's diagnostics say it has received this many joint states and frames in total."""
        t0 = time.monotonic()

        def done() -> bool:
            v = self.latest(since=t0)
            return (
                v is not None
                and int(v.get("joint_states.received", 0)) >= joints
                and int(v.get("image.received", 0)) >= images
            )

        return self.spin_until(done, wall_timeout_s)

    def chunk_stamps(self) -> list[int]:
        return [ns_from_time_msg(m.header.stamp) for _, m in self.chunks]

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.try_shutdown()
