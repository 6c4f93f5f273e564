"""Declares a node's parameters from its ``ParamSpec`` table (``vla_ros.params``) on an rclpy node.

Descriptors carry the type, range and read-only flag (so ``ros2 param describe`` shows them); initial values
are validated before the node starts, and runtime changes (``ros2 param set``) are refused with a reason a
person can read. Uses only rclpy APIs present in Humble, Jazzy and Kilted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vla_ros.params.spec import ParamSpec, validate_all  # noqa: F401  (re-exported for the node shells)


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
