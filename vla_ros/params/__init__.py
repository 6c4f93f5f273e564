"""Every node's parameter table, in modules free of rclpy.

One table per node (``PARAMS``: name, type, default, range, read-only, description) plus the builder of
the core configuration it sets (``config_from_params``). Nodes declare from these tables; the evaluation,
the benchmarks and ``vla-ros params`` read them without importing a node. Each spec carries the configuration
field it sets and its run-time tightening rule, so a parameter is declared once (``spec.build_config``,
``tightening.rules_from_specs``); ``limits`` holds the joint limits' parameters the filter and the controller
share (``config/limits.yaml``).
"""

from __future__ import annotations


def node_tables() -> dict[str, list]:
    """Each node's table, by executable name, in the order the parameter reference lists them."""
    from vla_ros.params import controller, policy, safety_filter, scripted_motion, sim

    return {
        "policy_node": policy.PARAMS,
        "safety_filter_node": safety_filter.PARAMS,
        "controller_node": controller.PARAMS,
        "sim_node": sim.PARAMS,
        "scripted_motion_node": scripted_motion.PARAMS,
    }
