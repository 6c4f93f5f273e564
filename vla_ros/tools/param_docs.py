"""``docs/parameters.md``: every node's parameter table as Markdown, generated from ``vla_ros.params``.

A test checks that the file matches the tables, so the reference cannot drift from the code;
``vla-ros params --write`` regenerates it.
"""

from __future__ import annotations

from pathlib import Path

from vla_ros.params import node_tables
from vla_ros.params.spec import markdown_table

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "parameters.md"

HEADER = """# Node parameters

Generated from the nodes' parameter tables (`vla_ros/params/`) by `vla-ros params --write`; a test keeps
this file in sync with the code. Every parameter is declared with a descriptor (type, range, read-only),
validated at start (a bad value stops the node with the reason) and on `ros2 param set` (refused with the
reason). Read-only parameters need a restart.
"""


def all_tables() -> str:
    parts = [f"## `{node}`\n\n{markdown_table(specs)}\n" for node, specs in node_tables().items()]
    return "\n".join(parts).rstrip() + "\n"


def document() -> str:
    """The whole of docs/parameters.md."""
    return HEADER + "\n" + all_tables()
