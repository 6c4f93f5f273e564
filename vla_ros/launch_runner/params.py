# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Typing of ``<param>`` / ``<set_parameter>`` values and the parameter files given to nodes.

Follows ``launch_ros`` (``Node.parse_nested_parameters``, ``evaluate_parameter_dict``):

* a literal value without ``type`` is read with YAML rules ("1" -> int, "1.0" -> float, "true" -> bool,
  "[1, 2]" -> list, "'7'" -> the string 7, anything unreadable -> the text), then ``\\x`` escapes in a
  resulting string are resolved; a value holding substitutions is evaluated first and the result is
  read with YAML rules (an empty result is the empty string);
* with ``value-sep`` the raw value is split first and each item typed alone;
* ``type`` forces str, int, float, bool, list_of_str/int/float/bool or yaml (list_of_str keeps the
  items as written);
* lists must be non-empty with items of one type (bool, int, float or str); YAML null and mappings are
  refused (nested ``<param>`` tags make mappings);
* nested ``<param>`` names are joined with dots;
* each inline ``<param>`` reaches the node through its own generated YAML file, keyed by the node's
  full name when name and namespace are known, else ``/**``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .errors import LaunchError
from .substitutions import has_substitutions, parse_template

_SCALAR_TYPES = {"str": str, "int": int, "float": float, "bool": bool}
_LIST_TYPES = {"list_of_str": str, "list_of_int": int, "list_of_float": float, "list_of_bool": bool}
TYPE_NAMES = ("yaml", *_SCALAR_TYPES, *_LIST_TYPES)
_VALID_ITEM_TYPES = (bool, int, float, str)


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _yaml_load(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # not valid YAML: keep the string, as launch does for plain text


def _uniform(items: list, text: object) -> list:
    if not items:
        raise LaunchError(f"{text!r}: an empty list has no parameter type; give a type")
    item_types = {type(item) for item in items}
    if len(item_types) > 1 or not issubclass(item_types.pop(), _VALID_ITEM_TYPES):
        raise LaunchError(f"{text!r}: list items must all have the same type (bool, int, float or str)")
    return items


def _check(value: Any, text: str) -> Any:
    if isinstance(value, _VALID_ITEM_TYPES):
        return value
    if isinstance(value, list):
        return _uniform(value, text)
    if value is None:
        raise LaunchError(f"{text!r} is YAML null, which is not a parameter value")
    if isinstance(value, dict):
        raise LaunchError(f"{text!r} is a YAML mapping; use nested <param> tags instead")
    return text  # e.g. dates: keep what was written


def _coerce(item: Any, kind: type) -> Any:
    if not isinstance(item, str):  # already typed by YAML (list_of_* from "[...]")
        if kind is float and isinstance(item, int) and not isinstance(item, bool):
            return float(item)
        if kind is str:
            return str(item)
        if isinstance(item, kind) and not (kind is int and isinstance(item, bool)):
            return item
        raise LaunchError(f"{item!r} is not of type {kind.__name__}")
    if kind is str:
        return item
    if kind is bool:
        if item.strip() in ("1", "0"):
            return item.strip() == "1"
        loaded = _yaml_load(item)
        if isinstance(loaded, bool):
            return loaded
        raise LaunchError(f"{item!r} is not a bool")
    try:
        return kind(item)
    except ValueError:
        raise LaunchError(f"{item!r} is not of type {kind.__name__}") from None


def _typed(text: str, type_name: str | None, substituted: bool) -> Any:
    """One scalar (or YAML list) value from its text."""
    if type_name in _SCALAR_TYPES:
        return _coerce(text, _SCALAR_TYPES[type_name])
    if type_name in _LIST_TYPES:
        items = _yaml_load(text)
        if not isinstance(items, list):
            raise LaunchError(f"{text!r} is not a list (type '{type_name}')")
        return [_coerce(item, _LIST_TYPES[type_name]) for item in items]
    if text == "":
        return ""
    loaded = _yaml_load(text)
    if isinstance(loaded, str) and not substituted:
        loaded = _unescape(loaded)
    return _check(loaded, text)


def param_value(
    raw: str,
    evaluate: Callable[[list], str],
    separator: str | None = None,
    type_name: str | None = None,
    substituted: bool = False,
) -> Any:
    """The typed value of a ``value`` attribute as written (``raw``), evaluating substitutions.

    ``substituted=True`` evaluates the whole text first (``<set_parameter>``, whose value upstream
    always treats as substitutions).
    """
    if type_name is not None and type_name not in TYPE_NAMES:
        raise LaunchError(f"unknown param type '{type_name}' (expected one of {', '.join(TYPE_NAMES)})")
    if type_name == "yaml":
        type_name = None
    if separator is None:
        template = parse_template(raw)
        if substituted or has_substitutions(template):
            return _typed(evaluate(template), type_name, substituted=True)
        return _typed(raw, type_name, substituted=False)
    if type_name in _SCALAR_TYPES:
        raise LaunchError(f"type '{type_name}' cannot be used with value-sep")
    items: list[Any] = []
    for item in raw.split(separator):
        template = parse_template(item)
        if has_substitutions(template):
            text, literal = evaluate(template), False
        else:
            text, literal = item, True
        if type_name in _LIST_TYPES:
            items.append(_coerce(_unescape(text) if literal else text, _LIST_TYPES[type_name]))
        else:
            value = _yaml_load(text) if text else ""
            if isinstance(value, str) and literal:
                value = _unescape(value)
            items.append(value if isinstance(value, _VALID_ITEM_TYPES) else text)
    return _uniform(items, raw)


def write_params_file(path: Path, values: dict[str, Any], node_key: str = "/**") -> None:
    """Write flat ``{dotted.name: value}`` parameters as a ROS 2 params file for ``node_key``."""
    document = {node_key: {"ros__parameters": dict(values)}}
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle, default_flow_style=False, sort_keys=False)
