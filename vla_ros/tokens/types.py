"""What the timed-token pipeline hands to the policy (no rclpy, no torch).

Every message becomes one ``Observation`` stamped with its own header time: a camera frame (which the
model's patch encoder turns into P patch tokens, all with the frame's stamp) or a joint state (one state
token). The instruction becomes pinned text tokens. Nothing is paired or resampled to make rates match.

Time base: ``stamp_ns`` is the exact ROS time (integer nanoseconds); ``t_s`` is float64 seconds since the
stream's epoch (the first stamp it accepted), so numbers stay small and precise whether ROS time starts at
0, at 1.7e9 s or after a day of uptime. Tokens are ordered by ``key = (stamp_ns, kind, source)``: a frame
and a joint state taken at the same instant are ordered by kind, never by which happened to arrive first,
so a live node and an offline replay of the same messages build the same sequence. Two messages with the
same key are duplicates. ``seq`` is the arrival number, for diagnostics only.
"""

from __future__ import annotations

import dataclasses
import enum

import numpy as np


class Kind(enum.IntEnum):
    """Token modality; the model adds a learned embedding per kind."""

    TEXT = 0
    IMAGE = 1
    STATE = 2
    ACTION = 3


@dataclasses.dataclass(frozen=True)
class Observation:
    """One accepted message, ready for the model.

    Args:
        kind: Kind.IMAGE or Kind.STATE.
        stamp_ns: header stamp, ROS time in integer nanoseconds.
        t_s: seconds since the stream's epoch (float64).
        seq: arrival number within the stream (strictly increasing); not part of the order.
        data: IMAGE: float32 (3, H, W), resized/cropped/normalised as the model's config says;
            STATE: float32 (S,), joint positions in the configured order, then velocities if configured.
        source: the topic (or a label) it came from; part of the order and of duplicate detection.
        camera: IMAGE: which of the model's cameras (index into its ``cameras``; 0 = the main view).
    """

    kind: Kind
    stamp_ns: int
    t_s: float
    seq: int
    data: np.ndarray
    source: str = ""
    camera: int = 0

    @property
    def key(self) -> tuple[int, int, str]:
        return (self.stamp_ns, int(self.kind), self.source)


@dataclasses.dataclass(frozen=True)
class Instruction:
    """The task in words, as frozen MiniLM token embeddings. Pinned: it never leaves the window.

    Args:
        text: the instruction as given.
        tokens: L word-piece strings ([CLS] ... [SEP]), for attention maps ("red" is one of them).
        embeddings: float32 (L, 384), MiniLM's last hidden states for those tokens.
        stamp_ns: when it was received (ROS time); the text tokens carry no time of their own.
    """

    text: str
    tokens: tuple[str, ...]
    embeddings: np.ndarray
    stamp_ns: int = 0
