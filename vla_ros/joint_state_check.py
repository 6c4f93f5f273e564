"""One check of every joint-state message, for every node that reads them (no rclpy import).

The policy, the safety filter and the controller each read ``sensor_msgs/JointState`` from drivers they
cannot trust (a misconfigured driver, a second publisher, a bag played on the live graph). They refuse the
same things with the same reason codes, in this order:

- ``joint_state_unstamped``: ``header.stamp`` is 0 (a driver that does not stamp cannot be told from one
  that stalled);
- ``joint_state_size``: not one position (or velocity, where asked for) per name;
- ``joint_state_duplicate_name``: a name twice (which copy is the joint?);
- ``joint_state_missing_joint``: the message names none of the node's joints, or some joint has not been
  named by any message yet;
- ``joint_state_non_finite``: NaN or inf in a needed value;
- ``joint_state_jump``: a needed position further from its last accepted value than the joint's velocity
  limit allows over the time between their stamps (``JUMP_SLACK`` times the limit, plus ``JUMP_TOL``).
  A state that jumps is refused, so one publisher replaying an old pose among a driver's fresh states
  never moves anything. When the arm really was moved (a reset nobody announced, a hand), the states that
  follow agree with each other: once refused states in a row, each within the limits of the one before,
  span ``RESYNC_S`` of stamps, the newest is accepted (``resyncs``) and the nodes deal with it as a moved
  arm. A driver still publishing the accepted track breaks every such run, so a second source never takes
  over while the first one lives. ``forget()`` drops the jump references (an announced reset places the
  arm elsewhere).

Disjoint joint sets from several drivers (an arm driver and a gripper driver on one topic) are merged by
name: a message updates the joints it names, and the state is complete once every joint has been named.
Each joint keeps the stamp of its own last value; ``stamp_ns`` is the oldest of them (the state is as old
as its oldest part). Two publishers that name the same joint are a conflict, not a merge: ``StateSources``
finds them where the middleware says who sent each message.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vla_ros import reasons

REASONS = reasons.JOINT_STATE_CHECKS  # what check() refuses, in the order it checks (codes in vla_ros.reasons)
# A position may move this many times its velocity limit between two stamps (a servo's overshoot, contact,
# stamps taken a little before or after the sample) ...
JUMP_SLACK = 1.5
# ... plus this much (rad or m: sensor noise, a stamp repeated for a new sample).
JUMP_TOL = 0.01
# Refused states in a row that agree with each other (each within the limits of the one before) over this
# long (stamps, seconds) make the newest of them the accepted state: the arm was moved.
RESYNC_S = 0.1
_RESYNC_NS = round(RESYNC_S * 1e9)


class JointStateRefused(ValueError):
    """A joint state refused, with its reason code (one of ``REASONS``) and a detail for the log."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


