# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Typing of ``<param>`` values and the parameter files given to nodes.

Follows ``launch_ros``:

* a value without ``type`` is read with YAML rules ("1" -> int, "1.0" ->
  float, "true" -> bool, "[1, 2]" -> list, anything else -> str); lists must
  be non-empty with items of one type (bool, int, float or str);
* with ``value-sep`` the raw value is split first and each item typed alone;
* ``type`` may force str, int, float, bool, list_of_str/int/float/bool or yaml;
* nested ``<param>`` names are joined with dots;
* inline values reach the node through a generated YAML file keyed
  ``/**: {ros__parameters: {...}}`` (upstream uses the node's full name when
  it is fully specified; ``/**`` is equivalent for a single-node process).

Unlike upstream, consecutive inline ``<param>`` tags share one generated file
instead of one file each; files and inline values keep document order, so the
override order seen by the node is the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import yaml

from .errors import LaunchError
from .model import ParamFile

_SCALAR_TYPES = {'str': str, 'int': int, 'float': float, 'bool': bool}
_LIST_TYPES = {'list_of_str': str, 'list_of_int': int, 'list_of_float': float,
               'list_of_bool': bool}
TYPE_NAMES = ('yaml', *_SCALAR_TYPES, *_LIST_TYPES)
_VALID_ITEM_TYPES = (bool, int, float, str)


def _yaml_load(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # not valid YAML: keep the string, as launch does for plain text


def _uniform(items: list, text: object) -> list:
    if not items:
        raise LaunchError(f'{text!r}: an empty list has no parameter type; give a type')
    item_types = {type(item) for item in items}
    if len(item_types) > 1 or not issubclass(item_types.pop(), _VALID_ITEM_TYPES):
        raise LaunchError(
            f'{text!r}: list items must all have the same type (bool, int, float or str)')
    return items


def _yaml_value(text: str) -> Any:
    if text == '':
        return ''
    loaded = _yaml_load(text)
    if isinstance(loaded, _VALID_ITEM_TYPES):
        return loaded
    if isinstance(loaded, list):
        return _uniform(loaded, text)
    if loaded is None:
        raise LaunchError(f"{text!r} is YAML null, which is not a parameter value")
    if isinstance(loaded, dict):
        raise LaunchError(f'{text!r} is a YAML mapping; use nested <param> tags instead')
    return text  # e.g. dates: keep what was written


def _yaml_item(text: str) -> Any:
    loaded = _yaml_load(text) if text else ''
    return loaded if isinstance(loaded, _VALID_ITEM_TYPES) else text


def _coerce(item: Any, kind: type) -> Any:
    if not isinstance(item, str):  # already typed by YAML (list_of_* from "[...]")
        if kind is float and isinstance(item, int) and not isinstance(item, bool):
            return float(item)
        if kind is str:
            return str(item)
        if isinstance(item, kind) and not (kind is int and isinstance(item, bool)):
            return item
        raise LaunchError(f'{item!r} is not of type {kind.__name__}')
    if kind is str:
        return item
    if kind is bool:
        if item.strip() in ('1', '0'):
            return item.strip() == '1'
        loaded = _yaml_load(item)
        if isinstance(loaded, bool):
            return loaded
        raise LaunchError(f'{item!r} is not a bool')
    try:
        return kind(item)
    except ValueError:
        raise LaunchError(f'{item!r} is not of type {kind.__name__}') from None


def typed_value(value: Union[str, List[str]], type_name: Optional[str] = None) -> Any:
    """Type an evaluated ``<param>`` value (a list when ``value-sep`` split it)."""
    if type_name in (None, 'yaml'):
        if isinstance(value, list):
            return _uniform([_yaml_item(item) for item in value], value)
        return _yaml_value(value)
    if type_name in _SCALAR_TYPES:
        if isinstance(value, list):
            raise LaunchError(f"type '{type_name}' cannot be used with value-sep")
        return _coerce(value, _SCALAR_TYPES[type_name])
    if type_name in _LIST_TYPES:
        items = value
        if isinstance(value, str):
            items = _yaml_load(value)
            if not isinstance(items, list):
                raise LaunchError(f"{value!r} is not a list (type '{type_name}')")
        return [_coerce(item, _LIST_TYPES[type_name]) for item in items]
    raise LaunchError(f"unknown param type '{type_name}' (expected one of "
                      f"{', '.join(TYPE_NAMES)})")


def write_params_file(path: Path, values: Dict[str, Any]) -> None:
    """Write flat ``{dotted.name: value}`` parameters as a ROS 2 params file for any node."""
    document = {'/**': {'ros__parameters': dict(values)}}
    with open(path, 'w', encoding='utf-8') as handle:
        yaml.safe_dump(document, handle, default_flow_style=False, sort_keys=False)


#: A node's parameter sources in order: inline values or an existing/generated file.
ParamItem = Union[Dict[str, Any], ParamFile]


def build_params_files(items: Sequence[ParamItem],
                       write: Callable[[Dict[str, Any]], str]) -> List[ParamFile]:
    """Turn ordered parameter sources into ``--params-file`` arguments.

    Runs of inline values are merged (a later value of the same name wins) and
    written with *write*, which returns the path of the file it wrote.
    """
    files: List[ParamFile] = []
    pending: Dict[str, Any] = {}

    def flush() -> None:
        nonlocal pending
        if pending:
            files.append(ParamFile(write(pending), generated=True, values=pending))
            pending = {}

    for item in items:
        if isinstance(item, ParamFile):
            flush()
            files.append(item)
        else:
            pending.update(item)
    flush()
    return files
