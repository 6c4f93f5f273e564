"""One check of every joint-state message, for every node that reads them (no rclpy import).

The policy, the safety filter and the controller each read ``sensor_msgs/JointState`` from a driver they
cannot trust (a misconfigured driver, a second publisher, a bag played on the live graph). They refuse the
same things with the same reason codes, in this order:

- ``joint_state_unstamped``: ``header.stamp`` is 0 (a driver that does not stamp cannot be told from one
  that stalled);
- ``joint_state_size``: not one position per name;
- ``joint_state_duplicate_name``: a name twice (which copy is the joint?);
- ``joint_state_missing_joint``: a joint the node needs is not in the message;
- ``joint_state_non_finite``: NaN or inf in a needed position;
- ``joint_state_jump``: a needed position further from the last accepted state than the joint's velocity
  limit allows over the time between their stamps (``JUMP_SLACK`` times the limit, plus ``JUMP_TOL``).
  A state that jumps is refused, so one publisher replaying an old pose among a driver's fresh states
  never moves anything. When the arm really was moved (a reset nobody announced, a hand), the states that
  follow agree with each other: once refused states in a row, each within the limits of the one before,
  span ``RESYNC_S`` of stamps, the newest is accepted (``resyncs``) and the nodes deal with it as a moved
  arm. A driver still publishing the accepted track breaks every such run, so a second source never takes
  over while the first one lives (two sources are named on the graph by the nodes). ``forget()`` clears
  the last accepted state (an announced reset places the arm elsewhere).

Disjoint joint sets from several drivers (an arm and a gripper) are a node's merging to do; this check
reads one message.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

REASONS = ("joint_state_unstamped", "joint_state_size", "joint_state_duplicate_name", "joint_state_missing_joint",
           "joint_state_non_finite", "joint_state_jump")
# A position may move this many times its velocity limit between two stamps (a servo's overshoot, contact,
# stamps taken a little before or after the sample) ...
JUMP_SLACK = 1.5
# ... plus this much (rad or m: sensor noise, a stamp repeated for a new sample).
JUMP_TOL = 0.01
# Refused states in a row that agree with each other (each within the limits of the one before) over this
# long (stamps, seconds) make the newest of them the accepted state: the arm was moved.
RESYNC_S = 0.1


class JointStateRefused(ValueError):
    """A joint state refused, with its reason code (one of ``REASONS``) and a detail for the log."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class JointStateCheck:
    """``check(names, positions, stamp_ns) -> positions of ``joints`` in that order`` or ``JointStateRefused``.

    ``velocity_limits`` (one per joint of ``joints``, > 0) turns the jump check on; None leaves it off.
    The name -> index map is cached per distinct name list (a driver sends one or two).
    """

    def __init__(self, joints: Sequence[str], velocity_limits: Sequence[float] | None = None) -> None:
        self.joints = tuple(joints)
        self._vmax = None if velocity_limits is None else np.asarray(velocity_limits, dtype=np.float64)
        if self._vmax is not None and (self._vmax.shape != (len(self.joints),) or not np.all(self._vmax > 0)):
            raise ValueError(f"velocity_limits must be one positive value per joint of {self.joints}")
        self._index: dict[tuple[str, ...], np.ndarray | JointStateRefused] = {}
        self._last: tuple[int, np.ndarray] | None = None  # the last accepted (stamp, positions)
        self._candidate: tuple[int, np.ndarray] | None = None  # the last refused jump ...
        self._run_start_ns = 0  # ... and the stamp of the first of the refused states in a row that agree
        self.resyncs = 0

    def forget(self) -> None:
        """The arm was placed elsewhere on purpose (an announced reset): no jump from the old state."""
        self._last = self._candidate = None

    def _indices(self, names: tuple[str, ...]) -> np.ndarray:
        idx = self._index.get(names)
        if idx is None:
            where = {n: i for i, n in enumerate(names)}
            missing = [j for j in self.joints if j not in where]
            if len(where) != len(names):
                repeated = sorted({n for n in names if names.count(n) > 1})
                idx = JointStateRefused("joint_state_duplicate_name", f"joint names repeat: {repeated}")
            elif missing:
                idx = JointStateRefused("joint_state_missing_joint", f"names {list(names)} lack {missing}")
            else:
                idx = np.array([where[j] for j in self.joints], dtype=np.intp)
            if len(self._index) < 16:  # bounded, whatever a misconfigured publisher sends
                self._index[names] = idx
        if isinstance(idx, JointStateRefused):
            raise idx
        return idx

    def _allowed(self, stamp_ns: int, before: tuple[int, np.ndarray]) -> np.ndarray:
        dt = max(stamp_ns - before[0], 0) * 1e-9
        return self._vmax * dt * JUMP_SLACK + JUMP_TOL

    def check(self, names: Sequence[str], positions: Sequence[float], stamp_ns: int) -> np.ndarray:
        """Every check, the jump included (with limits): the positions of ``joints``."""
        if int(stamp_ns) == 0:
            raise JointStateRefused("joint_state_unstamped", "header.stamp is 0")
        q = self.values(names, positions, "position")
        if self._vmax is not None:
            self._check_jump(q, int(stamp_ns))
        return q

    def values(self, names: Sequence[str], values: Sequence[float], what: str = "position") -> np.ndarray:
        """One value per name (``what``: positions, or velocities), finite, for every joint of ``joints``:
        those values in ``joints`` order. The checks of the message's content, without stamps or jumps."""
        names = tuple(names)
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (len(names),):
            raise JointStateRefused("joint_state_size", f"{arr.size} {what}s for {len(names)} names")
        out = arr[self._indices(names)]
        if not np.all(np.isfinite(out)):
            bad = [j for j, v in zip(self.joints, out) if not np.isfinite(v)]
            raise JointStateRefused("joint_state_non_finite", f"non-finite {what} of {bad}")
        return out

    def _check_jump(self, q: np.ndarray, stamp_ns: int) -> None:
        if self._last is None or np.all(np.abs(q - self._last[1]) <= self._allowed(stamp_ns, self._last)):
            self._last, self._candidate = (stamp_ns, q.copy()), None
            return
        agrees = self._candidate is not None and np.all(np.abs(q - self._candidate[1]) <= self._allowed(stamp_ns, self._candidate))
        if not agrees:
            self._run_start_ns = stamp_ns
        self._candidate = (stamp_ns, q.copy())
        if stamp_ns - self._run_start_ns >= RESYNC_S * 1e9:
            self.resyncs += 1
            self._last, self._candidate = (stamp_ns, q.copy()), None
            return
        off = np.abs(q - self._last[1]) - self._allowed(stamp_ns, self._last)
        j = int(np.argmax(off))
        dt = max(stamp_ns - self._last[0], 0) * 1e-9
        raise JointStateRefused("joint_state_jump", f"{self.joints[j]} moved {abs(q[j] - self._last[1][j]):.3f} in {dt:.3f} s "
                                                    f"(its velocity limit allows {self._allowed(stamp_ns, self._last)[j]:.3f})")
