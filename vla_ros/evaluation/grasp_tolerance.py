"""How far off the cup's axis can a grasp close and still lift it? Measured with the expert, per wrist roll.

The learned policy's failed grasps close 2-4 cm from the named cup, mostly along the arm's reach (the
fixed camera looks along it and sees depth worst), while its successes close up to about 2 cm off. This
tool separates the gripper's geometry from the policy: the privileged expert (``sim.expert.PickExpert``)
aims a fixed offset away from the cup's axis, along the reach or across it, until it has shut the
fingers, then lifts as usual; a trial counts when the cup is lifted within 3.5 s of simulated time. Run it for each
``--roll`` (the expert's ``wrist_roll_rad``: 0 closes the fingers across the reach,
pi/2 along it)::

    .venv/bin/python -m vla_ros.evaluation.grasp_tolerance --roll 0 --seeds 10 --json
    .venv/bin/python -m vla_ros.evaluation.grasp_tolerance --roll 1.5708 --seeds 10 --json
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

OFFSETS_CM = (-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0)
AXES = ("along_reach", "across_reach")


def offset_vector(cup_m: np.ndarray, axis: str, offset_m: float) -> np.ndarray:
    """(3,) world offset of ``offset_m`` along the arm's reach through ``cup_m`` or across it, on the axes
    ``closed_loop.grasp_offset`` splits a close on."""
    from vla_ros.evaluation.closed_loop import reach_axes

    along, across = reach_axes(cup_m)
    return np.append((along if axis == "along_reach" else across) * offset_m, 0.0)


def lifts(sim, seed: int, roll_rad: float, axis: str, offset_m: float, seconds: float = 3.5) -> bool:
    """One trial: the expert aims ``offset_m`` off the named cup until the fingers have shut, then lifts."""
    from vla_ros.sim.expert import ExpertConfig, PickExpert
    from vla_ros.sim.tasks import TRAIN_TEMPLATES, episode_task

    color, _ = episode_task(seed, TRAIN_TEMPLATES)
    sim.reset(seed)
    expert = PickExpert(ExpertConfig(wrist_roll_rad=roll_rad))
    aim = None
    while sim.time_s < seconds:
        if sim.is_joint_state_step():
            cup = sim.cup_positions()[color]
            if expert.phase in ("approach", "descend", "close"):
                aim = cup + offset_vector(cup, axis, offset_m)
            q = expert.command(sim.time_s, sim.tcp_position(), aim, sim.joint_positions())
            sim.command_positions(None, np.clip(q, sim.limits.lower, sim.limits.upper))
        sim.step()
        if sim.lifted_cup() == color:
            return True
    return False


def sweep(roll_rad: float, seeds: int, offsets_cm=OFFSETS_CM, progress: bool = True) -> dict:
    """Share of ``seeds`` training layouts lifted at each offset, per axis."""
    from tqdm import tqdm

    from vla_ros.sim import ArmSim

    sim = ArmSim()
    table = {axis: {} for axis in AXES}
    bar = tqdm(
        total=len(AXES) * len(offsets_cm) * seeds,
        desc=f"grasps (roll {roll_rad:.2f})",
        unit="trial",
        disable=not progress,
    )
    try:
        for axis in AXES:
            for cm in offsets_cm:
                hits = 0
                for seed in range(seeds):
                    hits += lifts(sim, seed, roll_rad, axis, cm / 100.0)
                    bar.update(1)
                table[axis][f"{cm:+.1f}"] = round(hits / seeds, 3)
    finally:
        bar.close()
        sim.close()
    return {"wrist_roll_rad": roll_rad, "seeds": seeds, "lifted_share_by_offset_cm": table}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vla_ros.evaluation.grasp_tolerance", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--roll",
        type=float,
        default=0.0,
        help="the expert's wrist roll in rad (default 0; 1.5708 closes along the reach)",
    )
    parser.add_argument("--seeds", type=int, default=10, help="training layouts per offset (default 10)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    from vla_ros.sim.expert import WRIST_ROLL_LIMIT_RAD

    if args.seeds < 1 or not abs(args.roll) <= WRIST_ROLL_LIMIT_RAD:
        print(
            f"--seeds must be >= 1 and --roll within +-{WRIST_ROLL_LIMIT_RAD:.4g} rad, got {args.seeds}, {args.roll}",
            file=sys.stderr,
        )
        return 2
    result = sweep(args.roll, args.seeds, progress=not args.json)
    if not args.json:
        for axis, row in result["lifted_share_by_offset_cm"].items():
            print(f"{axis:13s} " + "  ".join(f"{k}:{v:.1f}" for k, v in row.items()))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
