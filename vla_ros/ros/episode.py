"""The episode reset announcement shared by the nodes (``/vla/episode_reset``, std_msgs/Header).

The simulator publishes it on every reset (and once at start-up): ``header.stamp`` is the simulated time
at which the new episode begins (every message of the new episode is stamped at or after it),
``header.frame_id`` the episode number as a decimal string. Reliable and transient local, depth 1, so a
node that starts late still learns the current episode.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from vla_ros.ros.time import ns_from_time_msg

EPISODE_RESET_TOPIC = "/vla/episode_reset"


def episode_reset_qos() -> QoSProfile:
    return QoSProfile(
        depth=1,
        history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL,
    )


def reset_from_msg(msg) -> tuple[int, int | None]:
    """(stamp_ns, episode number or None when frame_id is not a decimal number) of an announcement."""
    text = msg.frame_id.strip()
    return ns_from_time_msg(msg.stamp), int(text) if text.isdigit() else None
