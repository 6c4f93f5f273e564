"""The episode reset announcement (``/vla/episode_reset``, std_msgs/Header): the one contract between the
simulator and the nodes that must forget the previous episode.

``header.stamp`` is the simulated time at which the new episode begins (every sensor message of the new
episode is stamped at or after it); ``header.frame_id`` is the episode number as a decimal string.
Reliable and transient local with depth 1, so a node that starts later still learns the current episode.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from vla_ros.ros.time import ns_from_time_msg

EPISODE_RESET_TOPIC = "/vla/episode_reset"


def episode_reset_qos() -> QoSProfile:
    return QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)


def reset_from_msg(msg) -> tuple[int, int | None]:
    """(start stamp in ns, episode number or None when frame_id is not a number)."""
    try:
        episode = int(msg.frame_id)
    except ValueError:
        episode = None
    return ns_from_time_msg(msg.stamp), episode
