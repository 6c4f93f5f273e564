"""``vla-ros bench sim``: how fast the simulation runs with the camera on, as fast as possible.

Runs the ROS-free core (the same ``ArmSim`` the node wraps) through a scripted pick so contacts and a
grasped object are part of the load, renders every camera period, and reports the achieved real-time
factor with the per-step physics and per-frame render costs. Message publishing is not included: it is
measured by the node's own diagnostics (``real_time_factor.achieved``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vla_ros.cli import print_result
from vla_ros.sim import ArmSim, PositionTrajectory, SimConfig
from vla_ros.sim.scripted import pick_plan


def run(seconds: float = 10.0, seed: int = 0, width: int = 320, height: int = 240, warmup_s: float = 1.0) -> dict:
    sim = ArmSim(SimConfig(image_width=width, image_height=height), seed=seed)
    times, points = pick_plan(sim.cup_positions()["red"], sim.command_joint_positions())
    sim.command_trajectory(PositionTrajectory.from_points(sim.command_joint_names, times, points, sim.limits))
    for _ in range(int(warmup_s * sim.config.physics_rate_hz)):  # warm-up: GL context, caches
        sim.step()
        if sim.is_frame_step():
            sim.render()
    step_us, render_ms = [], []
    n_steps = int(seconds * sim.config.physics_rate_hz)
    sim_t0, wall_t0 = sim.time_s, time.perf_counter()
    for _ in range(n_steps):
        t0 = time.perf_counter()
        sim.step()
        t1 = time.perf_counter()
        step_us.append((t1 - t0) * 1e6)
        if sim.is_frame_step():
            sim.render()
            render_ms.append((time.perf_counter() - t1) * 1e3)
    wall = time.perf_counter() - wall_t0
    sim.close()
    return {
        "real_time_factor": round((sim.time_s - sim_t0) / wall, 3),
        "render_ms_p50": round(float(np.percentile(render_ms, 50)), 3),
        "render_ms_p99": round(float(np.percentile(render_ms, 99)), 3),
        "physics_step_us_p50": round(float(np.percentile(step_us, 50)), 2),
        "physics_step_us_p99": round(float(np.percentile(step_us, 99)), 2),
        "image": f"{width}x{height}",
        "sim_seconds": seconds,
        "frames": len(render_ms),
        "physics_rate_hz": sim.config.physics_rate_hz,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench sim",
        description="Simulation speed with the camera on; the last line of output is a JSON object.",
        epilog="example: vla-ros bench sim --seconds 10 --json",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument("--seconds", type=float, default=10.0, help="simulated seconds to run (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--height", type=int, default=240)
    args = parser.parse_args(argv)
    result = run(seconds=args.seconds, seed=args.seed, width=args.width, height=args.height)
    print_result(result, args.json, 22)
    return 0
