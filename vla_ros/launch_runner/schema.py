# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""What each launch XML tag accepts, and the check of a whole file against it (upstream's parse step).

Upstream ``launch_xml`` parses the entire file before anything runs: every action reads the attributes
it knows (typed ones are coerced then) and its sub-tags, and ``assert_entity_completely_parsed`` raises
for any attribute or nested tag left unread -- also under ``if="false"`` and inside groups and timers.
:func:`check_file` does the same from the table below, so a typo fails here exactly where it fails
under ``ros2 launch``, with the file, line, tag and attribute in the message.

Attribute kinds, as upstream reads them:

* ``SUBST``: text with substitutions (most attributes);
* ``TEXT``: plain text, only ``\\x`` escapes (``<arg name>``, ``description``, ``<choice value>``);
* ``BOOL`` / ``INT`` / ``FLOAT``: a literal, coerced while parsing; a substitution there is refused
  (upstream hands the unparsed text on and fails or misbehaves later: ``shell="$(var x)"`` would be
  true whatever x is);
* ``FLOAT_OR_SUBST`` / ``BOOL_OR_SUBST``: a literal, or text with substitutions evaluated when the
  action runs (``<timer period>``, ``<append_env prepend>``, ``allow_substs``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import LaunchError
from .substitutions import has_substitutions, parse_bool, parse_template, unescape
from .xmlfile import Element


class Kind(enum.Enum):
    SUBST = "text with substitutions"
    TEXT = "plain text"
    BOOL = "boolean literal"
    INT = "integer literal"
    FLOAT = "number literal"
    FLOAT_OR_SUBST = "number or substitution"
    BOOL_OR_SUBST = "boolean or substitution"


@dataclass(frozen=True)
class Attr:
    kind: Kind = Kind.SUBST
    required: bool = False
    minimum: float | None = None  # for FLOAT: upstream refuses negative timeouts and delays
    choices: frozenset[str] | None = None  # a literal from a fixed set (on_exit)


@dataclass(frozen=True)
class Tag:
    attrs: Mapping[str, Attr]
    #: Sub-tags by name; ``actions=True`` also admits any action tag (group, timer, launch).
    children: Mapping[str, Tag] = field(default_factory=dict)
    actions: bool = False


S, REQ = Attr(), Attr(required=True)
_NAME_VALUE = {"name": REQ, "value": REQ}
_KEEP = Tag(_NAME_VALUE)
_ENV = Tag(_NAME_VALUE)
_PROCESS = {
    "cwd": S,
    "name": S,
    "launch-prefix": S,
    "output": S,
    "respawn": S,
    "on_exit": Attr(Kind.TEXT, choices=frozenset({"shutdown"})),
    "respawn_max_retries": Attr(Kind.INT),
    "respawn_delay": Attr(Kind.FLOAT, minimum=0.0),
    "sigterm_timeout": Attr(Kind.FLOAT, minimum=0.0),
    "sigkill_timeout": Attr(Kind.FLOAT, minimum=0.0),
    "shell": Attr(Kind.BOOL),
    "emulate_tty": Attr(Kind.BOOL),
}
# <param> has two forms checked by _check_param: name/value/type/value-sep (+ nested <param>) or from.
PARAM_NAMED = frozenset({"name", "value", "type", "value-sep"})
PARAM_FROM = frozenset({"from", "allow_substs"})
PARAM_TYPES = ("str", "int", "float", "bool", "list_of_str", "list_of_int", "list_of_float", "list_of_bool", "yaml")
_PARAM = Tag(
    {
        "name": S,
        "value": S,
        "type": Attr(Kind.TEXT),
        "value-sep": Attr(Kind.TEXT),
        "from": S,
        "allow_substs": Attr(Kind.BOOL_OR_SUBST),
    }
)

ACTIONS: dict[str, Tag] = {
    "arg": Tag(
        {"name": Attr(Kind.TEXT, required=True), "default": S, "description": Attr(Kind.TEXT)},
        {"choice": Tag({"value": Attr(Kind.TEXT, required=True)})},
    ),
    "let": Tag(_NAME_VALUE),
    "include": Tag({"file": REQ}, {"arg": Tag(_NAME_VALUE)}),
    "group": Tag({"scoped": Attr(Kind.BOOL), "forwarding": Attr(Kind.BOOL)}, {"keep": _KEEP}, actions=True),
    "reset": Tag({}, {"keep": _KEEP}),
    "reset_env": Tag({}),
    "set_env": Tag(_NAME_VALUE),
    "unset_env": Tag({"name": REQ}),
    "append_env": Tag({**_NAME_VALUE, "prepend": Attr(Kind.BOOL_OR_SUBST), "separator": S}),
    "log": Tag({"message": REQ}),
    "shutdown": Tag({"reason": S}),
    "timer": Tag(
        {"period": Attr(Kind.FLOAT_OR_SUBST, required=True), "cancel_on_shutdown": Attr(Kind.BOOL_OR_SUBST)},
        actions=True,
    ),
    "executable": Tag({**_PROCESS, "cmd": REQ}, {"env": _ENV}),
    "node": Tag(
        {**_PROCESS, "pkg": S, "exec": REQ, "namespace": S, "args": S, "ros_args": S, "exec_name": S},
        {"param": _PARAM, "remap": Tag({"from": REQ, "to": REQ}), "env": _ENV},
    ),
    "push_ros_namespace": Tag({"namespace": REQ}),
    "push-ros-namespace": Tag({"namespace": REQ}),
    "set_parameter": Tag(_NAME_VALUE),
    "set_parameters_from_file": Tag({"filename": REQ}),
    "set_remap": Tag({"from": REQ, "to": REQ}),
}
CONDITIONS = {"if": S, "unless": S}  # Action.parse reads these on every action
ROOT = Tag({"deprecated": Attr(Kind.TEXT)}, actions=True)

# Upstream actions this runner does not run; each refusal says why and what to do instead.
REFUSED = {
    "node_container": "composable node containers need rclcpp_components; run this file with ros2 launch",
    "load_composable_node": "composable nodes need rclcpp_components; run this file with ros2 launch",
    "ros_timer": "a timer on ROS time needs launch_ros's own node; use <timer> (wall time) or ros2 launch",
    "set_ros_log_dir": "not supported here; set ROS_LOG_DIR in the environment (<set_env>)",
    "set_use_sim_time": (
        "it sets use_sim_time on launch's own internal node only, never on the nodes it starts (and its XML form fails "
        "at run time under ros2 launch); give the nodes "
        '<set_parameter name="use_sim_time" value="true"/> instead'
    ),
}


def coerce_literal(kind: Kind, text: str) -> Any:
    """A typed literal as upstream coerces it (``launch.utilities.type_utils``); ValueError if it is not."""
    if kind in (Kind.BOOL, Kind.BOOL_OR_SUBST):
        loaded = parse_bool(text)
        if loaded is not None:
            return loaded
        raise ValueError(f"expected a boolean (true/false/1/0), got {text!r}")
    if kind is Kind.INT:
        return int(text)
    return float(text)


def _fail(el: Element, attr: str | None, message: str) -> LaunchError:
    where = f"{el.where}: <{el.tag}>" + (f" attribute '{attr}'" if attr else "")
    return LaunchError(f"{where}: {message}")


def _check_attrs(el: Element, allowed: Mapping[str, Attr]) -> None:
    unknown = sorted(set(el.attrib) - set(allowed))
    if unknown:
        raise _fail(
            el,
            unknown[0],
            f"unknown attribute(s) {', '.join(unknown)} (<{el.tag}> takes: {', '.join(sorted(allowed)) or 'none'})",
        )
    for name, spec in allowed.items():
        if name not in el.attrib:
            if spec.required:
                raise _fail(el, name, "missing required attribute")
            continue
        text = el.attrib[name]
        try:
            el.values[name] = _parse_value(spec, text)
        except (LaunchError, ValueError) as exc:
            raise _fail(el, name, str(exc)) from None


def _parse_value(spec: Attr, text: str) -> Any:
    if spec.kind is Kind.SUBST:
        return parse_template(text)
    if spec.kind is Kind.TEXT:
        value = unescape(text)
        if spec.choices is not None and value not in spec.choices:
            raise ValueError(
                f"expected {' or '.join(sorted(spec.choices))}, got {text!r} (other values are not "
                "supported upstream either)"
            )
        return value
    if spec.kind in (Kind.FLOAT_OR_SUBST, Kind.BOOL_OR_SUBST):
        try:
            return coerce_literal(spec.kind, text)
        except ValueError:
            template = parse_template(text)
            if not has_substitutions(template):
                raise
            return template
    if "$(" in text:
        raise ValueError(f"takes a {spec.kind.value} ({text!r}); upstream reads it without substitutions")
    try:
        value = coerce_literal(spec.kind, text)
    except ValueError as exc:
        raise ValueError(
            f"expected a {spec.kind.value}, got {text!r}" if "boolean" not in str(exc) else str(exc)
        ) from None
    if spec.minimum is not None and value < spec.minimum:
        raise ValueError(f"must be >= {spec.minimum:g}, got {text!r}")
    return value


def _check_children(el: Element, tag: Tag) -> None:
    for child in el.children:
        if tag.actions and child.tag in ACTIONS | REFUSED:
            check_action(child)
        elif child.tag in tag.children:
            if child.tag == "param":
                _check_param(child)
            else:
                _check_attrs(child, tag.children[child.tag].attrs)
                _check_children(child, tag.children[child.tag])
        else:
            allowed = sorted(tag.children) + (["any action"] if tag.actions else [])
            raise LaunchError(
                f"{child.where}: unknown tag <{child.tag}> inside <{el.tag}> "
                f"(allowed: {', '.join(f'<{t}>' if t != 'any action' else t for t in allowed) or 'none'})"
            )


def _check_param(el: Element) -> None:
    """launch_ros Node.parse_nested_parameters: a 'from' file or a named value/nested params."""
    if "from" in el.attrib and "name" in el.attrib:
        raise _fail(el, "from", "'name' and 'from' are mutually exclusive")
    if "from" in el.attrib:
        _check_attrs(el, {k: v for k, v in _PARAM.attrs.items() if k in PARAM_FROM})
        if el.children:
            raise LaunchError(f"{el.children[0].where}: unknown tag <{el.children[0].tag}> inside <param from=...>")
        return
    if "name" not in el.attrib:
        raise _fail(el, None, "needs a 'name' or a 'from' attribute")
    if "allow_substs" in el.attrib:
        raise _fail(el, "allow_substs", "can only be used together with 'from'")
    _check_attrs(el, {k: v for k, v in _PARAM.attrs.items() if k in PARAM_NAMED})
    if "value-sep" in el.attrib and "value" not in el.attrib:
        raise _fail(el, "value-sep", "unknown attribute without 'value'")
    if el.attrib.get("type") is not None and el.values["type"] not in PARAM_TYPES:
        raise _fail(el, "type", f"unknown type {el.attrib['type']!r} (expected one of {', '.join(PARAM_TYPES)})")
    for child in el.children:
        if child.tag != "param":
            raise LaunchError(f"{child.where}: unknown tag <{child.tag}> inside <param> (allowed: <param>)")
        _check_param(child)
    if el.children and "value" in el.attrib:
        raise _fail(el, "value", "nested parameters and value attributes are mutually exclusive")
    if el.children and "type" in el.attrib:
        raise _fail(el, "type", "nested parameters and type attributes are mutually exclusive")
    if not el.children and "value" not in el.attrib:
        raise _fail(el, "value", "either a value attribute or nested params are needed")


def check_action(el: Element) -> None:
    if el.tag in REFUSED:
        raise LaunchError(f"{el.where}: <{el.tag}> is not supported by vla-ros launch: {REFUSED[el.tag]}")
    if el.tag not in ACTIONS:
        raise LaunchError(
            f'{el.where}: unknown tag <{el.tag}> (upstream: "Unrecognized entity of the type: '
            f'{el.tag}"; actions: {", ".join(sorted(ACTIONS))})'
        )
    tag = ACTIONS[el.tag]
    _check_attrs(el, {**tag.attrs, **CONDITIONS})
    if "if" in el.attrib and "unless" in el.attrib:
        raise _fail(el, "if", "if and unless conditions can't be used simultaneously")
    _check_children(el, tag)


def check_file(root: Element) -> None:
    """Check a whole launch file as upstream parses it; fills ``Element.values`` with parsed attributes."""
    if root.tag != "launch":
        raise LaunchError(f"{root.where}: the root tag must be <launch>, not <{root.tag}>")
    _check_attrs(root, ROOT.attrs)
    _check_children(root, ROOT)
