"""The episode-reset announcement: how every node learns that the world was reset under it.

A simulator (``sim_node``) publishes one ``std_msgs/Header`` on ``/vla/episode_reset`` at start-up and on
every reset, latched (reliable, transient local, depth 1) so a node that starts later still learns where
the current episode began:

- ``header.stamp``: the simulated time at which the new episode begins. Every sensor message of the new
  episode is stamped at or after it, every message of an earlier episode before it, so a node splits its
  inputs by stamp alone, whatever order the topics arrive in. With ``reset_clock_on_reset`` the clock
  restarts at 0, the stamp is 0-based, and the backwards clock jump is the same reset, not a second one.
- ``header.frame_id``: the episode number as a decimal string (the ``episode`` of /vla/episode_status).

On a real robot nobody publishes it; the controller's path-tolerance watchdog stands in for it.
"""

from __future__ import annotations

from rclpy.qos import QoSProfile
from std_msgs.msg import Header

from vla_ros.ros.qos import latched_qos
from vla_ros.ros.time import ns_from_time_msg, time_msg_from_ns

EPISODE_RESET_TOPIC = "/vla/episode_reset"


def episode_reset_qos() -> QoSProfile:
    """Latched: a late subscriber gets the current episode's announcement."""
    return latched_qos()


def episode_reset_msg(stamp_ns: int, episode: int) -> Header:
    """The announcement that episode ``episode`` begins at ``stamp_ns`` (simulated time)."""
    return Header(stamp=time_msg_from_ns(stamp_ns), frame_id=str(int(episode)))


def reset_from_msg(msg: Header) -> tuple[int, int | None]:
    """``(stamp_ns, episode)`` of an announcement; ``episode`` is None when frame_id is not a number
    (another publisher may leave it empty: the stamp alone carries the reset)."""
    text = msg.frame_id.strip()
    return ns_from_time_msg(msg.stamp), int(text) if text.isdigit() else None
