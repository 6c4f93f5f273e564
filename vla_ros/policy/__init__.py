"""The policy session (rclpy-free): what the policy node, the closed-loop evaluation and the attention tool
share, from a sensor message to a stamped, checked action chunk."""

from vla_ros.policy.session import PolicySession, SessionConfig, TickResult, stream_config

__all__ = ["PolicySession", "SessionConfig", "TickResult", "stream_config"]
