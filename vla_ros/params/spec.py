"""``ParamSpec``: one node parameter defined once, with type, default, range and description.

From one table a node declares its parameters with descriptors (``vla_ros.ros.params``), validates initial
values and runtime changes with a reason a person can read, and the parameter reference is generated
(``vla-ros params``). This is the shape of ros2_controllers' generate_parameter_library, in plain Python.
No rclpy import: offline tools (evaluation, benchmarks, docs) read the tables without a ROS graph.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

Validator = Callable[[Any], "str | None"]


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter. The type follows the default (bool, int, float, str, or a list of one of them).

    Args:
        min_value / max_value: inclusive range for numbers (also declared in the descriptor).
        choices: allowed values for strings.
        read_only: a change needs a restart; rclpy refuses ``ros2 param set``.
        check: extra validation returning a reason string, or None when the value is fine.
    """

    name: str
    default: Any
    description: str
    read_only: bool = False
    min_value: float | None = None
    max_value: float | None = None
    choices: tuple[str, ...] | None = None
    check: Validator | None = None

    @property
    def type_name(self) -> str:
        d = self.default
        if isinstance(d, bool):
            return "bool"
        if isinstance(d, int):
            return "int"
        if isinstance(d, float):
            return "double"
        if isinstance(d, str):
            return "string"
        if isinstance(d, (list, tuple)):
            inner = {bool: "bool", int: "int", float: "double", str: "string"}.get(type(d[0]) if d else str, "string")
            return f"{inner}[]"
        raise TypeError(f"parameter {self.name}: unsupported default {d!r}")

    def coerce(self, value: Any) -> Any:
        """Integers are accepted for double parameters (``rate:=2`` on a command line is an int)."""
        if self.type_name == "double" and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def validate(self, value: Any) -> str | None:
        """None when ``value`` is acceptable, else a reason naming the parameter and the value."""
        value = self.coerce(value)
        expected = {"bool": bool, "int": int, "double": float, "string": str}.get(self.type_name, (list, tuple))
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            return f"{self.name} must be of type {self.type_name}, got {value!r}"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value != value:  # NaN compares unequal to itself
                return f"{self.name} must be a number, got NaN"
            if self.min_value is not None and value < self.min_value:
                return f"{self.name}={value} is below the minimum {self.min_value}"
            if self.max_value is not None and value > self.max_value:
                return f"{self.name}={value} is above the maximum {self.max_value}"
        if self.choices is not None and value not in self.choices:
            return f"{self.name}={value!r} is not one of {list(self.choices)}"
        if self.check is not None:
            return self.check(value)
        return None


def validate_all(specs: Sequence[ParamSpec], values: dict[str, Any]) -> list[str]:
    """Reasons for every value in ``values`` that its spec rejects (unknown names are ignored)."""
    by_name = {s.name: s for s in specs}
    reasons = []
    for name, value in values.items():
        spec = by_name.get(name)
        if spec is not None:
            reason = spec.validate(value)
            if reason:
                reasons.append(reason)
    return reasons


def markdown_table(specs: Sequence[ParamSpec]) -> str:
    """The README table for one node's parameters."""
    rows = ["| name | type | default | range / choices | description |", "|---|---|---|---|---|"]
    for s in specs:
        if s.choices:
            rng = ", ".join(f"`{c}`" for c in s.choices)
        elif s.min_value is not None or s.max_value is not None:
            lo = "" if s.min_value is None else f"{s.min_value:g}"
            hi = "" if s.max_value is None else f"{s.max_value:g}"
            rng = f"[{lo}, {hi}]"
        else:
            rng = ""
        default = f"`{s.default!r}`" if not isinstance(s.default, str) else f"`{s.default}`" if s.default else "`''`"
        ro = " (read-only)" if s.read_only else ""
        rows.append(f"| `{s.name}` | {s.type_name} | {default} | {rng} | {s.description}{ro} |")
    return "\n".join(rows)


def default_values(specs: Sequence[ParamSpec]) -> dict[str, Any]:
    """Every parameter's default by name (list defaults as fresh lists, as ROS hands them over)."""
    return {s.name: (list(s.default) if isinstance(s.default, (list, tuple)) else s.default) for s in specs}


def values_from_yaml(specs: Sequence[ParamSpec], yaml_path, node_name: str) -> dict[str, Any]:
    """The values a node gets from a ROS 2 parameter file: the defaults, overridden by the
    ``ros__parameters`` of every section whose key ends with ``node_name`` (``/**/policy``, ``policy``)."""
    from pathlib import Path

    import yaml

    values = default_values(specs)
    data = yaml.safe_load(Path(yaml_path).read_text()) or {}
    for key, block in data.items():
        if key.endswith(node_name):
            values.update((block or {}).get("ros__parameters", {}))
    return values
