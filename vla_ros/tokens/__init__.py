"""Timed tokens: camera frames, joint states and the instruction as time-stamped model inputs (no rclpy).

``TokenStream`` is the one code path from message to token, used online by the policy node and offline by
the dataset reader and training.
"""

from vla_ros.tokens.config import StreamConfig, TokenizerConfig
from vla_ros.tokens.convert import TokenError
from vla_ros.tokens.stream import StreamStats, TokenStream, stamp_ns
from vla_ros.tokens.types import Instruction, Kind, Observation

__all__ = [
    "Instruction",
    "Kind",
    "Observation",
    "StreamConfig",
    "StreamStats",
    "TokenError",
    "TokenStream",
    "TokenizerConfig",
    "stamp_ns",
]
