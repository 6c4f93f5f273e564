"""``ParamSpec``: one node parameter defined once, with type, default, range and description.

From one table a node declares its parameters with descriptors (``vla_ros.ros.params``), validates initial
values and runtime changes with a reason a person can read, and the parameter reference is generated
(``vla-ros params``). This is the shape of ros2_controllers' generate_parameter_library, in plain Python.
No rclpy import: offline tools (evaluation, benchmarks, docs) read the tables without a ROS graph.
"""

from __future__ import annotations

import array
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

Validator = Callable[[Any], "str | None"]

# What each type means, for refusals a person can read ("expects double[] (a list of numbers), got ...").
TYPE_WORDS = {
    "bool": "true or false",
    "int": "an integer",
    "double": "a number",
    "string": "text",
    "bool[]": "a list of true/false values",
    "int[]": "a list of integers",
    "double[]": "a list of numbers",
    "string[]": "a list of strings",
}
_SCALAR_TYPES = {"bool": bool, "int": int, "double": float, "string": str}


def _is_type(value: Any, type_name: str) -> bool:
    """``value`` (already coerced) is a ``type_name``; a bool is never an int, an int never a double."""
    if type_name.endswith("[]"):
        return isinstance(value, list) and all(_is_type(v, type_name[:-2]) for v in value)
    return type(value) is _SCALAR_TYPES[type_name]  # noqa: E721  (exact: bool is a subclass of int)


