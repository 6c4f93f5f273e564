"""Chunk targets: the joint positions an action chunk should reach, read off a recorded trajectory.

The one place these rules live; training (``training.data``), the dataset reader (``data.dataset.samples``)
and the tests all call it. A chunk is stamped with the time t of the newest observation the policy used
(as the node stamps it); its point k is meant to be reached at t + offsets_s[k], offsets (k + 1) / rate.

Rules:

* Source (``target_track``): the commands the robot was given (``/forward_position_controller/commands``,
  what a policy outputs) when the bag has at least two, else the measured joint states. Commands are
  better where they differ: a gripper closed on a cup measures the cup's width but was commanded shut.
* Value: the source linearly interpolated at the point's time (per joint). Times are float64 seconds from
  the episode's epoch, which keeps nanosecond resolution over days of recording.
* No target (NaN, no loss) before the source's first sample, after its last, and inside a gap: where the
  two recorded samples around the point are more than ``max_gap_s`` apart. A gap is a stretch where nobody
  commanded (the policy-driven stretches of ``vla-ros collect --policy`` rollouts) or a dropped recording;
  a line drawn across it would teach a motion nobody made.
* Past the end (``hold_s``, 0 by default): a recording that ends where its robot stands still (a demonstration
  that ends on a finished task) may be taken to hold its last command for ``hold_s`` seconds more, so the
  chunks of its last moments say "stay" instead of nothing. (On the cup task, whose policy carries a lifted
  cup off once its demonstrations have ended, it kept more cups up 3 s after the lift but none more after
  1 s: docs/training.md, "After the lift".)
* A chunk is used (``chunk_usable``) when its first point has a target: a chunk that starts where someone
  commands is a demonstration; its points past the end of the recording carry no loss.
"""

from __future__ import annotations

import numpy as np

# Longest interval between two recorded samples that a target may be interpolated across: sources at 10 Hz
# and faster (with jitter) are interpolated everywhere; the shortest policy stretch of a rollout (0.5 s)
# is a gap. Across 0.1 s, linear interpolation of a motion with 5 rad/s^2 of acceleration is off by at
# most a * dt^2 / 8 = 6 mrad.
MAX_TARGET_GAP_S = 0.1
SOURCES = ("auto", "commands", "joint_states")


def target_track(
    command_t_s: np.ndarray,
    command_positions: np.ndarray,
    joint_t_s: np.ndarray,
    joint_positions: np.ndarray,
    source: str = "auto",
) -> tuple[np.ndarray, np.ndarray, str]:
    """The recorded trajectory chunk targets come from: (times (M,), positions (M, J), "commands" or
    "joint_states"). ``source``: "auto" (commands when there are at least two of them), "commands" or
    "joint_states"."""
    if source not in SOURCES:
        raise ValueError(f"target source must be one of {SOURCES}, got {source!r}")
    if source == "commands" or (source == "auto" and len(command_t_s) >= 2):
        return np.asarray(command_t_s, np.float64), np.asarray(command_positions, np.float64), "commands"
    return np.asarray(joint_t_s, np.float64), np.asarray(joint_positions, np.float64), "joint_states"


def chunk_offsets_s(chunk_length: int, chunk_rate_hz: float) -> np.ndarray:
    """(H,) offsets of a chunk's points from its stamp: (k + 1) / rate."""
    return np.arange(1, chunk_length + 1, dtype=np.float64) / chunk_rate_hz


def chunk_targets(
    t_s: np.ndarray,
    positions: np.ndarray,
    anchor_t_s: float,
    offsets_s: np.ndarray,
    max_gap_s: float = MAX_TARGET_GAP_S,
    hold_s: float = 0.0,
) -> np.ndarray:
    """(H, J) float64 targets of a chunk stamped ``anchor_t_s``: ``positions`` (M, J) recorded at increasing
    ``t_s`` (M,), interpolated at anchor_t_s + offsets_s; NaN where there is no target (module docstring).
    ``hold_s``: points up to this long after the last sample take its value.

    Example: samples at t_s = [0.00, 0.01, 0.02, 0.60, 0.61], anchor 0.0, offsets [0.01, 0.3, 0.6, 0.7]:
    0.01 lies on a sample (a target); 0.3 lies between 0.02 and 0.60, 0.58 s apart (a gap: NaN); 0.6 lies
    on a sample (a target); 0.7 is after the last sample (NaN; with hold_s=0.1, the value at 0.61).
    """
    t_s = np.asarray(t_s, np.float64)
    positions = np.asarray(positions, np.float64)
    if t_s.ndim != 1 or positions.ndim != 2 or positions.shape[0] != t_s.shape[0]:
        raise ValueError(f"t_s (M,) and positions (M, J) must agree, got {t_s.shape} and {positions.shape}")
    if t_s.size < 2:
        raise ValueError(f"chunk targets need at least 2 recorded samples, got {t_s.size}")
    if not hold_s >= 0:  # NaN fails too
        raise ValueError(f"hold_s must be >= 0, got {hold_s}")
    query = anchor_t_s + np.asarray(offsets_s, np.float64)  # (H,)
    out = np.stack([np.interp(query, t_s, positions[:, j]) for j in range(positions.shape[1])], axis=1)  # (H, J)
    i = np.clip(np.searchsorted(t_s, query, side="right"), 1, t_s.size - 1)  # t_s[i-1] <= query < t_s[i] inside
    left, right = t_s[i - 1], t_s[i]
    bracketed = (right - left <= max_gap_s) | (query == left) | (query == right)
    held = (query > t_s[-1]) & (query <= t_s[-1] + hold_s)  # np.interp already gives the last value there
    out[(~bracketed & ~held) | (query < t_s[0]) | (query > t_s[-1] + hold_s)] = np.nan
    return out


def chunk_usable(targets: np.ndarray) -> bool:
    """A chunk is trained on (and a dataset sample made) when its first point has a target."""
    return bool(np.isfinite(targets[0]).all())
