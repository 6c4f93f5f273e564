"""Records topics to rosbag2-compatible MCAP, as ``ros2 bag record -s mcap`` would (pip mode has no rosbag2).

Subscriptions are raw (``raw=True``): the CDR bytes DDS delivers are written unchanged, so what is in the
file is byte-for-byte what the robot published. The log time is the node's clock at receipt (simulated
time under ``use_sim_time``), which the dataset reader uses as the receive time on replay.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from vla_ros.data.mcap_io import McapEpisodeWriter

# What the project's nodes publish; other topics can be given as "topic:pkg/msg/Type".
KNOWN_TOPICS = {
    "/camera/image_raw": "sensor_msgs/msg/Image",
    "/camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
    "/camera/camera_info": "sensor_msgs/msg/CameraInfo",
    "/joint_states": "sensor_msgs/msg/JointState",
    "/vla/instruction": "std_msgs/msg/String",
    "/vla/action_chunk": "trajectory_msgs/msg/JointTrajectory",
    "/vla/safe_action_chunk": "trajectory_msgs/msg/JointTrajectory",
    "/forward_position_controller/commands": "std_msgs/msg/Float64MultiArray",
    "/joint_trajectory_controller/joint_trajectory": "trajectory_msgs/msg/JointTrajectory",
    "/vla/episode_status": "std_msgs/msg/String",
    "/robot_description": "std_msgs/msg/String",
}
DEFAULT_TOPICS = (
    "/camera/image_raw", "/camera/camera_info", "/joint_states", "/vla/instruction",
    "/vla/action_chunk", "/vla/safe_action_chunk", "/forward_position_controller/commands",
    "/joint_trajectory_controller/joint_trajectory", "/vla/episode_status",
)
LATCHED = {"/vla/episode_status", "/robot_description"}  # transient-local publishers


def message_class(type_name: str):
    pkg, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def parse_topic(spec: str) -> tuple[str, str]:
    """'/joint_states' or '/my/topic:sensor_msgs/msg/JointState' -> (topic, type)."""
    topic, _, type_name = spec.partition(":")
    type_name = type_name or KNOWN_TOPICS.get(topic, "")
    if not type_name:
        raise ValueError(f"unknown type for topic {topic}; write it as {topic}:pkg/msg/Type")
    if type_name.count("/") == 1:
        type_name = type_name.replace("/", "/msg/")
    return topic, type_name


class Recorder:
    """Attaches raw subscriptions to ``node`` and writes every message to ``writer``."""

    def __init__(self, node: Node, writer: McapEpisodeWriter, topics: Iterable[str], on_message=None) -> None:
        self.node = node
        self.writer = writer
        self.on_message = on_message  # callback(topic, type_name, cdr, log_time_ns), e.g. a stop condition
        self.subscriptions = []
        for spec in topics:
            topic, type_name = parse_topic(spec)
            writer.add_channel(topic, type_name)
            qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
            if topic in LATCHED:
                qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
            self.subscriptions.append(
                node.create_subscription(message_class(type_name), topic, self._callback(topic, type_name), qos, raw=True)
            )

    def _callback(self, topic: str, type_name: str):
        def write(cdr: bytes) -> None:
            now = self.node.get_clock().now().nanoseconds
            self.writer.write(topic, type_name, cdr, now)
            if self.on_message is not None:
                self.on_message(topic, type_name, cdr, now)

        return write
