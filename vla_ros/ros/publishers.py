"""Who publishes: a topic's publishers from the ROS graph, and each message's publisher where rclpy says it.

rclpy passes a subscription callback the message's ``MessageInfo`` from Iron on (a callback taking two
arguments), and that info carries the publisher's GID from Kilted on. On Humble a callback gets the message
alone, on Jazzy the info without the GID: there ``with_publisher`` hands the callback None and a node falls
back on the graph (``graph_publishers``), which every distribution has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rclpy.subscription import Subscription

from vla_ros.control.sources import Endpoint, fully_qualified, gid_text

# Iron and later choose the callback's form from its signature
_INFO_CALLBACKS = hasattr(Subscription, "CallbackType")


def gid_key(gid: Sequence[int] | bytes) -> str:
    """A GID as text, trailing zero bytes dropped: the graph lists 24-byte GIDs on some middlewares where
    the message info has the same 16 bytes."""
    return gid_text(bytes(gid).rstrip(b"\0"))


def graph_publishers(node, topic: str) -> list[Endpoint]:
    """Who publishes on ``topic`` now, from the ROS graph (about 0.1 ms)."""
    return [
        Endpoint(fully_qualified(i.node_namespace, i.node_name), gid_key(i.endpoint_gid))
        for i in node.get_publishers_info_by_topic(topic)
    ]


def with_info(callback: Callable[[object, dict | None], None]) -> Callable:
    """``callback(msg, info)`` as a subscription callback: ``info`` is rclpy's ``MessageInfo`` (a dict: the
    publisher's ``source_timestamp``, ``received_timestamp``, and from Kilted ``publisher_gid``) where it
    passes one (Iron on), None where it does not (Humble)."""
    if not _INFO_CALLBACKS:
        return lambda msg: callback(msg, None)
    return lambda msg, info: callback(msg, info if isinstance(info, dict) else None)


def with_publisher(callback: Callable[[object, str | None], None]) -> Callable:
    """``callback(msg, gid)`` as a subscription callback: ``gid`` is the message's publisher (``gid_key``)
    where rclpy says it, None where it does not."""

    def take(msg, info) -> None:
        gid = info.get("publisher_gid") if info else None
        callback(msg, gid_key(gid["data"]) if gid and gid.get("data") else None)

    return with_info(take)
