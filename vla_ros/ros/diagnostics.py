"""Small helpers to publish diagnostic_msgs/DiagnosticArray the way diagnostic_aggregator expects.

Each node reports one status per concern (``<node>: <concern>``) with key/value pairs; counts of
rejected inputs go in as ``rejected.<reason>`` keys so nothing is dropped silently.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

OK = DiagnosticStatus.OK
WARN = DiagnosticStatus.WARN
ERROR = DiagnosticStatus.ERROR


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def make_status(
    name: str, level: bytes, message: str, values: dict[str, Any], hardware_id: str = ""
) -> DiagnosticStatus:
    """``level`` is one of OK, WARN, ERROR (DiagnosticStatus constants, bytes in rclpy)."""
    status = DiagnosticStatus(level=level)
    status.name = name
    status.message = message
    status.hardware_id = hardware_id
    status.values = [KeyValue(key=k, value=_fmt(v)) for k, v in values.items()]
    return status


class Diagnostics:
    """Publishes DiagnosticArrays on ``/diagnostics`` and keeps rejection counters by reason code."""

    def __init__(self, node, hardware_id: str = "") -> None:
        self._node = node
        self._pub = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._hardware_id = hardware_id
        self.rejected: Counter[str] = Counter()

    def count_rejection(self, code: str) -> None:
        self.rejected[code] += 1

    def rejection_values(self) -> dict[str, int]:
        values = {f"rejected.{k}": v for k, v in sorted(self.rejected.items())}
        values["rejected.total"] = sum(self.rejected.values())
        return values

    def publish(self, stamp, statuses: list[tuple[str, bytes, str, dict[str, Any]]]) -> None:
        """``statuses``: (concern, level, message, values); stamp: builtin_interfaces/Time."""
        msg = DiagnosticArray()
        msg.header.stamp = stamp
        node_name = self._node.get_fully_qualified_name().lstrip("/")
        msg.status = [
            make_status(f"{node_name}: {concern}", level, message, values, self._hardware_id)
            for concern, level, message, values in statuses
        ]
        self._pub.publish(msg)
