"""``vla-ros bench safety``: how long the safety filter takes per 50-waypoint chunk.

Runs the ROS-free core (the same ``SafetyFilter`` the node wraps) on a stream of policy-like chunks: each
chunk starts where the previous one was executed to (a new chunk every 10 points), moves every joint
smoothly towards a random goal up to ``--reach`` rad away (drawn a third of the way back towards the home
pose) over 50 points at 25 Hz, and is filtered against
the measured state at the chunk's stamp. Timing covers the whole ``filter`` call (input checks, limits,
time scaling, collision checks of every waypoint and interpolated point, the stop check), after a warm-up,
with a fixed seed; wall time and the thread's CPU time (which leaves out waiting for a shared CPU) are
both reported. The sim arm uses config/safety_filter.yaml's settings; the Franka FR3 (mesh collision
geometry plus SRDF, from ``../shared/robots/fr3`` next to the repository) stands on a table at z = 0 and is
reported when that folder exists.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from vla_ros.chunks import ActionChunk
from vla_ros.cli import print_result
from vla_ros.safety import JointStateSample, SafetyConfig, SafetyFilter, load_robot, load_robot_files
from vla_ros.sim import HOME_Q, default_urdf_path

REPO = Path(__file__).resolve().parents[2]
FR3_DIR = REPO.parent / "shared" / "robots" / "fr3"
FR3_READY = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785, 0.035)  # the SRDF's "ready" pose, fingers open
# The sim arm's filter settings as config/safety_filter.yaml sets them (workspace box around the table).
SIM_CONFIG = SafetyConfig(workspace_min_m=(-0.9, -0.9, -0.1), workspace_max_m=(0.9, 0.9, 1.3))
FR3_CONFIG = SafetyConfig(table_height_m=0.0)
RATE_HZ = 25.0


def fr3_filter(config: SafetyConfig = FR3_CONFIG) -> SafetyFilter | None:
    if not (FR3_DIR / "fr3.urdf").is_file():
        return None
    robot = load_robot_files(FR3_DIR / "fr3.urdf", FR3_DIR / "fr3.srdf", [str(FR3_DIR.parent)])
    return SafetyFilter(robot, config)


def sim_filter(config: SafetyConfig = SIM_CONFIG) -> SafetyFilter:
    return SafetyFilter(load_robot(default_urdf_path().read_text()), config)


def smooth_chunk(
    filt: SafetyFilter,
    q0: np.ndarray,
    rng: np.random.Generator,
    stamp_ns: int,
    waypoints: int = 50,
    reach_rad: float = 0.5,
    home=None,
) -> ActionChunk:
    """A policy-like chunk from ``q0``: every joint eases (cosine profile) to a random goal within reach,
    drawn a third of the way back towards ``home`` so a stream of chunks wanders around the work area."""
    lim = filt.limits
    span = np.where(filt.robot.prismatic, 0.02, reach_rad)
    centre = q0 if home is None else q0 + (np.asarray(home) - q0) / 3.0
    goal = np.clip(centre + rng.uniform(-1.0, 1.0, q0.size) * span, lim.lower + 0.05 * span, lim.upper - 0.05 * span)
    s = np.arange(1, waypoints + 1) / waypoints
    profile = 0.5 - 0.5 * np.cos(np.pi * s)  # (H,) eases in and out
    points = q0 + profile[:, None] * (goal - q0)  # (H, n)
    return ActionChunk(filt.joint_names, stamp_ns, s * waypoints / RATE_HZ, points)


def run(
    filt: SafetyFilter,
    q_home,
    chunks: int,
    seed: int,
    warmup: int = 50,
    waypoints: int = 50,
    reach_rad: float = 0.5,
    exhaustive: int = 0,
) -> dict:
    rng = np.random.default_rng(seed)
    q = np.asarray(q_home, dtype=np.float64)
    now = 1_700_000_000 * 1_000_000_000  # wall-clock-like ROS time
    times_ms, cpu_ms, queries, verdicts, ref_ms = [], [], [], {}, []
    for i in range(warmup + chunks):
        chunk = smooth_chunk(filt, q, rng, now, waypoints, reach_rad, q_home)
        state = JointStateSample(filt.joint_names, q, now - 5_000_000)
        t0, c0 = time.perf_counter(), time.thread_time()
        out, report = filt.filter(chunk, state, now)
        elapsed, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if i >= warmup:
            times_ms.append(elapsed * 1e3)
            cpu_ms.append(cpu * 1e3)
            queries.append(report.exact_queries)
            verdicts[report.verdict] = verdicts.get(report.verdict, 0) + 1
            if len(ref_ms) < exhaustive and out is not None:  # the brute-force path check, for comparison
                path = np.vstack([q, out.positions])
                t0 = time.perf_counter()
                filt.checker.check_path_exhaustive(path)
                ref_ms.append((time.perf_counter() - t0) * 1e3)
        # The next chunk arrives after 10 executed points (or from home when nothing passed).
        q = out.positions[min(9, out.horizon - 1)].copy() if out is not None else np.asarray(q_home, dtype=np.float64)
        now += int(10 / RATE_HZ * 1e9)
    result = {
        "check_ms_p50": round(float(np.percentile(times_ms, 50)), 3),
        "check_ms_p99": round(float(np.percentile(times_ms, 99)), 3),
        "check_ms_max": round(float(np.max(times_ms)), 3),
        # CPU time of the filtering thread: what the check costs without waiting for a shared CPU.
        "check_cpu_ms_p50": round(float(np.percentile(cpu_ms, 50)), 3),
        "check_cpu_ms_p99": round(float(np.percentile(cpu_ms, 99)), 3),
        "collision_pairs": filt.collision_pairs,
        "exact_queries_p50": float(np.percentile(queries, 50)),
        "verdicts": verdicts,
    }
    if ref_ms:
        result["exhaustive_path_check_ms_p50"] = round(float(np.percentile(ref_ms, 50)), 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench safety",
        description="Safety filter time per 50-waypoint chunk on the sim arm and the Franka FR3 (when "
        "../shared/robots/fr3 exists); the last line of output is a JSON object.",
        epilog="example: vla-ros bench safety --chunks 2000 --json",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--chunks", type=int, default=2000, help="timed chunks on the sim arm (default 2000)")
    parser.add_argument("--fr3-chunks", type=int, default=500, help="timed chunks on the FR3 (default 500)")
    parser.add_argument("--waypoints", type=int, default=50, help="points per chunk (default 50)")
    parser.add_argument("--reach", type=float, default=0.5, help="largest joint motion per chunk, rad (default 0.5)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sim = run(
        sim_filter(), HOME_Q, args.chunks, args.seed, waypoints=args.waypoints, reach_rad=args.reach, exhaustive=50
    )
    result = dict(sim)
    result["waypoints"] = args.waypoints
    fr3 = fr3_filter()
    if fr3 is not None:
        res = run(
            fr3, FR3_READY, args.fr3_chunks, args.seed, waypoints=args.waypoints, reach_rad=args.reach, exhaustive=20
        )
        for key, value in res.items():
            result[f"fr3_{key}"] = value
    print_result(result, args.json, 36)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
