"""Records topics to a rosbag2 bag, as ``ros2 bag record -s mcap`` would (pip mode has no rosbag2).

Subscriptions are raw (``raw=True``): the CDR bytes DDS delivers are written unchanged, so what is in the
file is byte-for-byte what the robot published. The log time is the node's clock at receipt (simulated
time under ``use_sim_time``), which the dataset reader uses as the receive time on replay.

As rosbag2 does, a topic is subscribed once a publisher is discovered, with a QoS adapted to the
publishers' offers (rosbag2_storage ``Rosbag2QoS::adapt_request_to_offers``): reliable only when every
publisher is reliable (so best-effort sensor drivers are recorded), transient local only when every
publisher is (so latched topics deliver their last message). The publishers' offered QoS is written
with the topic, so the bag replays latched topics latched.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable

from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, LivelinessPolicy, QoSProfile, ReliabilityPolicy

from vla_ros.data.bag import OfferedQos
from vla_ros.data.mcap_io import McapEpisodeWriter

log = logging.getLogger(__name__)

# What the project's nodes publish; other topics can be given as "topic:pkg/msg/Type" (or bare, typed by discovery).
KNOWN_TOPICS = {
    "/camera/image_raw": "sensor_msgs/msg/Image",
    "/camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
    "/camera/camera_info": "sensor_msgs/msg/CameraInfo",
    "/wrist_camera/image_raw": "sensor_msgs/msg/Image",
    "/wrist_camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
    "/wrist_camera/camera_info": "sensor_msgs/msg/CameraInfo",
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
    "/camera/image_raw",
    "/camera/camera_info",
    "/joint_states",
    "/vla/instruction",
    "/vla/action_chunk",
    "/vla/safe_action_chunk",
    "/forward_position_controller/commands",
    "/joint_trajectory_controller/joint_trajectory",
    "/vla/episode_status",
)
_DEPTH = 100  # keep-last queue of each subscription: a slow disk must not drop 100 Hz joint states


def message_class(type_name: str):
    pkg, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def parse_topic(spec: str) -> tuple[str, str]:
    """'/joint_states', '/my/topic:sensor_msgs/msg/JointState' or '/any/topic' -> (topic, type or "")."""
    topic, _, type_name = spec.partition(":")
    type_name = type_name or KNOWN_TOPICS.get(topic, "")
    if type_name.count("/") == 1:
        type_name = type_name.replace("/", "/msg/")
    return topic, type_name


def _ns(duration) -> int | None:
    ns = (
        Duration(seconds=duration.sec, nanoseconds=duration.nanosec).nanoseconds
        if hasattr(duration, "sec")
        else duration.nanoseconds
    )
    return None if ns <= 0 or ns >= 0x7FFFFFFF * 10**9 else ns  # 0 and "infinite" both mean no limit


def offered_qos(profile: QoSProfile) -> OfferedQos:
    """A publisher's QoS as discovery reports it, in the bag's form."""

    def name(policy, default: str) -> str:
        text = getattr(policy, "name", str(policy)).lower()
        return (
            text
            if text
            in (
                "reliable",
                "best_effort",
                "transient_local",
                "volatile",
                "keep_last",
                "keep_all",
                "automatic",
                "manual_by_topic",
                "system_default",
            )
            else default
        )

    return OfferedQos(
        reliability=name(profile.reliability, "unknown"),
        durability=name(profile.durability, "unknown"),
        history=name(profile.history, "unknown") if profile.history != HistoryPolicy.UNKNOWN else "unknown",
        depth=int(profile.depth),
        deadline_ns=_ns(profile.deadline),
        lifespan_ns=_ns(profile.lifespan),
        liveliness=name(profile.liveliness, "unknown") if profile.liveliness != LivelinessPolicy.UNKNOWN else "unknown",
        liveliness_lease_ns=_ns(profile.liveliness_lease_duration),
    )


def adapted_qos(offers: list[OfferedQos]) -> QoSProfile:
    """rosbag2's request for these offers: reliable/transient local only when all publishers offer it."""
    reliable = all(q.reliability == "reliable" for q in offers)
    latched = all(q.durability == "transient_local" for q in offers)
    return QoSProfile(
        depth=_DEPTH,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


class Recorder:
    """Subscribes ``topics`` on ``node`` as their publishers appear (call :meth:`poll` now and then) and writes
    every message to ``writer``."""

    def __init__(self, node: Node, writer: McapEpisodeWriter, topics: Iterable[str], on_message=None) -> None:
        self.node = node
        self.writer = writer
        self.on_message = on_message  # callback(topic, type_name, cdr, log_time_ns), e.g. a stop condition
        self.wanted = dict(parse_topic(spec) for spec in topics)
        self.subscriptions: dict[str, object] = {}
        self.qos: dict[str, QoSProfile] = {}
        self.failed: dict[str, str] = {}  # topic -> why it cannot be recorded (its type is not installed)
        self.poll()

    @property
    def waiting(self) -> list[str]:
        """Topics still without a publisher."""
        return [t for t in self.wanted if t not in self.subscriptions and t not in self.failed]

    def poll(self) -> None:
        """Subscribe every wanted topic that has publishers now."""
        for topic, type_name in self.wanted.items():
            if topic in self.subscriptions or topic in self.failed:
                continue
            infos = self.node.get_publishers_info_by_topic(topic)
            if not infos:
                continue
            published = infos[0].topic_type
            if type_name and published != type_name:
                log.warning("%s: publishers use %s, not %s; recording %s", topic, published, type_name, published)
            type_name = published
            offers = [offered_qos(i.qos_profile) for i in infos]
            qos = adapted_qos(offers)
            try:
                msg_class = message_class(type_name)
                self.writer.add_channel(topic, type_name, offers)
            except (ImportError, AttributeError, FileNotFoundError, ValueError) as exc:
                self.failed[topic] = f"{type_name} is not installed here ({exc})"
                log.warning("%s: not recorded: %s", topic, self.failed[topic])
                continue
            self.subscriptions[topic] = self.node.create_subscription(
                msg_class, topic, self._callback(topic, type_name), qos, raw=True
            )
            self.qos[topic] = qos
            self.wanted[topic] = type_name

    def _callback(self, topic: str, type_name: str):
        def write(cdr: bytes) -> None:
            now = self.node.get_clock().now().nanoseconds
            self.writer.write(topic, type_name, cdr, now)
            if self.on_message is not None:
                self.on_message(topic, type_name, cdr, now)

        return write
