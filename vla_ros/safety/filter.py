"""The safety filter: the only path from the policy's action chunks to the controller (no rclpy import).

``SafetyFilter.filter(chunk, state, now_ns)`` returns ``(chunk_or_None, report)``. Per chunk, in order:

1. Reject malformed input: empty, ragged, non-finite values, unknown / missing / repeated joints,
   negative or non-increasing times (at the messages' nanosecond resolution), too long a horizon or too
   many points; an unstamped chunk (stamp 0), a stale one (stamp older than ``max_chunk_age_s``) or one
   stamped in the future; no, stale or incomplete joint state.
2. Drop points whose time has already passed (the controller would skip them; the motion it executes
   starts at the measured state now and goes to the first future point).
3. Position limits with a margin: the first point outside them is unsafe.
4. Velocity and acceleration limits by stretching time for the whole chunk (``timing``); where a prefix
   would need more than ``max_time_scale``, that point is unsafe. The segment from the measured state to
   the first point counts, so an unreachable first point rejects the chunk; the acceleration at the first
   point counts where the arm stands within the tracking tolerance of it, by what no start within that
   tolerance explains (``timing``).
5. Collisions at every waypoint and at interpolated points between them (``collision``), including the
   segment from the measured state, with clearances; the waypoint after the first unsafe sample is unsafe.
6. Optionally the stop after the last kept point (``check_stopping``) must be collision-free too.
7. Truncate before the first unsafe point (or reject the chunk, ``on_unsafe: reject``); stretch time for
   what is kept.

Safe chunks come back as the very same object (``report.verdict == "pass"``), and filtering an output
again with the same state and time changes nothing: the stretch factor is computed on the kept prefix
and rounded up so the nanosecond times the message carries still meet the limits.

This is not a certified safety function. It belongs above the robot's own safety controller (joint
limits, speed and separation monitoring, protective stops), never instead of it.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from vla_ros import reasons
from vla_ros.chunks import ActionChunk
from vla_ros.safety.collision import CollisionChecker
from vla_ros.safety.config import SafetyConfig
from vla_ros.safety.limits import JointLimitTable, resolve_limits
from vla_ros.safety.robot import RobotModel
from vla_ros.safety.timing import limit_ratios, prefix_scales

# Reason codes (stable strings, counted on /diagnostics; defined in vla_ros.reasons), by kind.
MALFORMED_REASONS = reasons.CHUNK_MALFORMED
INPUT_REASONS = reasons.CHUNK_INPUT
POINT_REASONS = reasons.UNSAFE_POINT
REASONS = reasons.FILTER_REASONS
VERDICTS = ("pass", "modified", "truncated", "rejected")

# Limits hold when required/allowed <= 1 + LIMIT_RTOL (float round-off; far below any physical meaning).
LIMIT_RTOL = 1e-9
NS = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class JointStateSample:
    """The measured joint state (from /joint_states): positions by name and the message stamp."""

    names: tuple[str, ...]
    positions: np.ndarray
    stamp_ns: int


@dataclasses.dataclass(frozen=True)
class Finding:
    """One check that acted: its reason code, the input point index it concerns, and why."""

    code: str
    index: int
    detail: str


@dataclasses.dataclass(frozen=True)
class FilterReport:
    """What the filter did to one chunk.

    Args:
        verdict: ``pass`` (unchanged, the same object comes back), ``modified`` (every future point kept,
            but time stretched and/or past points dropped), ``truncated`` (cut before an unsafe point),
            ``rejected`` (nothing goes to the controller).
        reason / detail: code and explanation of the first unsafe point or of the rejection ("" on pass).
        first_unsafe_index: input index of the first unsafe point (-1 when none; whole-chunk problems
            point at the offending point where there is one, else 0).
        time_scale: factor the kept points' times (from now) were stretched by (1 = none).
        findings: every check that acted, in input order.
        exact_queries / samples: collision work (exact pair distance queries, configurations on the path).
    """

    verdict: str
    reason: str = ""
    detail: str = ""
    first_unsafe_index: int = -1
    time_scale: float = 1.0
    points_in: int = 0
    points_out: int = 0
    findings: tuple[Finding, ...] = ()
    exact_queries: int = 0
    samples: int = 0

    @property
    def passed(self) -> bool:
        return self.verdict != "rejected"

    @classmethod
    def reject(cls, code: str, detail: str, index: int = 0, points_in: int = 0, **extra) -> FilterReport:
        assert code in REASONS, code
        return cls(
            "rejected", code, detail, index, points_in=points_in, findings=(Finding(code, index, detail),), **extra
        )


@dataclasses.dataclass
class _Work:
    """One chunk on its way through the filter's stages (``SafetyFilter.filter``)."""

    chunk: ActionChunk
    H: int  # points in
    q_meas: np.ndarray  # (n_act,) measured state, actuated joint order
    age_ns: int  # now - the chunk's stamp
    tau_ns: np.ndarray | None = None  # (H,) time of each point from now
    f: int = 0  # first point still ahead
    order: np.ndarray | None = None  # the chunk's columns as actuated joint indices
    Q: np.ndarray | None = None  # (H, n_act) full configurations
    vel: np.ndarray | None = None  # (H, n_act) given velocities, or None
    end: int = 0  # exclusive end of the prefix still considered safe
    clamped: bool = False  # a target within the clamp tolerance was clamped onto its limit
    scales: np.ndarray = dataclasses.field(default_factory=lambda: np.ones(0))  # stretch each prefix needs
    s: float = 1.0  # the kept prefix's time stretch ...
    new_tau_ns: np.ndarray | None = None  # ... and its stretched times from now
    queries: int = 0  # exact collision pair queries
    samples: int = 0  # configurations checked on the path
    findings: list[Finding] = dataclasses.field(default_factory=list)


