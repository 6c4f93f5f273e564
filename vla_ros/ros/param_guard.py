"""Runtime parameter changes validated as a whole before anything takes effect, and never silently looser.

Every node with run-time parameters takes its changes through it (policy, safety filter, controller); a table
without tightening rules (the policy's) gets the type, range and build checks only. Per ``ros2 param set``
request, in order: each value's type and range from the node's table; no change that weakens a check
(``vla_ros.params.tightening``) unless the node was started with ``allow_runtime_loosening:=true``; the
complete configuration built from the candidate values (``build`` raises ValueError with the reason). Only
when all pass does ``apply`` run, once per request, with the built configuration; every accepted change is
logged ``old -> new`` (loosening ones at WARN) and kept for ``/diagnostics``.

Usage (the guard must exist before the table is declared, and install itself after it, so that its
callback runs before the table's own; rclpy runs the newest on-set callback first on Humble, Jazzy and
Kilted)::

    guard = ParamGuard(node, PARAMS)  # tightening rules from the specs' ``tighten``
    values = declare_parameters(node, PARAMS, on_change=guard.on_change)
    guard.install(values, build=..., apply=..., allow_loosening=values["allow_runtime_loosening"])
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vla_ros.params.spec import ParamSpec
from vla_ros.params.tightening import ParamChange, Rule, changes_between, loosenings, rules_from_specs

HISTORY = 20  # accepted changes kept for diagnostics


class ParamGuard:
    def __init__(self, node, specs: Sequence[ParamSpec], rules: Mapping[str, Rule] | None = None) -> None:
        """``rules``: the tightening table (default: the specs' own ``tighten`` rules)."""
        self._node = node
        self._specs = {s.name: s for s in specs}
        self.rules = rules if rules is not None else rules_from_specs(specs)
        self.values: dict[str, Any] = {}
        self.allow_loosening = False
        self.history: deque[ParamChange] = deque(maxlen=HISTORY)
        self.accepted = 0  # accepted changes (parameters) since the start
        self.refused = 0  # refused requests since the start
        self.last_refusal = ""
        self._build: Callable[[dict[str, Any]], Any] | None = None
        self._apply: Callable[[Any, dict[str, Any], list[ParamChange]], None] | None = None
        self._staged: tuple[dict[str, Any], Any, list[ParamChange]] | None = None
        self._listeners: list[Callable[[list[ParamChange]], None]] = []

    def install(
        self,
        values: dict[str, Any],
        build: Callable[[dict[str, Any]], Any],
        apply: Callable[[Any, dict[str, Any], list[ParamChange]], None],
        allow_loosening: bool,
    ) -> None:
        """``build(values)`` returns the configuration (raises ValueError with the reason);
        ``apply(built, values, changes)`` makes it take effect."""
        self.values = dict(values)
        self._build, self._apply = build, apply
        self.allow_loosening = bool(allow_loosening)
        self._node.add_on_set_parameters_callback(self._validate)

    def on_changes(self, listener: Callable[[list[ParamChange]], None]) -> None:
        """Call ``listener(changes)`` after every accepted request (e.g. to publish diagnostics at once)."""
        self._listeners.append(listener)

    def _refuse(self, reason: str):
        from rcl_interfaces.msg import SetParametersResult

        self.refused += 1
        self.last_refusal = reason
        self._node.get_logger().warning(f"parameter change refused: {reason}")
        return SetParametersResult(successful=False, reason=reason)

    def _validate(self, params):
        from rcl_interfaces.msg import SetParametersResult

        self._staged = None
        candidate = dict(self.values)
        for p in params:
            spec = self._specs.get(p.name)
            if spec is None:
                continue  # use_sim_time and other parameters the node does not own
            reason = spec.validate(p.value)
            if reason:
                return self._refuse(reason)
            candidate[p.name] = spec.coerce(p.value)
        loose = loosenings(self.rules, self.values, candidate)
        if loose and not self.allow_loosening:
            return self._refuse(
                "; ".join(loose.values()) + " (start the node with allow_runtime_loosening:=true to allow it)"
            )
        try:
            built = self._build(candidate)
        except (ValueError, TypeError) as err:
            return self._refuse(str(err))
        self._staged = (candidate, built, changes_between(self.values, candidate, set(loose)))
        return SetParametersResult(successful=True)

    def on_change(self, name: str, value) -> None:
        """The table's on_change hook: applies the staged request once, at its first parameter."""
        staged, self._staged = self._staged, None
        if staged is None:
            return
        candidate, built, changes = staged
        self._apply(built, candidate, changes)
        self.values = candidate
        logger = self._node.get_logger()
        for change in changes:
            self.accepted += 1
            self.history.append(change)
            if change.loosened:
                logger.warning(f"parameter {change} (allowed by allow_runtime_loosening)")
            else:
                logger.info(f"parameter {change}")
        for listener in self._listeners:
            listener(changes)

    def changes_status(self, changes: list[ParamChange]) -> tuple[str, int, str, dict[str, Any]]:
        """The ``parameters`` diagnostic for accepted ``changes``: WARN when one loosened a limit."""
        from diagnostic_msgs.msg import DiagnosticStatus

        level = DiagnosticStatus.WARN if any(c.loosened for c in changes) else DiagnosticStatus.OK
        return ("parameters", level, "changed: " + "; ".join(str(c) for c in changes), self.diagnostic_values())

    def diagnostic_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "params.allow_runtime_loosening": self.allow_loosening,
            "params.changed": self.accepted,
            "params.refused": self.refused,
        }
        for i, change in enumerate(reversed(self.history)):
            if i == 5:
                break
            values[f"params.change.{i}"] = str(change)  # .0 is the newest
        if self.last_refusal:
            values["params.last_refusal"] = self.last_refusal
        return values
