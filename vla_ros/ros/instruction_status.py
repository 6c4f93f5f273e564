"""The policy's instruction status: the outcome of the newest instruction, for whoever gave it.

policy_node publishes one ``std_msgs/String`` on ``~/instruction_status`` for every instruction it checks,
latched (reliable, transient local, depth 1), so a client that sends an instruction, or starts later, reads
whether it was taken: a JSON object with ``text``, ``status`` (accepted or refused), ``reason`` (a reason
code, "" when accepted), ``detail``, ``target`` (what the instruction check grounded it on, e.g. "red"),
``score`` and ``threshold`` (the learned score, None without one), ``policy_text`` (what the policy reads)
and ``stamp_s`` (node clock). ``vla_ros.policy.grounding`` decides; ``PolicySession.instruction_status``
holds it.
"""

from __future__ import annotations

import json

INSTRUCTION_STATUS = "~/instruction_status"  # the policy node's own name for it
# where robot.launch.xml's policy node (name="policy") publishes it
POLICY_INSTRUCTION_STATUS_TOPIC = "/policy/instruction_status"


def read_status(msg) -> dict | None:
    """The status a message carries (None if it is not a JSON object)."""
    try:
        value = json.loads(msg.data)
    except (ValueError, TypeError):
        return None
    return value if isinstance(value, dict) else None
