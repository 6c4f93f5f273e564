"""Validation of position commands arriving at the simulated robot.

A command is applied whole or not at all: a bad value in any joint rejects the message, so a malformed
command can never move the arm. Each rejection carries a reason code (for counting on /diagnostics) and a
message naming the field at fault.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

# Position limits are checked with this slack so a target exactly on a limit, after a float round trip
# through a message, is not rejected.
LIMIT_TOLERANCE = 1e-9


class CommandError(ValueError):
    """A rejected command. ``code`` is a stable, countable reason; ``str(err)`` explains it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class JointLimits:
    """Position limits of the commanded joints, in their canonical order."""

    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray

    def index_of(self, names: Sequence[str]) -> np.ndarray:
        """Canonical index of each given name; raises CommandError for unknown, missing or repeated names."""
        names = list(names)
        unknown = [n for n in names if n not in self.names]
        if unknown:
            raise CommandError("unknown_joint", f"unknown joint(s) {unknown}; expected {list(self.names)}")
        if len(set(names)) != len(names):
            raise CommandError("duplicate_joint", f"joint names repeat: {names}")
        missing = [n for n in self.names if n not in names]
        if missing:
            raise CommandError("missing_joint", f"command lacks joint(s) {missing}")
        return np.array([self.names.index(n) for n in names])


def validate_positions(positions, limits: JointLimits) -> np.ndarray:
    """Check a canonical-order position vector: size, finiteness, limits. Returns a float64 copy."""
    q = np.asarray(positions, dtype=np.float64).reshape(-1)
    if q.size != len(limits.names):
        raise CommandError(
            "wrong_size", f"command has {q.size} values but the robot has {len(limits.names)} commanded joints"
        )
    bad = ~np.isfinite(q)
    if bad.any():
        names = [limits.names[i] for i in np.flatnonzero(bad)]
        raise CommandError("non_finite", f"non-finite target for joint(s) {names}")
    out = (q < limits.lower - LIMIT_TOLERANCE) | (q > limits.upper + LIMIT_TOLERANCE)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise CommandError(
            "outside_limits",
            f"target {q[i]:.6g} for {limits.names[i]} is outside [{limits.lower[i]:.6g}, {limits.upper[i]:.6g}]"
            + (f" (and {int(out.sum()) - 1} more joint(s))" if out.sum() > 1 else ""),
        )
    return q


def validate_position_command(names: Sequence[str] | None, positions, limits: JointLimits) -> np.ndarray:
    """Validate a command given by joint names (any order) or, with ``names=None``, in canonical order."""
    values = np.asarray(positions, dtype=np.float64).reshape(-1)
    if names is None or len(names) == 0:
        return validate_positions(values, limits)
    if len(names) != values.size:
        raise CommandError("wrong_size", f"{len(names)} joint names but {values.size} positions")
    order = limits.index_of(names)
    canonical = np.empty(len(limits.names))
    canonical[order] = values
    return validate_positions(canonical, limits)
