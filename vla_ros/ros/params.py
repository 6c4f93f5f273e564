"""Parameter tables: every node parameter is defined once, with type, default, range and description.

From one table a node declares its parameters with descriptors (so ``ros2 param describe`` shows ranges
and read-only flags), validates both the initial values and runtime changes (``ros2 param set``) with a
reason a person can read, and the README's parameter tables are generated (``vla-ros params``). This is
the shape of ros2_controllers' generate_parameter_library, written in plain Python. Uses only rclpy APIs
present in Humble, Jazzy and Kilted. The ROS-free part (``ParamSpec``, ``validate``, ``markdown_table``)
imports no rclpy so tables can be rendered and checked without a ROS install.
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


class ParameterError(ValueError):
    """An initial parameter value (from a YAML file or the command line) failed validation."""


def declare_parameters(
    node, specs: Sequence[ParamSpec], on_change: Callable[[str, Any], None] | None = None
) -> dict[str, Any]:
    """Declare ``specs`` on ``node`` with descriptors, validate initial values, install the on-set check.

    ``on_change(name, value)`` is called for each parameter of an accepted runtime change, only after
    every parameter in the request has passed validation (so a rejected request changes nothing).

    Returns the current values by name. Raises ParameterError naming every bad initial value, so a node
    refuses to start on a bad configuration instead of running with it.
    """
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
    from rclpy.exceptions import InvalidParameterValueException

    by_name = {s.name: s for s in specs}
    values: dict[str, Any] = {}
    reasons: list[str] = []
    for s in specs:
        desc = ParameterDescriptor(description=s.description, read_only=s.read_only)
        if s.choices:
            desc.additional_constraints = "one of: " + ", ".join(s.choices)
        if s.type_name == "double":
            # rclpy would refuse an integer override (`real_time_factor:=0`) for a double parameter;
            # dynamic typing lets it through and validate()/coerce() check the type themselves.
            desc.dynamic_typing = True
        # Ranges go into the descriptor so tools show them; rclpy also enforces them on set.
        if s.type_name == "double" and s.min_value is not None and s.max_value is not None:
            desc.floating_point_range = [FloatingPointRange(from_value=float(s.min_value), to_value=float(s.max_value), step=0.0)]
        elif s.type_name == "int" and s.min_value is not None and s.max_value is not None:
            desc.integer_range = [IntegerRange(from_value=int(s.min_value), to_value=int(s.max_value), step=0)]
        default = list(s.default) if isinstance(s.default, tuple) else s.default
        try:
            param = node.declare_parameter(s.name, default, desc)
        except InvalidParameterValueException as err:
            reasons.append(f"{s.name}: {err}")
            continue
        except Exception as err:  # rclpy raises InvalidParameterTypeException etc. for a wrong YAML type
            reasons.append(f"{s.name}: expected {s.type_name}: {err}")
            continue
        value = s.coerce(param.value)
        reason = s.validate(value)
        if reason:
            reasons.append(reason)
        values[s.name] = value
    if reasons:
        raise ParameterError("invalid parameters: " + "; ".join(reasons))

    def on_set(params) -> SetParametersResult:
        for p in params:
            spec = by_name.get(p.name)
            if spec is None:
                continue
            reason = spec.validate(p.value)
            if reason:
                return SetParametersResult(successful=False, reason=reason)
        if on_change is not None:
            for p in params:
                if p.name in by_name:
                    on_change(p.name, by_name[p.name].coerce(p.value))
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(on_set)
    return values
