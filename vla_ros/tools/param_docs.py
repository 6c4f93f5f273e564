"""Markdown parameter tables for every node, generated from the nodes' parameter tables.

The README embeds this output between ``<!-- params:begin -->`` and ``<!-- params:end -->``; a test checks
that the README matches, so the documentation cannot drift from the code.
"""

from __future__ import annotations

from vla_ros.ros.params import markdown_table


def node_tables() -> dict[str, list]:
    from vla_ros.nodes import controller_node, policy_node, safety_filter_node, scripted_motion_node, sim_node

    return {
        "policy_node": policy_node.PARAMS,
        "safety_filter_node": safety_filter_node.PARAMS,
        "controller_node": controller_node.PARAMS,
        "sim_node": sim_node.PARAMS,
        "scripted_motion_node": scripted_motion_node.PARAMS,
    }


def all_tables() -> str:
    parts = []
    for node, specs in node_tables().items():
        parts.append(f"#### `{node}`\n\n{markdown_table(specs)}\n")
    return "\n".join(parts).rstrip() + "\n"