class SafetyFilter:
    """Limits and whole-chunk collision checking for one robot model and one configuration.

    Construction resolves the limits (raising ``LimitError`` if the configuration would loosen the URDF)
    and builds the collision checker; ``filter`` then runs without allocating models. Not thread-safe.
    """

    def __init__(self, robot: RobotModel, config: SafetyConfig | None = None) -> None:
        self.robot = robot
        self.config = config or SafetyConfig()
        cfg = self.config
        self.limits: JointLimitTable = resolve_limits(robot, cfg)
        self.checker = CollisionChecker(
            robot,
            self_clearance_m=cfg.self_clearance_m,
            clearance_m=cfg.clearance_m,
            max_joint_step=self.limits.max_step,
            table_height_m=cfg.table_height_m if cfg.table_enabled else None,
            workspace=(cfg.workspace_min_m, cfg.workspace_max_m) if cfg.workspace_min_m is not None else None,
            obstacles=cfg.parsed_obstacles,
        )
        self.joint_names = robot.joint_names
        self.commanded_names = tuple(n for n, c in zip(robot.joint_names, self.limits.commanded) if c)
        self._act_index = {n: i for i, n in enumerate(robot.joint_names)}
        self._track_tol = np.where(robot.prismatic, cfg.tracking_tolerance_m, cfg.tracking_tolerance_rad)
        self._clamp_tol = np.where(robot.prismatic, cfg.position_clamp_m, cfg.position_clamp_rad)
        self._mimic_names = {robot.model.names[j] for j in range(1, robot.model.njoints)} - set(robot.joint_names)

    @property
    def collision_pairs(self) -> int:
        return self.checker.n_pairs

    # ---- input checks ------------------------------------------------------------------------------
    def _check_structure(self, chunk: ActionChunk) -> FilterReport | None:
        cfg = self.config
        pos = np.asarray(chunk.positions)
        times = np.asarray(chunk.time_from_start_s)
        names = tuple(chunk.joint_names)
        if pos.size == 0 or (pos.ndim >= 1 and pos.shape[0] == 0):
            return FilterReport.reject(reasons.EMPTY_CHUNK, "the chunk has no points")
        if pos.ndim != 2 or times.ndim != 1 or times.shape[0] != pos.shape[0] or len(names) != pos.shape[1]:
            return FilterReport.reject(
                reasons.SIZE_MISMATCH,
                f"positions {pos.shape}, times {times.shape} and {len(names)} joint names do not line up",
                points_in=pos.shape[0] if pos.ndim else 0,
            )
        H = pos.shape[0]
        vel = None if chunk.velocities is None else np.asarray(chunk.velocities)
        if vel is not None and vel.shape != pos.shape:
            return FilterReport.reject(
                reasons.SIZE_MISMATCH, f"velocities {vel.shape} do not match positions {pos.shape}", points_in=H
            )
        if H > cfg.max_points:
            return FilterReport.reject(
                reasons.TOO_MANY_POINTS, f"{H} points > max_chunk_points={cfg.max_points}", points_in=H
            )
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            return FilterReport.reject(reasons.DUPLICATE_JOINT, f"joint names repeat: {dup}", points_in=H)
        unknown = [n for n in names if n not in self.commanded_names]
        if unknown:
            why = []
            for n in unknown:
                if n in self._mimic_names:
                    why.append(f"{n} (a mimic joint: command its leader)")
                elif n in self._act_index:
                    why.append(f"{n} (not a commanded joint)")
                else:
                    why.append(n)
            return FilterReport.reject(
                reasons.UNKNOWN_JOINT, f"unknown joint(s) {why}; expected {list(self.commanded_names)}", points_in=H
            )
        missing = [n for n in self.commanded_names if n not in names]
        if missing:
            return FilterReport.reject(reasons.MISSING_JOINT, f"the chunk lacks joint(s) {missing}", points_in=H)
        try:
            pos_f = pos.astype(np.float64)
            times_f = times.astype(np.float64)
            vel_f = None if vel is None else vel.astype(np.float64)
        except (TypeError, ValueError):
            return FilterReport.reject(reasons.NON_FINITE, "values are not numbers", points_in=H)
        bad_rows = ~np.isfinite(pos_f).all(axis=1) | ~np.isfinite(times_f)
        if vel_f is not None:
            bad_rows |= ~np.isfinite(vel_f).all(axis=1)
        if bad_rows.any():
            k = int(np.argmax(bad_rows))
            cols = [names[j] for j in np.flatnonzero(~np.isfinite(pos_f[k]))]
            what = f"positions of {cols}" if cols else ("time" if not np.isfinite(times_f[k]) else "velocities")
            return FilterReport.reject(reasons.NON_FINITE, f"point {k}: non-finite {what}", k, points_in=H)
        if (times_f < 0.0).any():
            k = int(np.argmax(times_f < 0.0))
            return FilterReport.reject(
                reasons.NEGATIVE_TIME, f"point {k}: time_from_start {times_f[k]:.9g} s < 0", k, points_in=H
            )
        if (times_f > cfg.max_horizon_s).any():
            k = int(np.argmax(times_f > cfg.max_horizon_s))
            return FilterReport.reject(
                reasons.HORIZON_TOO_LONG,
                f"point {k}: time_from_start {times_f[k]:.6g} s > max_horizon_s={cfg.max_horizon_s}",
                k,
                points_in=H,
            )
        t_ns = np.floor(times_f * 1e9 + 0.5).astype(np.int64)  # the message's resolution
        if H > 1 and (np.diff(t_ns) <= 0).any():
            k = int(np.argmax(np.diff(t_ns) <= 0)) + 1
            return FilterReport.reject(
                reasons.NON_INCREASING_TIME,
                f"point {k}: time_from_start {times_f[k]:.9f} s is not after point {k - 1}'s {times_f[k - 1]:.9f} s",
                k,
                points_in=H,
            )
        return None

    def _measured(
        self, state: JointStateSample | None, now_ns: int, H: int
    ) -> tuple[np.ndarray | None, FilterReport | None]:
        cfg = self.config
        if state is None:
            return None, FilterReport.reject(reasons.NO_JOINT_STATE, "no joint state received yet", points_in=H)
        age_s = (now_ns - int(state.stamp_ns)) / NS
        if age_s > cfg.max_state_age_s:
            return None, FilterReport.reject(
                reasons.STALE_JOINT_STATE,
                f"joint state is {age_s:.3f} s old > max_state_age_s={cfg.max_state_age_s}",
                points_in=H,
            )
        if -age_s > cfg.max_future_stamp_s:
            return None, FilterReport.reject(
                reasons.STALE_JOINT_STATE,
                f"joint state is stamped {-age_s:.3f} s in the future (clock mismatch?)",
                points_in=H,
            )
        by_name = dict(zip(state.names, np.asarray(state.positions, dtype=np.float64).tolist()))
        missing = [n for n in self.joint_names if n not in by_name]
        if missing:
            return None, FilterReport.reject(
                reasons.JOINT_STATE_INCOMPLETE, f"joint state lacks {missing}", points_in=H
            )
        q = np.array([by_name[n] for n in self.joint_names])
        if not np.isfinite(q).all():
            bad = [n for n, v in zip(self.joint_names, q) if not math.isfinite(v)]
            return None, FilterReport.reject(
                reasons.JOINT_STATE_INCOMPLETE, f"joint state has non-finite {bad}", points_in=H
            )
        return q, None

    # ---- the filter --------------------------------------------------------------------------------
    def filter(
        self, chunk: ActionChunk, state: JointStateSample | None, now_ns: int
    ) -> tuple[ActionChunk | None, FilterReport]:
        """Filter one chunk against the measured ``state`` at time ``now_ns`` (ROS time, integer ns): the
        numbered stages of the module docstring, in order."""
        work, bad = self._admit(chunk, state, now_ns)  # 1
        if bad is not None:
            return None, bad
        bad = self._drop_past_points(work)  # 2
        if bad is not None:
            return None, bad
        self._check_positions(work)  # 3
        self._check_timing(work)  # 4
        self._check_collisions(work)  # 5, 6
        return self._cut(work)  # 7

    def _admit(
        self, chunk: ActionChunk, state: JointStateSample | None, now_ns: int
    ) -> tuple[_Work | None, FilterReport | None]:
        """Stage 1: malformed input, the chunk's stamp and the joint state; the chunk's work record if it passes."""
        cfg = self.config
        bad = self._check_structure(chunk)
        if bad is not None:
            return None, bad
        H = chunk.horizon
        if int(chunk.stamp_ns) == 0:
            return None, FilterReport.reject(
                reasons.UNSTAMPED, "header.stamp is 0: a chunk must carry its observation time", points_in=H
            )
        q_meas, bad = self._measured(state, now_ns, H)
        if bad is not None:
            return None, bad
        age_ns = int(now_ns) - int(chunk.stamp_ns)
        if age_ns > cfg.max_chunk_age_s * NS:
            return None, FilterReport.reject(
                reasons.STALE_CHUNK,
                f"chunk stamp is {age_ns / NS:.3f} s old > max_chunk_age_s={cfg.max_chunk_age_s}",
                points_in=H,
            )
        if -age_ns > cfg.max_future_stamp_s * NS:
            return None, FilterReport.reject(
                reasons.FUTURE_STAMP,
                f"chunk is stamped {-age_ns / NS:.3f} s in the future (clock mismatch?)",
                points_in=H,
            )
        return _Work(chunk, H, q_meas, age_ns), None

    def _drop_past_points(self, w: _Work) -> FilterReport | None:
        """Stage 2: times from now, the first point still ahead, and the chunk as (H, n_act) full actuated
        configurations (commanded columns from the chunk, the rest measured); a rejection when none is ahead."""
        chunk, H = w.chunk, w.H
        t_ns = np.floor(np.asarray(chunk.time_from_start_s, dtype=np.float64) * 1e9 + 0.5).astype(np.int64)
        w.tau_ns = t_ns - w.age_ns  # (H,) time of each point from now
        future = w.tau_ns > 0
        if not future.any():
            return FilterReport.reject(reasons.STALE_CHUNK, f"all {H} points lie in the past", H - 1, points_in=H)
        w.f = f = int(np.argmax(future))  # first point the controller will still execute
        if f > 0:
            w.findings.append(Finding(reasons.PAST_POINTS, 0, f"{f} point(s) already in the past dropped"))
        w.order = np.array([self._act_index[n] for n in chunk.joint_names], dtype=np.intp)
        w.Q = np.repeat(w.q_meas[None, :], H, axis=0)
        w.Q[:, w.order] = np.asarray(chunk.positions, dtype=np.float64)
        if chunk.velocities is not None:
            w.vel = np.zeros((H, len(self.joint_names)))
            w.vel[:, w.order] = np.asarray(chunk.velocities, dtype=np.float64)
        w.end = H
        return None

    def _check_positions(self, w: _Work) -> None:
        """Stage 3: position limits (commanded joints only; held joints stay where they are). Targets just past
        a limit (within the clamp tolerance) are clamped onto it; further past, the point is unsafe."""
        lim, Q, f, cols = self.limits, w.Q, w.f, w.order
        tol = self._clamp_tol[cols]
        low, high = lim.lower[cols], lim.upper[cols]
        sub = Q[f:, cols]
        clamp = ((sub < low) & (sub >= low - tol)) | ((sub > high) & (sub <= high + tol))
        w.clamped = bool(clamp.any())
        if w.clamped:
            k = f + int(np.argmax(clamp.any(axis=1)))
            Q[f:, cols] = np.where(clamp, np.clip(sub, low, high), sub)
            w.findings.append(
                Finding(
                    reasons.POSITION_CLAMPED,
                    k,
                    f"{int(clamp.sum())} target(s) within the clamp tolerance past a limit clamped onto it",
                )
            )
        outside = (Q[f:, cols] < lim.lower[cols]) | (Q[f:, cols] > lim.upper[cols])
        if outside.any():
            k = f + int(np.argmax(outside.any(axis=1)))
            j = cols[int(np.argmax(outside[k - f]))]
            w.findings.append(
                Finding(
                    reasons.POSITION_LIMIT,
                    k,
                    f"point {k}: {self.joint_names[j]} = {Q[k, j]:.6g} outside [{lim.lower[j]:.6g}, "
                    f"{lim.upper[j]:.6g}] "
                    "(limits minus margin)",
                )
            )
            w.end = k

    def _check_timing(self, w: _Work) -> None:
        """Stage 4: velocity / acceleration: how much each prefix must be slowed down.

        The first segment starts from the measured state moved toward the first point by the tracking
        tolerance: servo lag and a gripper squeezing an object keep measured != commanded, and that offset
        is not motion the chunk asks for (the controller blends from its own command, within its limits).
        Likewise the acceleration at the first point counts only what no start within the tolerance
        explains, and only on joints standing within the tolerance of the first point.
        """
        cfg, lim, f, end = self.config, self.limits, w.f, w.end
        if end <= f:
            return
        tau = w.tau_ns[f:end] * 1e-9
        r_v, r_a = limit_ratios(
            tau,
            w.Q[f:end],
            w.q_meas,
            lim.velocity,
            lim.acceleration,
            None if w.vel is None else w.vel[f:end],
            self._track_tol,
        )
        w.scales = prefix_scales(r_v, r_a)
        too_slow = w.scales > cfg.max_time_scale * (1.0 + LIMIT_RTOL)
        if not too_slow.any():
            return
        i = int(np.argmax(too_slow))
        k = f + i
        if i == 0:
            code = reasons.UNREACHABLE_FIRST_POINT
            detail = (
                f"point {k} is {r_v[0]:.3g}x too fast to reach from the measured state "
                f"(max_time_scale={cfg.max_time_scale})"
            )
        elif np.max(r_v[: i + 1]) > cfg.max_time_scale * (1.0 + LIMIT_RTOL):
            code, detail = (
                reasons.VELOCITY_LIMIT,
                (
                    f"point {k}: reaching it needs {np.max(r_v[: i + 1]):.3g}x "
                    f"the velocity limit (max_time_scale={cfg.max_time_scale})"
                ),
            )
        else:
            code, detail = (
                reasons.ACCELERATION_LIMIT,
                (
                    f"point {k}: keeping it needs {np.max(r_a[:i]):.3g}x the acceleration limit at point "
                    f"{k - 1} "
                    f"(max_time_scale={cfg.max_time_scale} allows {cfg.max_time_scale**2:.3g}x)"
                ),
            )
        w.findings.append(Finding(code, k, detail))
        w.end = k

    def _check_collisions(self, w: _Work) -> None:
        """Stages 5 and 6: collisions along the executed path: the measured state, the kept future points and
        (with check_stopping) the stop after the last one, at the time stretch the kept prefix needs."""
        cfg, f = self.config, w.f
        w.new_tau_ns = w.tau_ns
        if w.end <= f:
            return
        self._stretch_kept(w)
        q_stop = self._stop_configuration(w.Q, w.q_meas, f, w.end, w.new_tau_ns) if cfg.check_stopping else None
        path = np.vstack([w.q_meas[None, :], w.Q[f : w.end]] + ([q_stop[None, :]] if q_stop is not None else []))
        hit = self.checker.check_path(path)
        w.queries, w.samples = hit.exact_queries, hit.samples
        if hit.safe:
            return
        k = f + hit.first_unsafe - 1
        if k >= w.end:  # the stop after the last point, not the chunk itself
            w.findings.append(
                Finding(
                    reasons.STOPPING_DISTANCE, w.end - 1, f"point {w.end - 1}: stopping after it: {hit.describe(False)}"
                )
            )
            w.end -= 1
        else:
            w.findings.append(Finding(hit.kind, k, f"point {k}: {hit.describe()}"))
            w.end = k
        # A shorter prefix ends at another point, maybe at another speed: check its stop on its own.
        while w.end > f:
            self._stretch_kept(w)
            q_stop = self._stop_configuration(w.Q, w.q_meas, f, w.end, w.new_tau_ns) if cfg.check_stopping else None
            if q_stop is None:
                break
            stop = self.checker.check_path(np.vstack([w.Q[w.end - 1], q_stop]))
            w.queries += stop.exact_queries
            w.samples += stop.samples
            if stop.safe:
                break
            w.findings.append(
                Finding(
                    reasons.STOPPING_DISTANCE,
                    w.end - 1,
                    f"point {w.end - 1}: stopping after it: {stop.describe(False)}",
                )
            )
            w.end -= 1

    def _stretch_kept(self, w: _Work) -> None:
        """The time stretch (and the stretched times) the kept prefix needs."""
        w.s, w.new_tau_ns = self._stretch(w.scales[w.end - w.f - 1], w.tau_ns, w.f, w.end, w.q_meas, w.Q, w.vel)

    def _cut(self, w: _Work) -> tuple[ActionChunk | None, FilterReport]:
        """Stage 7: truncate before the first unsafe point (or reject, ``on_unsafe: reject``); stretch time for
        what is kept. The chunk itself comes back when nothing acted."""
        chunk, H, f, end, s, findings = w.chunk, w.H, w.f, w.end, w.s, w.findings
        unsafe = sorted((x for x in findings if x.code in POINT_REASONS), key=lambda x: x.index)
        first = unsafe[0] if unsafe else None
        findings.sort(key=lambda x: x.index)
        work = {"exact_queries": w.queries, "samples": w.samples}
        if end <= f or (first is not None and self.config.on_unsafe == "reject"):
            assert first is not None
            detail = first.detail if end > f else f"{first.detail}; no safe point left"
            return None, FilterReport("rejected", first.code, detail, first.index, 1.0, H, 0, tuple(findings), **work)
        if f == 0 and end == H and s == 1.0 and not w.clamped:
            return chunk, FilterReport("pass", points_in=H, points_out=H, **work)
        if s != 1.0:
            findings.append(
                Finding(
                    reasons.TIME_SCALED, f, f"times from now stretched {s:.4f}x to meet velocity/acceleration limits"
                )
            )
        new_t_ns = w.new_tau_ns[f:end] + w.age_ns
        out = chunk.replace(
            time_from_start_s=new_t_ns.astype(np.float64) * 1e-9,
            positions=w.Q[f:end][:, w.order].copy(),
            velocities=None if chunk.velocities is None else np.asarray(chunk.velocities, dtype=np.float64)[f:end] / s,
        )
        if first is None:
            return out, FilterReport("modified", "", "", -1, s, H, end - f, tuple(findings), **work)
        return out, FilterReport(
            "truncated", first.code, first.detail, first.index, s, H, end - f, tuple(findings), **work
        )

    def _stretch(
        self,
        s_req: float,
        tau_ns: np.ndarray,
        f: int,
        end: int,
        q_meas: np.ndarray,
        Q: np.ndarray,
        vel: np.ndarray | None,
    ) -> tuple[float, np.ndarray]:
        """Smallest factor >= s_req whose nanosecond times (what the message carries) still meet the limits.

        Times from now are rounded up, and the factor grows until the rounded times pass the same check the
        next filter would make, so filtering the output again finds nothing to stretch.
        """
        if s_req <= 1.0 + LIMIT_RTOL:
            return 1.0, tau_ns
        lim = self.limits
        base = tau_ns[f:end].astype(np.float64)
        s = float(s_req) * (1.0 + LIMIT_RTOL)
        new = tau_ns.copy()
        for _ in range(64):
            new[f:end] = np.ceil(base * s).astype(np.int64)
            r_v, r_a = limit_ratios(
                new[f:end] * 1e-9,
                Q[f:end],
                q_meas,
                lim.velocity,
                lim.acceleration,
                None if vel is None else vel[f:end] / s,
                self._track_tol,
            )
            need = float(prefix_scales(r_v, r_a)[-1])
            if need <= 1.0 + LIMIT_RTOL:
                return s, new
            # Grow by what is missing, and by at least one nanosecond on the shortest time.
            s = max(s * need * (1.0 + LIMIT_RTOL), s * (1.0 + 1.0 / float(base.min())))
        raise AssertionError(f"time scaling did not settle (factor {s})")

    def _stop_configuration(
        self, Q: np.ndarray, q_meas: np.ndarray, f: int, end: int, tau_ns: np.ndarray
    ) -> np.ndarray | None:
        """Where the arm comes to rest after point end-1 (None if it arrives there at rest).

        It decelerates along the last segment's direction at the acceleration limits, all joints together:
        ``t_stop = max_j |v_j| / a_j`` and the distance ``v t_stop / 2``; joints stop at their URDF limits.
        """
        last = Q[end - 1]
        # From the measured state, the offset within the tracking tolerance is not motion (as in timing).
        prev = Q[end - 2] if end - 1 > f else q_meas + np.clip(Q[f] - q_meas, -self._track_tol, self._track_tol)
        h = (tau_ns[end - 1] - (tau_ns[end - 2] if end - 1 > f else 0)) * 1e-9
        v = (last - prev) / h
        t_stop = float(np.max(np.abs(v) / self.limits.acceleration))
        if t_stop <= 0.0:
            return None
        return np.clip(last + v * (0.5 * t_stop), self.limits.hard_lower, self.limits.hard_upper)
