# Copyright 2025 The vla_ros authors
# SPDX-License-Identifier: Apache-2.0
"""Minimal XML loader that keeps line numbers, for launch-file error messages.

``xml.etree`` drops line numbers, and upstream ``launch_xml`` reports errors
without them; pyexpat gives them for free, so every element remembers its
file and line. Text content and comments are ignored, as in launch_xml. XML attribute-value
normalization (a newline or tab in an attribute becomes a space) is expat's, as it is ElementTree's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.parsers import expat

from .errors import LaunchError


@dataclass
class Element:
    tag: str
    attrib: dict[str, str]
    file: Path
    line: int
    children: list[Element] = field(default_factory=list)
    #: Parsed attribute values (templates, typed literals), filled by :func:`schema.check_file`.
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def load(path: Path) -> Element:
    """Parse *path* and return its root element."""
    parser = expat.ParserCreate()
    roots: list[Element] = []
    stack: list[Element] = []

    def start(tag: str, attrib: dict[str, str]) -> None:
        element = Element(tag, dict(attrib), path, parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(element)
        stack.append(element)

    def end(_tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        with open(path, "rb") as handle:
            parser.ParseFile(handle)
    except expat.ExpatError as exc:
        raise LaunchError(f"{path}:{exc.lineno}: malformed XML: {expat.ErrorString(exc.code)}") from None
    except OSError as exc:
        raise LaunchError(f"{path}: cannot read launch file: {exc.strerror}") from None
    return roots[0]
