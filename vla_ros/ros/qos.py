"""QoS profiles the nodes share: sensor subscriptions (``sensor_qos`` parameter) and latched topics.

A best-effort publisher (drivers using ``SensorDataQoS``) never reaches a reliable subscription, and
nothing tells either side unless someone listens for the incompatible-QoS event: these subscriptions do,
and the node logs and counts it with the fix (``sensor_qos:=best_effort``).
"""

from __future__ import annotations

from collections.abc import Callable

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy


def sensor_qos(value: str, depth: int) -> QoSProfile:
    """Keep-last ``depth``, reliable or best effort (``value`` is the ``sensor_qos`` parameter)."""
    reliability = ReliabilityPolicy.BEST_EFFORT if value == "best_effort" else ReliabilityPolicy.RELIABLE
    return QoSProfile(depth=depth, reliability=reliability)


def latched_qos() -> QoSProfile:
    """Reliable, transient local, depth 1: a subscriber that comes later still gets the last message
    (``/robot_description``, ``/vla/instruction``)."""
    return QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)


def incompatible_qos_events(node, topic: str, count: Callable[[str], None]):
    """Event callbacks for a subscription on ``topic``: an incompatible publisher is counted
    (``incompatible_qos``) and logged with the fix."""
    try:
        from rclpy.event_handler import SubscriptionEventCallbacks  # Iron and later
    except ImportError:  # Humble
        from rclpy.qos_event import SubscriptionEventCallbacks

    def on_incompatible(event) -> None:
        count("incompatible_qos")
        node.get_logger().error(
            f"a publisher on {topic} has an incompatible QoS ({event.last_policy_kind}); for best-effort "
            "publishers set sensor_qos:=best_effort",
            throttle_duration_sec=5.0,
        )

    return SubscriptionEventCallbacks(incompatible_qos=on_incompatible)
