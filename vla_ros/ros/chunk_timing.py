"""``/vla/chunk_timing``: each node's stages of every chunk it handles (``vla_ros.latency``), one
``std_msgs/String`` (a ``ChunkTiming`` as JSON) per chunk and node, reliable, depth 50, volatile: a tool that
wants the budget subscribes while the chunks go by (``vla-ros bench latency``, the live evaluation)."""

from __future__ import annotations

import time

from std_msgs.msg import String

from vla_ros.latency import ChunkTiming, StageTime, read_boot_id

CHUNK_TIMING_TOPIC = "/vla/chunk_timing"
CHUNK_TIMING_DEPTH = 50


def mono_now(node) -> StageTime:
    """The monotonic clock and the node's ROS clock, now: a stage that begins or ends a node's part."""
    return StageTime(time.monotonic_ns(), node.get_clock().now().nanoseconds)


class ChunkTimingPublisher:
    """A node's side of the topic: ``publish(stamp_ns, stages)`` sends one record."""

    def __init__(self, node, node_kind: str) -> None:
        self._node_kind = node_kind
        self._boot_id = read_boot_id()
        self._pub = node.create_publisher(String, CHUNK_TIMING_TOPIC, CHUNK_TIMING_DEPTH)
        self.published = 0

    def publish(self, stamp_ns: int, stages: dict[str, StageTime]) -> None:
        record = ChunkTiming(self._node_kind, int(stamp_ns), self._boot_id, dict(stages))
        self._pub.publish(String(data=record.to_json()))
        self.published += 1
