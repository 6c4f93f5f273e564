"""Which runtime parameter changes make a safety check weaker, and a record of every change (no rclpy import).

A node that guards a robot must not be loosened by a stray ``ros2 param set``: the safety filter and the
controller refuse, at run time, every change that makes a check weaker, naming the parameter, unless they
were started with the read-only opt-in ``allow_runtime_loosening:=true``. Tightening stays allowed.

Each parameter that bounds a check has a rule saying which direction is stricter:

- ``LOWER``: a smaller value is stricter (a scale, an acceleration, an age or time limit, a tolerance);
- ``HIGHER``: a larger value is stricter (a clearance, a margin);
- ``ON``: true is stricter (a check that can be switched off);
- ``OFF``: false is stricter (an option that relaxes a check when on);
- ``LOWER_NONZERO``: smaller is stricter and 0 means "not checked" (the loosest value);
- or a function ``(old, new, old_values, new_values) -> reason | None`` for values that are sets or boxes.

Parameters without a rule (blend shape, diagnostics rate...) change freely. Each rule is declared with its
parameter (``ParamSpec(..., tighten=LOWER)``); ``rules_from_specs`` gathers a node's table.

The rules only say which way is stricter, never that a value means something: every value first passes its
own spec (``ParamSpec.validate``: ``min_value``, and for a parameter whose 0 means off, ``min_positive``),
so "tightening" a tolerance or a timeout to 1e-300, below anything a sensor or a clock can resolve, is
refused before any rule is asked (``vla_ros.ros.param_guard``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

LOWER = "lower"
HIGHER = "higher"
ON = "on"
OFF = "off"
LOWER_NONZERO = "lower_nonzero"

Rule = str | Callable[[Any, Any, Mapping[str, Any], Mapping[str, Any]], "str | None"]


def rules_from_specs(specs, **rules: Rule) -> dict[str, Rule]:
    """A node's table: each parameter's ``ParamSpec.tighten`` rule, by name; ``rules`` add or replace some (a
    rule that needs what is known only at run time, such as the robot's limits)."""
    table = {s.name: s.tighten for s in specs if s.tighten is not None}
    table.update(rules)
    return table


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def loosening_reason(
    name: str, rule: Rule, old: Any, new: Any, old_values: Mapping[str, Any], new_values: Mapping[str, Any]
) -> str | None:
    """Why changing ``name`` from ``old`` to ``new`` weakens a check, or None when it does not."""
    if callable(rule):
        return rule(old, new, old_values, new_values)
    if rule == LOWER and new > old:
        return (
            f"{name}: raising it from {_fmt(old)} to {_fmt(new)} loosens the check (only lowering is allowed at "
            "run time)"
        )
    if rule == HIGHER and new < old:
        return (
            f"{name}: lowering it from {_fmt(old)} to {_fmt(new)} loosens the check (only raising is allowed at "
            "run time)"
        )
    if rule == ON and old and not new:
        return f"{name}: switching it off disables a check"
    if rule == OFF and new and not old:
        return f"{name}: switching it on relaxes a check"
    if rule == LOWER_NONZERO:
        if old > 0.0 and new == 0.0:
            return f"{name}: 0 switches the check off (was {_fmt(old)})"
        if old > 0.0 and new > old:
            return (
                f"{name}: raising it from {_fmt(old)} to {_fmt(new)} loosens the check (only lowering is "
                "allowed at run time)"
            )
    return None


def loosenings(
    rules: Mapping[str, Rule], old_values: Mapping[str, Any], new_values: Mapping[str, Any]
) -> dict[str, str]:
    """The reason by parameter name for every change from ``old_values`` to ``new_values`` that weakens a check."""
    reasons = {}
    for name, rule in rules.items():
        if name not in new_values or name not in old_values:
            continue
        old, new = old_values[name], new_values[name]
        if old == new:
            continue
        reason = loosening_reason(name, rule, old, new, old_values, new_values)
        if reason:
            reasons[name] = reason
    return reasons


@dataclasses.dataclass(frozen=True)
class ParamChange:
    """One accepted runtime change: what changed and whether it loosened a check (under the opt-in)."""

    name: str
    old: Any
    new: Any
    loosened: bool = False

    def __str__(self) -> str:
        return f"{self.name}: {_fmt(self.old)} -> {_fmt(self.new)}" + (" (loosened)" if self.loosened else "")


def changes_between(
    old_values: Mapping[str, Any], new_values: Mapping[str, Any], loosened: set[str] = frozenset()
) -> list[ParamChange]:
    """The parameters whose values differ, in ``new_values`` order."""
    return [
        ParamChange(k, old_values.get(k), v, k in loosened) for k, v in new_values.items() if old_values.get(k) != v
    ]
