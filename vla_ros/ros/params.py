"""Declares a node's parameters from its ``ParamSpec`` table (``vla_ros.params``) on an rclpy node.

Descriptors carry the type, range and read-only flag (so ``ros2 param describe`` shows them); initial values
are validated before the node starts, and runtime changes (``ros2 param set``) are refused with a reason a
person can read. Uses only rclpy APIs present in Humble, Jazzy and Kilted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vla_ros.params.spec import TYPE_WORDS, ParamSpec, renamed, validate_all  # noqa: F401  (re-exported for the nodes)


class ParameterError(ValueError):
    """An initial parameter value (from a YAML file or the command line) failed validation."""


# ParameterType constants (rcl_interfaces/msg/ParameterType) of each table type.
_ROS_TYPES = {"bool": 1, "int": 2, "double": 3, "string": 4, "bool[]": 6, "int[]": 7, "double[]": 8, "string[]": 9}


def declare_parameters(
    node,
    specs: Sequence[ParamSpec],
    on_change: Callable[[str, Any], None] | None = None,
    check: Callable[[dict[str, Any]], str | None] | None = None,
) -> dict[str, Any]:
    """Declare ``specs`` on ``node`` with descriptors, validate initial values, install the on-set check.

    A runtime change (``ros2 param set``, the SetParameters service) takes effect only once the whole
    request has passed: each value's type (named in words), range and choices, then ``check(values)`` on
    every parameter's value as it would be after the change (cross-field rules, e.g. building the node's
    configuration; it returns a reason or None). Only then ``on_change(name, value)`` is called for each
    parameter of the request, with the value coerced (ints for doubles, arrays as lists), so a refused
    request changes nothing.

    Every parameter is declared with dynamic typing and typed by the table instead of by rclpy: rclpy's
    own refusal reads "Wrong parameter type, expected '8' got '4'" and its static typing refuses the int
    ``[-1, -1, 0]`` for a double[]; ours says "workspace_min_m expects double[] (a list of numbers), got
    string 'abc'". Descriptors still carry the table's type, so ``ros2 param describe`` shows it.

    A parameter's old names (``ParamSpec.old_names``) are still accepted, with a deprecation warning naming
    both: a start-up value given under one (YAML file, launch file, command line) is used for the new name
    unless the new name is given too; a runtime change under one is renamed before any check (Jazzy and
    later: rclpy's pre-set callback; on Humble set the new name at run time).

    Returns the current values by name. Raises ParameterError naming every bad initial value, so a node
    refuses to start on a bad configuration instead of running with it.
    """
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
    from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException

    by_name = {s.name: s for s in specs}
    old_values = _old_name_values(node, specs)
    values: dict[str, Any] = {}
    reasons: list[str] = []
    for s in specs:
        desc = ParameterDescriptor(description=s.description, read_only=s.read_only, dynamic_typing=True)
        if s.choices:
            desc.additional_constraints = "one of: " + ", ".join(s.choices)
        elif (
            s.min_positive is not None or s.min_reason
        ):  # the range says [0, max]; 0 < value < min_positive is refused too
            desc.additional_constraints = f"allowed: {s.range_text()}" + (
                f" (lower: {s.min_reason})" if s.min_reason else ""
            )
        # Ranges go into the descriptor so tools show them; rclpy also enforces them on set.
        if s.type_name == "double" and s.min_value is not None and s.max_value is not None:
            desc.floating_point_range = [
                FloatingPointRange(from_value=float(s.min_value), to_value=float(s.max_value), step=0.0)
            ]
        elif s.type_name == "int" and s.min_value is not None and s.max_value is not None:
            desc.integer_range = [IntegerRange(from_value=int(s.min_value), to_value=int(s.max_value), step=0)]
        default = list(s.default) if isinstance(s.default, tuple) else s.default
        if s.name in old_values:  # given under an old name: that value, unless the new name is given too
            default = old_values[s.name]
        try:
            param = node.declare_parameter(s.name, default, desc)
        except InvalidParameterTypeException as err:  # not with dynamic typing; kept readable all the same
            reasons.append(f"{s.name} expects {s.type_name} ({TYPE_WORDS[s.type_name]}): {err}")
            continue
        except InvalidParameterValueException as err:  # rclpy's range check: names the field, the range, the value
            reasons.append(f"{s.name}: {err}")
            continue
        finally:
            _keep_table_type(node, s)
        reason = s.validate(param.value)
        if reason:
            reasons.append(reason)
        values[s.name] = s.coerce(param.value)
    if reasons:
        raise ParameterError("invalid parameters: " + "; ".join(reasons))
    if check is not None:
        reason = check(dict(values))
        if reason:
            raise ParameterError(f"invalid parameters: {reason}")
    current = dict(values)

    def on_set(params) -> SetParametersResult:
        try:
            candidate = dict(current)
            for p in params:
                spec = by_name.get(p.name)
                if spec is None:
                    continue
                reason = spec.validate(p.value)
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
                candidate[p.name] = spec.coerce(p.value)
            if check is not None:
                reason = check(dict(candidate))
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
            for p in params:
                if p.name in by_name:
                    current[p.name] = candidate[p.name]
                    if on_change is not None:
                        on_change(p.name, candidate[p.name])
            return SetParametersResult(successful=True)
        finally:
            for p in params:
                if p.name in by_name:
                    _keep_table_type(node, by_name[p.name])

    node.add_on_set_parameters_callback(on_set)
    _accept_old_names_at_run_time(node, specs)
    return values


def _old_name_values(node, specs: Sequence[ParamSpec]) -> dict[str, Any]:
    """Start-up values given under old names, by new name (converted), each announced with a warning. Each old
    name is declared for a moment to read its override (public rclpy API on every distro), then undeclared."""
    from rcl_interfaces.msg import ParameterDescriptor

    out: dict[str, Any] = {}
    for old, spec in renamed(specs).items():
        value = node.declare_parameter(old, None, ParameterDescriptor(dynamic_typing=True)).value
        node.undeclare_parameter(old)
        if value is not None:
            node.get_logger().warning(spec.deprecation(old))
            out.setdefault(spec.name, spec.value_from_old(value))
    return out


def _accept_old_names_at_run_time(node, specs: Sequence[ParamSpec]) -> None:
    """Rename a runtime change under an old name to the new name, before any check sees it (so the checks, the
    stored value and ``ros2 param get`` all use the new name). rclpy's pre-set callback: Jazzy and later."""
    from rclpy.parameter import Parameter

    old_names = renamed(specs)
    if not old_names or not hasattr(node, "add_pre_set_parameters_callback"):
        return

    def pre_set(params):
        out = []
        for p in params:
            spec = old_names.get(p.name)
            if spec is None:
                out.append(p)
                continue
            node.get_logger().warning(spec.deprecation(p.name))
            value = spec.value_from_old(p.value)
            out.append(Parameter(spec.name, p.type_, value) if value is p.value else Parameter(spec.name, value=value))
        return out

    node.add_pre_set_parameters_callback(pre_set)


def _keep_table_type(node, spec: ParamSpec) -> None:
    """Put the table's type back into the descriptor: with dynamic typing rclpy sets it to the type of
    every value offered, before any callback can refuse it (and to int for an accepted int double)."""
    if node.has_parameter(spec.name):
        node.describe_parameter(spec.name).type = _ROS_TYPES[spec.type_name]