def describe_value(value: Any) -> str:
    """A value with its type in words, as ROS 2 would name it: ``string 'abc'``, ``double[] [1.0, 2.0]``."""
    if value is None:
        return "no value (the parameter was unset)"
    if isinstance(value, (list, tuple, array.array)):
        items = list(value)
        kinds = {describe_value(v).split(" ", 1)[0] for v in items}
        kind = f"{kinds.pop()}[]" if len(kinds) == 1 else "a list" if not items else "a mixed list"
        return f"{kind} {items!r}"
    for name, cls in _SCALAR_TYPES.items():
        if type(value) is cls:
            return f"{name} {value!r}"
    if isinstance(value, bytes):
        return f"byte {value!r}"
    return f"{type(value).__name__} {value!r}"


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter. The type follows the default (bool, int, float, str, or a list of one of them).

    Args:
        min_value / max_value: inclusive range for numbers (also declared in the descriptor).
        min_positive: for a number whose 0 means "off" (said in the description, ``0 = ...``): the smallest
            value that works when it is not off. 0 stays allowed (``min_value`` is 0, as in the descriptor);
            values strictly between 0 and this are refused, since they mean nothing (a tolerance under the
            sensors' noise, a timeout under its input's period) and would pass for a setting.
        min_reason: why values below the lower bound (``min_value``, or ``min_positive``) mean nothing; it
            ends the refusal, after the allowed range.
        choices: allowed values for strings.
        read_only: a change needs a restart; rclpy refuses ``ros2 param set``.
        check: extra validation returning a reason string, or None when the value is fine.
        field: the field of the node's core configuration this parameter sets (True: the field of the same
            name); ``build_config`` builds the configuration from these. ``to_field`` converts the value
            (e.g. string lines to a tuple).
        tighten: which way a run-time change is stricter (``vla_ros.params.tightening``: LOWER, HIGHER, ON,
            OFF, LOWER_NONZERO or a rule function); None: it changes freely. ``tightening.rules_from_specs``
            builds a node's table from these.
        old_names: former names, still accepted for one release (a YAML file, a launch file, the command line,
            a ``set_parameters`` call): the value is used for this parameter, with a deprecation warning
            naming both. ``from_old`` converts an old name's value (e.g. a rate in Hz to a period in s).
    """

    name: str
    default: Any
    description: str
    read_only: bool = False
    min_value: float | None = None
    max_value: float | None = None
    choices: tuple[str, ...] | None = None
    check: Validator | None = None
    min_positive: float | None = None
    min_reason: str = ""
    field: bool | str = False
    to_field: Callable[[Any], Any] | None = None
    tighten: Any = None  # a vla_ros.params.tightening rule
    old_names: tuple[str, ...] = ()
    from_old: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if self.min_positive is not None:
            if (
                self.type_name not in ("int", "double")
                or self.min_value is None
                or self.min_value > 0
                or not self.min_positive > 0
            ):
                raise ValueError(
                    f"parameter {self.name}: min_positive needs a number with min_value <= 0 < min_positive"
                )
            if self.max_value is not None and self.min_positive > self.max_value:
                raise ValueError(
                    f"parameter {self.name}: min_positive {self.min_positive} is above max_value {self.max_value}"
                )

    @property
    def field_name(self) -> str | None:
        """The configuration field this parameter sets, or None."""
        return self.name if self.field is True else (self.field or None)

    def value_from_old(self, value: Any) -> Any:
        """The value an old name's ``value`` gives this parameter."""
        return self.from_old(value) if self.from_old is not None else value

    def deprecation(self, old_name: str) -> str:
        """The warning for a value given under ``old_name``."""
        return (
            f"parameter {old_name} is deprecated: it was renamed {self.name}, and its value sets {self.name} unless "
            f"{self.name} is given too (the old name is accepted until the next release)"
        )

    def range_text(self) -> str:
        """The allowed numbers in words: ``[0.01, 1]``, ``0, or [0.001, 3.2]``, ``>= 1``; '' when unbounded."""
        lo = "" if self.min_value is None else f"{self.min_value:g}"
        hi = "" if self.max_value is None else f"{self.max_value:g}"
        if self.min_positive is not None:
            return f"0, or [{self.min_positive:g}, {hi}]" if hi else f"0, or >= {self.min_positive:g}"
        if lo or hi:
            return f"[{lo}, {hi}]"
        return ""

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
        """The value as the node uses it: integers are accepted for doubles (``rate:=2`` on a command line is
        an int, ``[-1, -1, 0]`` in YAML an int[]), and arrays come as lists (rclpy hands a double[] set at
        run time over as ``array('d', ...)``, an int[] as ``array('q', ...)``)."""
        if isinstance(value, (tuple, array.array)):
            value = list(value)
        if self.type_name == "double" and type(value) is int:
            return float(value)
        if self.type_name == "double[]" and isinstance(value, list) and all(type(v) in (int, float) for v in value):
            return [float(v) for v in value]
        return value

    def type_reason(self, value: Any) -> str | None:
        """None when ``value`` has this parameter's type (after ``coerce``), else the reason in words."""
        if _is_type(self.coerce(value), self.type_name):
            return None
        return f"{self.name} expects {self.type_name} ({TYPE_WORDS[self.type_name]}), got {describe_value(value)}"

    def validate(self, value: Any) -> str | None:
        """None when ``value`` is acceptable, else a reason naming the parameter and the value."""
        reason = self.type_reason(value)
        if reason:
            return reason
        value = self.coerce(value)
        for item in value if isinstance(value, list) else [value]:
            reason = self._item_reason(item, value)
            if reason:
                return reason
        if self.check is not None:
            return self.check(value)
        return None

    def _item_reason(self, item: Any, value: Any) -> str | None:
        """Range and choices of one value (or of each element of an array ``value``)."""
        at = f"{self.name}={value!r}" if item is value else f"{self.name} element {item!r}"
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            if item != item:  # NaN compares unequal to itself
                return (
                    f"{self.name} must be a number, got NaN"
                    if item is value
                    else f"{self.name} must hold numbers, got NaN in {value!r}"
                )
            if self.min_value is not None and item < self.min_value:
                return f"{at} is below the minimum {self.min_value}{self._allowed()}"
            if self.min_positive is not None and 0 < item < self.min_positive:
                return f"{at} is between 0 and the smallest value that works, {self.min_positive}{self._allowed()}"
            if self.max_value is not None and item > self.max_value:
                return f"{at} is above the maximum {self.max_value}"
        if self.choices is not None and item not in self.choices:
            return f"{at} is not one of {list(self.choices)}"
        return None

    def _allowed(self) -> str:
        """The end of a lower-bound refusal: the allowed range, and why smaller values mean nothing."""
        return f" (allowed: {self.range_text()})" + (f": {self.min_reason}" if self.min_reason else "")


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


