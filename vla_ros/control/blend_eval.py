"""Compare the two ways of blending a new chunk into the running one, on a synthetic test set (no rclpy).

The test set imitates a policy: a smooth feasible reference motion (sums of 1 - cos terms, so it starts at
rest, at under 40 % of each joint's velocity and acceleration limits); every 0.1-0.3 s a new chunk of
50 points at 50 Hz is stamped at the observation time and arrives 20-60 ms later; each chunk is the
reference plus its own error (an offset of ~1 cm-scale at the joints and a drift that grows over the
horizon), so consecutive chunks disagree the way successive policy predictions do.

For each blend mode the executor runs on synthetic time and we measure:

- ``dv_ratio_max``: largest velocity change in one period over what the acceleration limit allows
  (<= 1 always: the output limiter guarantees it);
- ``limited_pct``: share of cycles in which the blend asked for more than the limits and the limiter had
  to step in (0 means the blend itself stayed within the limits);
- ``dev_mean_rad`` / ``dev_p99_rad``: deviation of the command from the newest chunk, the plan the
  policy wants executed now (lower is more responsive);
- ``jerk_rms``: RMS of the third difference of the command (rad/s^3), smoothness.
"""

from __future__ import annotations

import numpy as np

from vla_ros.chunks import ActionChunk
from vla_ros.control.config import ControllerConfig
from vla_ros.control.executor import ChunkExecutor

CHUNK_POINTS = 50
CHUNK_DT_S = 0.02


def _reference(rng: np.random.Generator, cfg: ControllerConfig, q0: np.ndarray):
    """r(t) = q0 + sum_i A_i (1 - cos(w_i t + 0)) per joint; returns a function of a (K,) time array."""
    vmax = np.array(cfg.velocity_limits)
    amax = np.array(cfg.acceleration_limits)
    w = rng.uniform(1.0, 4.0, size=(3, len(q0)))  # rad/s
    amp = np.minimum(0.4 * vmax / w, 0.4 * amax / w**2) / 3.0 * rng.uniform(0.3, 1.0, size=w.shape)
    amp *= rng.choice([-1.0, 1.0], size=w.shape)

    def r(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64)[..., None, None]  # (K, 1, 1)
        return q0 + (amp * (1.0 - np.cos(w * t))).sum(axis=-2)  # (K, J)

    return r


def run_case(cfg: ControllerConfig, seed: int, duration_s: float = 6.0, t0_ns: int = 0) -> dict[str, float]:
    """One seeded episode with ``cfg``'s blend mode; returns the metrics of the module docstring."""
    rng = np.random.default_rng(seed)
    lower, upper = np.array(cfg.position_lower), np.array(cfg.position_upper)
    q0 = lower + (upper - lower) * rng.uniform(0.35, 0.65, size=len(lower))
    ref = _reference(rng, cfg, q0)
    scale = np.array(cfg.acceleration_limits) / 10.0  # errors in proportion to each joint's range of motion
    ex = ChunkExecutor(cfg)
    period_ns = round(1e9 / cfg.rate_hz)
    n_cycles = int(duration_s * cfg.rate_hz)
    next_obs_s, arrivals = 0.05, []
    while next_obs_s < duration_s:
        arrivals.append((next_obs_s, next_obs_s + rng.uniform(0.02, 0.06)))
        next_obs_s += rng.uniform(0.1, 0.3)
    q_out, dev = [], []
    ai = 0
    for k in range(n_cycles):
        now_s = k / cfg.rate_hz
        now_ns = t0_ns + k * period_ns
        ex.set_measured(ex.q_cmd if k else q0, now_ns, now_ns)
        while ai < len(arrivals) and arrivals[ai][1] <= now_s:
            obs_s = arrivals[ai][0]
            tfs = CHUNK_DT_S * np.arange(CHUNK_POINTS)
            offset = rng.normal(0.0, 0.01, size=len(q0)) * scale
            drift = rng.normal(0.0, 0.02, size=len(q0)) * scale
            points = np.clip(ref(obs_s + tfs) + offset + drift * tfs[:, None], lower, upper)
            ex.submit_chunk(ActionChunk(cfg.joint_names, t0_ns + round(obs_s * 1e9), tfs, points))
            ai += 1
        out = ex.update(now_ns, 1.0 / cfg.rate_hz)
        if out is None:
            continue
        q_out.append(out.copy())
        if ex.counters["chunks_accepted"]:
            pq, pv = np.zeros(len(q0)), np.zeros(len(q0))
            ex.chunk_spline.sample((now_ns - ex._epoch_ns) * 1e-9, pq, pv)
            dev.append(np.abs(out - pq).max())
    q = np.array(q_out)
    dt = 1.0 / cfg.rate_hz
    v = np.diff(q, axis=0) / dt
    dv_ratio = np.abs(np.diff(v, axis=0)) / (np.array(cfg.acceleration_limits) * dt)
    jerk = np.diff(q, n=3, axis=0) / dt**3
    dev = np.array(dev)
    return {
        "dv_ratio_max": float(dv_ratio.max()),
        "limited_pct": 100.0 * ex.counters["limited_cycles"] / len(q),
        "dev_mean_rad": float(dev.mean()),
        "dev_p99_rad": float(np.percentile(dev, 99)),
        "jerk_rms": float(np.sqrt((jerk**2).mean())),
        "chunks": ex.counters["chunks_accepted"],
    }


def compare(
    cfg: ControllerConfig, seeds: range | list[int] = range(20), duration_s: float = 6.0
) -> dict[str, dict[str, float]]:
    """Metrics of both blend modes (same seeds, same horizon), averaged over the seeds (max for ratios)."""
    result = {}
    for mode in ("crossfade", "freeze"):
        runs = [run_case(cfg.replace(blend_mode=mode), s, duration_s) for s in seeds]
        result[mode] = {
            "dv_ratio_max": round(max(r["dv_ratio_max"] for r in runs), 4),
            "limited_pct": round(float(np.mean([r["limited_pct"] for r in runs])), 3),
            "dev_mean_rad": round(float(np.mean([r["dev_mean_rad"] for r in runs])), 5),
            "dev_p99_rad": round(float(np.mean([r["dev_p99_rad"] for r in runs])), 5),
            "jerk_rms": round(float(np.mean([r["jerk_rms"] for r in runs])), 2),
        }
    result["horizon_s"] = cfg.blend_horizon_s
    result["freeze_periods"] = cfg.freeze_periods
    return result
