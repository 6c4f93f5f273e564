"""Before commands flow: is the ros2_control controller that receives them configured with our joints?

A forward position controller takes its array by index, so a different ``joints`` order silently drives
the wrong joints, and a joint trajectory controller drops every message whose joint set is not its own.
ros2_control controllers are nodes named after the controller (``/<name>``, subscribing
``/<name>/commands`` or ``/<name>/joint_trajectory``) with a ``joints`` parameter, so the check asks that
node's parameter service, without blocking, and compares (``vla_ros.control.ros2_control``).

States (``state``), re-evaluated on a steady timer and whenever the command topic's subscribers change:

* ``off``: no check (``controller_check:=disabled``, or the Isaac interface, which matches joints by name);
* ``no_receiver``: nobody subscribes to the command topic yet: nothing is sent;
* ``pending``: the controller node subscribes and its parameters are being fetched, or the subscriber set
  is still settling: nothing is sent;
* ``verified``: its ``joints`` fit: commands flow;
* ``unverified``: the subscribers are not a ros2_control controller (the MuJoCo sim, a bridge: judged once
  the subscriber set has been stable for ``SETTLE_S`` with every node name known, so a controller
  discovered a moment after another subscriber is still checked first), or the controller node did not
  answer within the timeout: with
  ``auto`` commands flow and diagnostics say so, with ``require`` nothing is sent;
* ``mismatch``: its ``joints`` do not fit: nothing is sent, ERROR on ``/diagnostics``.

While nothing may be sent the node does not run its control cycle at all, so when output opens the
executor starts from the measured joint state instead of a plan that ran while nobody listened.
"""

from __future__ import annotations

import time

from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import GetParameters
from rclpy.clock import Clock, ClockType

from vla_ros.control.ros2_control import check_controller_joints
from vla_ros.ros.diagnostics import ERROR, OK, WARN

POLL_PERIOD_S = 0.2
# Discovery reports subscribers one by one: a set without the controller must stay the same this long
# before it counts as "not a ros2_control controller".
SETTLE_S = 0.5
UNKNOWN_NODE = "_NODE_NAME_UNKNOWN_"  # what the graph reports for an endpoint whose node is not discovered yet
# What else we ask besides joints: whether a forward controller commands positions, whether a JTC takes
# partial goals. Asked one name per request: a parameter service answers nothing at all when one of the
# names is undeclared (rclpy; rclcpp without allow_undeclared_parameters).
_EXTRA = {"forward_position": "interface_name", "joint_trajectory": "allow_partial_joints_goal"}