def with_old_names(spec: ParamSpec, *old_names: str, from_old: Callable[[Any], Any] | None = None) -> ParamSpec:
    """``spec`` also accepting ``old_names`` (one node's former names for a parameter shared by several)."""
    return dataclasses.replace(spec, old_names=spec.old_names + old_names, from_old=from_old or spec.from_old)


def renamed(specs: Sequence[ParamSpec]) -> dict[str, ParamSpec]:
    """Each old (deprecated) parameter name, with the spec that took it over."""
    return {old: s for s in specs for old in s.old_names}


def config_fields(specs: Sequence[ParamSpec], values: dict[str, Any]) -> dict[str, Any]:
    """The configuration fields ``values`` set, by field name (each spec's ``field`` and ``to_field``)."""
    return {s.field_name: (s.to_field(values[s.name]) if s.to_field else values[s.name]) for s in specs if s.field_name}


def build_config(factory: Callable[..., Any], specs: Sequence[ParamSpec], values: dict[str, Any], *args, **extra):
    """A node's core configuration from its parameter values: ``factory(*args, **fields)``, the fields from
    the specs (``config_fields``), ``extra`` setting what no single parameter sets (or replacing a field).
    The one builder of every node's configuration: a parameter is declared once, in its spec."""
    return factory(*args, **{**config_fields(specs, values), **extra})


def markdown_table(specs: Sequence[ParamSpec]) -> str:
    """The README table for one node's parameters."""
    rows = ["| name | type | default | range / choices | description |", "|---|---|---|---|---|"]
    for s in specs:
        rng = ", ".join(f"`{c}`" for c in s.choices) if s.choices else s.range_text()
        default = f"`{s.default!r}`" if not isinstance(s.default, str) else f"`{s.default}`" if s.default else "`''`"
        ro = " (read-only)" if s.read_only else ""
        old = (
            " (formerly " + ", ".join(f"`{o}`" for o in s.old_names) + ": still accepted, with a warning, until the "
            "next release)"
            if s.old_names
            else ""
        )
        rows.append(f"| `{s.name}` | {s.type_name} | {default} | {rng} | {s.description}{ro}{old} |")
    return "\n".join(rows)


def default_values(specs: Sequence[ParamSpec]) -> dict[str, Any]:
    """Every parameter's default by name (list defaults as fresh lists, as ROS hands them over)."""
    return {s.name: (list(s.default) if isinstance(s.default, (list, tuple)) else s.default) for s in specs}


def values_from_yaml(specs: Sequence[ParamSpec], yaml_paths, node_name: str, warn=None) -> dict[str, Any]:
    """The values a node gets from ROS 2 parameter files (one path or several, as a node given several
    ``--params-file``), in rcl's order: the sections that reach the node (key ``/**``, or ending with
    ``node_name``: ``/**/policy``, ``policy``) are merged per key across the files, a later file winning within
    a key, and the keys apply in the order they first appear, a later key winning. So a ``/**`` section that
    first appears after the node's own section (``config/limits.yaml`` after the node's file, as the launch
    files pass them; a launch file's named parameters) overrides it, and one that appears before it does not.
    A value under an old name is used for its new one unless that is given too, as the node does;
    ``warn(message)`` hears the deprecation (default: this module's logger)."""
    import logging
    from pathlib import Path

    import yaml

    if isinstance(yaml_paths, (str, Path)):
        yaml_paths = [yaml_paths]
    files = [yaml.safe_load(Path(path).read_text()) or {} for path in yaml_paths]
    sections: dict[str, dict[str, Any]] = {}  # key -> its parameters, keys in order of first appearance
    for data in files:
        for key, block in data.items():
            if key in ("/**", "**") or key.endswith(node_name):
                sections.setdefault(key, {}).update((block or {}).get("ros__parameters", {}))
    given: dict[str, Any] = {}
    for params in sections.values():
        given.update(params)
    for old, spec in renamed(specs).items():
        if old in given:
            value = given.pop(old)
            if spec.name not in given:
                (warn or logging.getLogger(__name__).warning)(spec.deprecation(old))
                given[spec.name] = spec.value_from_old(value)
    values = default_values(specs)
    values.update(given)
    return values
