# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""ROS namespace composition and name checks for ``<push-ros-namespace>`` and ``<node>``.

Follows launch_ros ``prefix_namespace``/``make_namespace_absolute`` (relative
namespaces append, absolute ones replace, trailing ``/`` stripped) and the
character rules of rcl's ``validate_namespace``/``validate_node_name``.
"""

from __future__ import annotations

import re

NAME_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def prefix_namespace(base: str | None, ns: str | None) -> str | None:
    """Compose namespaces like launch_ros: relative *ns* appends to *base*, absolute replaces."""
    if base is None and ns is None:
        return None
    if ns is None:
        combined = base
    elif not base or ns.startswith("/"):
        combined = ns
    else:
        combined = ("" if base == "/" else base) + "/" + ns
    assert combined is not None
    return combined if combined == "/" else combined.rstrip("/")


def make_namespace_absolute(ns: str | None) -> str | None:
    """Prefix a relative namespace with '/' (None stays None)."""
    if ns is None or ns.startswith("/"):
        return ns
    return "/" + ns


def namespace_problem(ns: str) -> str | None:
    """Why *ns* is not a valid absolute namespace, or None when it is."""
    if ns == "/":
        return None
    if not ns.startswith("/"):
        return "must be absolute"
    for token in ns[1:].split("/"):
        if not NAME_TOKEN.fullmatch(token):
            return f"token '{token}' must be non-empty, use only letters, digits and '_', and not start with a digit"
    return None


def node_name_problem(name: str) -> str | None:
    """Why *name* is not a valid node name, or None when it is."""
    if NAME_TOKEN.fullmatch(name):
        return None
    return "use letters, digits and '_', not starting with a digit"