class JointStateCheck:
    """``check(names, positions, stamp_ns) -> positions of ``joints`` in that order`` or ``JointStateRefused``.

    ``velocity_limits`` (one per joint of ``joints``, > 0) turns the jump check on; None leaves it off
    (``set_velocity_limits`` turns it on later, once a node knows its robot). The name -> index map is
    cached per distinct name list (a driver sends one or two).
    """

    def __init__(self, joints: Sequence[str], velocity_limits: Sequence[float] | None = None) -> None:
        self.joints = tuple(joints)
        n = len(self.joints)
        self._vmax: np.ndarray | None = None
        if velocity_limits is not None:
            self.set_velocity_limits(velocity_limits)
        self._index: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray] | JointStateRefused] = {}
        self._q = np.zeros(n)  # the merged state: each joint's last accepted value ...
        self._v = np.zeros(n)  # ... its velocity (where asked for) ...
        self._t = np.zeros(n, dtype=np.int64)  # ... and the stamp of the message that brought it
        self._seen = np.zeros(n, dtype=bool)  # named by an accepted message
        self._ref = np.zeros(n, dtype=bool)  # its last value is a jump reference (not after forget())
        self._cand_q = np.zeros(n)  # the last refused jump of each joint ...
        self._cand_t = np.zeros(n, dtype=np.int64)
        self._cand = np.zeros(n, dtype=bool)
        self._run = np.zeros(n, dtype=np.int64)  # ... and the stamp of the first refused state in the run that agrees
        self.resyncs = 0

    def set_velocity_limits(self, velocity_limits: Sequence[float]) -> None:
        vmax = np.asarray(velocity_limits, dtype=np.float64)
        if vmax.shape != (len(self.joints),) or not np.all(vmax > 0):
            raise ValueError(f"velocity_limits must be one positive value per joint of {self.joints}")
        self._vmax = vmax

    def forget(self) -> None:
        """The arm was placed elsewhere on purpose (an announced reset): no jump from the old state."""
        self._ref[:] = False
        self._cand[:] = False

    @property
    def complete(self) -> bool:
        return bool(self._seen.all())

    @property
    def stamp_ns(self) -> int:
        """The stamp of the merged state: its oldest part's (0 before every joint was named)."""
        return int(self._t.min()) if self.complete else 0

    @property
    def velocities(self) -> np.ndarray:
        """The merged velocities (of the checks that asked for them), ``joints`` order."""
        return self._v.copy()

    def concerns(self, names: Sequence[str]) -> bool:
        """False for a message that names none of ``joints`` once the state is complete: another driver's
        joints on the same topic (a camera mount, a base), none of this node's business, not refused.
        Before that, or with a name of ours, the message is ``check``ed."""
        if not self._seen.all():
            return True
        try:
            self._indices(tuple(names))
        except JointStateRefused as err:
            return err.code != reasons.JOINT_STATE_MISSING_JOINT
        return True

    def _indices(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(the message's joints as indices into ``joints``, their indices in the message)."""
        idx = self._index.get(names)
        if idx is None:
            where = {n: i for i, n in enumerate(names)}
            if len(where) != len(names):
                repeated = sorted({n for n in names if names.count(n) > 1})
                idx = JointStateRefused(reasons.JOINT_STATE_DUPLICATE_NAME, f"joint names repeat: {repeated}")
            else:
                pairs = [(k, where[j]) for k, j in enumerate(self.joints) if j in where]
                if not pairs:
                    idx = JointStateRefused(
                        reasons.JOINT_STATE_MISSING_JOINT,
                        f"names {list(names)[:8]} lack every joint of {list(self.joints)}",
                    )
                else:
                    idx = (
                        np.array([k for k, _ in pairs], dtype=np.intp),
                        np.array([m for _, m in pairs], dtype=np.intp),
                    )
            if len(self._index) < 16:  # bounded, whatever a misconfigured publisher sends
                self._index[names] = idx
        if isinstance(idx, JointStateRefused):
            raise idx
        return idx

    def _values(
        self, j: np.ndarray, m: np.ndarray, names: tuple[str, ...], values: Sequence[float], what: str
    ) -> np.ndarray:
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (len(names),):
            raise JointStateRefused(reasons.JOINT_STATE_SIZE, f"{arr.size} {what}s for {len(names)} names")
        out = arr[m]
        if not np.all(np.isfinite(out)):
            bad = [self.joints[k] for k, v in zip(j, out) if not np.isfinite(v)]
            raise JointStateRefused(reasons.JOINT_STATE_NON_FINITE, f"non-finite {what} of {bad}")
        return out

    def check(
        self, names: Sequence[str], positions: Sequence[float], stamp_ns: int, velocities: Sequence[float] | None = None
    ) -> np.ndarray:
        """Every check, the jump included (with limits); the message's joints merged into the state. Returns
        the positions of ``joints`` (a copy); ``velocities`` given: also checked and merged (``velocities``)."""
        stamp = int(stamp_ns)
        if stamp == 0:
            raise JointStateRefused(reasons.JOINT_STATE_UNSTAMPED, "header.stamp is 0")
        names = tuple(names)
        j, m = self._indices(names)
        q = self._values(j, m, names, positions, "position")
        v = None if velocities is None else self._values(j, m, names, velocities, "velocity")
        if self._vmax is not None:
            self._check_jump(j, q, stamp)
        self._q[j], self._t[j] = q, stamp
        if v is not None:
            self._v[j] = v
        self._seen[j] = self._ref[j] = True
        self._cand[j] = False  # a run of refused states is broken by an accepted one
        if not self._seen.all():
            missing = [self.joints[k] for k in np.flatnonzero(~self._seen)]
            raise JointStateRefused(reasons.JOINT_STATE_MISSING_JOINT, f"no message has named {missing} yet")
        return self._q.copy()

    def _check_jump(self, j: np.ndarray, q: np.ndarray, stamp: int) -> None:
        vmax = self._vmax[j]

        def allowed(t_before: np.ndarray) -> np.ndarray:
            return vmax * np.maximum(stamp - t_before, 0) * (1e-9 * JUMP_SLACK) + JUMP_TOL

        off = np.where(self._ref[j], np.abs(q - self._q[j]) - allowed(self._t[j]), -np.inf)
        if not np.any(off > 0.0):
            return
        agrees = bool(np.all(self._cand[j]) and np.all(np.abs(q - self._cand_q[j]) <= allowed(self._cand_t[j])))
        if not agrees:
            self._run[j] = stamp
        self._cand_q[j], self._cand_t[j], self._cand[j] = q, stamp, True
        if stamp - int(self._run[j].max()) >= _RESYNC_NS:
            self.resyncs += 1
            return
        k = int(np.argmax(off))
        dt = max(stamp - int(self._t[j[k]]), 0) * 1e-9
        raise JointStateRefused(
            reasons.JOINT_STATE_JUMP,
            f"{self.joints[j[k]]} moved {abs(q[k] - self._q[j[k]]):.3f} in {dt:.3f} s "
            f"(its velocity limit allows {allowed(self._t[j])[k]:.3f})",
        )


class StateSources:
    """Which publisher names which joints, for the nodes whose middleware says who sent each message (rclpy
    hands the publisher's GID to a subscription callback from Kilted on; on Humble and Jazzy a node falls
    back on the ROS graph and the jump check).

    ``observe(source, names, now_ns)`` records a message and returns the sources that named one of its joints
    within the last ``window_s`` (this one first): more than one is a conflict. A source silent for
    ``window_s`` no longer counts, so a conflict ends that long after the second publisher stops.
    """

    def __init__(self, joints: Sequence[str], window_s: float = 0.5, max_sources: int = 32) -> None:
        self.joints = frozenset(joints)
        self._window_ns = round(window_s * 1e9)
        self._max = max_sources
        self._seen: dict[str, tuple[frozenset[str], int]] = {}  # source -> (its joints, last seen)
        self._names: dict[tuple[str, ...], frozenset[str]] = {}

    def _joints_of(self, names: Sequence[str]) -> frozenset[str]:
        key = tuple(names)
        found = self._names.get(key)
        if found is None:
            found = self.joints.intersection(key)
            if len(self._names) < 16:
                self._names[key] = found
        return found

    def observe(self, source: str, names: Sequence[str], now_ns: int) -> tuple[str, ...]:
        mine = self._joints_of(names)
        self._prune(now_ns)
        if source in self._seen or len(self._seen) < self._max:
            self._seen[source] = (mine, now_ns)
        return (source,) + tuple(s for s, (theirs, _) in self._seen.items() if s != source and theirs & mine)

    def conflicts(self, now_ns: int) -> list[tuple[str, ...]]:
        """Groups of sources (two or more) that named a common joint within the window, now."""
        self._prune(now_ns)
        out, done = [], set()
        for s, (mine, _) in self._seen.items():
            if s in done:
                continue
            group = (s,) + tuple(o for o, (theirs, _) in self._seen.items() if o != s and theirs & mine)
            if len(group) > 1:
                out.append(group)
                done.update(group)
        return out

    def _prune(self, now_ns: int) -> None:
        old = [s for s, (_, t) in self._seen.items() if now_ns - t > self._window_ns]
        for s in old:
            del self._seen[s]