class ControllerJointsCheck:
    """The check for one output: ``topic`` (as resolved, remappings included) served by ``controller``."""

    def __init__(self, node, interface: str, topic: str, controller: str, joints, mode: str, timeout_s: float) -> None:
        self._node = node
        self._interface = interface
        self._topic = topic
        self._fqn = "/" + controller.strip("/")
        self._joints = list(joints)
        self._mode = mode
        self._timeout_s = timeout_s
        if mode == "disabled":
            self.state, self.detail = "off", "controller_check is disabled"
        elif interface not in _EXTRA:
            self.state, self.detail = "off", f"{interface} takes joints by name"
        else:
            self.state, self.detail = "no_receiver", f"nobody subscribes to {topic} yet"
        self.controller_joints: list[str] = []
        self.withheld = 0  # control cycles that sent nothing because of this check
        self._receivers: tuple[str, ...] | None = None
        self._since = 0.0  # when the subscriber set last changed (monotonic seconds)
        self._answers: dict[str, object] = {}
        self._in_flight = 0
        self._generation = 0  # answers to an older round (subscribers changed meanwhile) are ignored
        if self.state == "off":
            return
        self._client = node.create_client(GetParameters, f"{self._fqn}/get_parameters")
        node.create_timer(POLL_PERIOD_S, self._poll, clock=Clock(clock_type=ClockType.STEADY_TIME))

    @property
    def output_allowed(self) -> bool:
        return self.state in ("off", "verified") or (self.state == "unverified" and self._mode == "auto")

    def count_withheld(self) -> None:
        self.withheld += 1

    # ---- the check ---------------------------------------------------------------------------------
    def _set(self, state: str, detail: str) -> None:
        if (state, detail) == (self.state, self.detail):
            return
        self.state, self.detail = state, detail
        log = self._node.get_logger()
        if state == "mismatch":
            log.error(f"{self._fqn}: {detail}: sending nothing (fix the controller's joints or ours)")
        elif state == "unverified":
            log.warning(f"commands on {self._topic} unverified: {detail}")
        else:
            log.info(f"controller check {state}: {detail}")

    def _poll(self) -> None:
        try:
            infos = self._node.get_subscriptions_info_by_topic(self._topic)
        except Exception:  # noqa: BLE001 - the context is going away
            return
        receivers = tuple(sorted("/".join((i.node_namespace.rstrip("/"), i.node_name)) for i in infos))
        now = time.monotonic()
        if receivers != self._receivers:  # someone came, left or was respawned: judge again
            self._receivers, self._since = receivers, now
            self._generation += 1
            self._answers, self._in_flight = {}, 0
            if not receivers:
                self._set("no_receiver", f"nobody subscribes to {self._topic} yet")
            elif self._fqn in receivers:
                self._set("pending", f"asking {self._fqn} for its joints")
            else:
                self._set(
                    "pending",
                    f"{self._topic} goes to {list(receivers)}; waiting to see whether {self._fqn} subscribes too",
                )
        if self.state != "pending":
            return
        if self._fqn not in receivers:
            # Discovery can report an endpoint before its node's name: such a receiver may be the controller.
            named = not any(UNKNOWN_NODE in r for r in receivers)
            if (named and now - self._since >= SETTLE_S) or now - self._since > self._timeout_s:
                self._set(
                    "unverified",
                    f"{self._topic} goes to {list(receivers)}, not to a ros2_control controller {self._fqn}",
                )
        elif self._in_flight == 0 and not self._answers and self._client.service_is_ready():
            for name in ("joints", _EXTRA[self._interface]):
                future = self._client.call_async(GetParameters.Request(names=[name]))
                future.add_done_callback(lambda f, name=name, gen=self._generation: self._on_answer(gen, name, f))
                self._in_flight += 1
        elif now - self._since > self._timeout_s:
            self._set("unverified", f"{self._fqn} did not answer within {self._timeout_s:g} s")

    def _on_answer(self, generation: int, name: str, future) -> None:
        if generation != self._generation:
            return
        self._in_flight -= 1
        try:
            values = future.result().values
        except Exception:  # noqa: BLE001 - a failed call counts as "no such parameter"
            values = []
        self._answers[name] = values[0] if values else None
        if self._in_flight == 0:
            self._judge()

    def _judge(self) -> None:
        joints = self._answers.get("joints")
        if joints is None or joints.type != ParameterType.PARAMETER_STRING_ARRAY:
            self._set("unverified", f"{self._fqn} has no joints parameter: not a ros2_control controller")
            return
        self.controller_joints = list(joints.string_array_value)
        extra = self._answers.get(_EXTRA[self._interface])
        interface_name = (
            extra.string_value if extra is not None and extra.type == ParameterType.PARAMETER_STRING else ""
        )
        allow_partial = extra is not None and extra.type == ParameterType.PARAMETER_BOOL and extra.bool_value
        reason = check_controller_joints(
            self._interface, self._joints, self.controller_joints, allow_partial, interface_name
        )
        if reason:
            self._set("mismatch", reason)
        else:
            self._set("verified", f"{self._fqn} joints {self.controller_joints}")

    # ---- diagnostics -------------------------------------------------------------------------------
    def status(self) -> tuple[bytes, str, dict[str, object]]:
        """(level, message, values) for the node's ``output`` status."""
        values = {
            "check": self.state,
            "check.detail": self.detail,
            "joints": ",".join(self._joints),
            "controller.joints": ",".join(self.controller_joints),
            "withheld_cycles": self.withheld,
        }
        if self.state == "unverified" and not self.output_allowed:
            return WARN, f"sending nothing (controller_check require): {self.detail}", values
        level, message = {
            "mismatch": (ERROR, f"sending nothing: {self.detail}"),
            "pending": (WARN, f"sending nothing yet: {self.detail}"),
            "no_receiver": (WARN, f"sending nothing: {self.detail}"),
            "unverified": (OK, f"joints unverified: {self.detail}"),
            "verified": (OK, f"joints match {self._fqn}"),
        }.get(self.state, (OK, self.detail))
        return level, message, values
