"""Where does the policy aim its grasp, and where did it believe the cup was when it closed?

The learned policy's first close lands beyond the named cup along the arm's reach on average (the fixed
camera looks along that line and sees depth worst), and the weights that miss most are the ones whose
aim is biased most. This tool runs closed-loop episodes as ``vla-ros eval`` does and, at each episode's
first close (the gripper command falling through half open), reads three points against the true cup,
split along the reach and across it (signed, cm; + is beyond the cup, further from the base):

* ``tcp``: where the hand closed;
* ``transformer``: the model's auxiliary cup head on its action tokens (what the Transformer believes,
  from the whole window: frames, joint states, instruction);
* ``frame_head``: the frame head on the newest frame's keypoints alone (what the vision stem sees).

At rest, before the hand is near, both heads find the cup to about a centimetre (``vla-ros attention``,
``named_cup_error_at_rest_m``). At the close the hand is in the picture and the model's window holds only
the last ``window_seconds`` (0.5 s) of frames: a belief pulled towards the hand would show up as a bias
shared by ``frame_head``, ``transformer`` and ``tcp``, an error added between the belief and the motion as
``tcp`` alone drifting from ``transformer`` (what the models measured so far show along the reach;
docs/training.md, "Where the aim goes")::

    .venv/bin/python -m vla_ros.evaluation.aim --model models/vla_cups --episodes 50 --json
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

POINTS = ("tcp", "transformer", "frame_head")


def along_across_cm(point_xy, cup_m) -> tuple[float, float]:
    """``point_xy`` minus the cup's axis, along the arm's reach and across it, cm (``closed_loop.grasp_offset``)."""
    from vla_ros.evaluation.closed_loop import grasp_offset

    d = grasp_offset(0.0, point_xy, cup_m)
    return round(100 * d["along_reach_m"], 2), round(100 * d["across_reach_m"], 2)


class CupBeliefs:
    """The torch model's two cup heads on the policy session's current window (xy, metres)."""

    def __init__(self, model_dir) -> None:
        from vla_ros.model.io import load_model

        self.model = load_model(model_dir).eval()
        if getattr(self.model, "aux_head", None) is None or self.model.frame_aux_head is None:
            raise ValueError(f"{model_dir}: the model has no cup heads (trained without --task cups)")

    def __call__(self, session) -> dict[str, np.ndarray]:
        from vla_ros.evaluation.attention import cup_estimates

        transformer, frame = cup_estimates(
            self.model, session.window(), session.stream.instruction.embeddings, session.policy.pinned
        )
        return {"transformer": transformer, "frame_head": frame}


class FirstClose:
    """A ``ClosedLoop`` hook that records the three points at the episode's first close. ``driver`` (optional,
    ``PickExpert``-like) drives instead of the policy: a reference whose aim is known."""

    def __init__(self, beliefs: CupBeliefs, loop, driver_factory=None) -> None:
        self.beliefs, self.session, self.driver_factory = beliefs, loop.session, driver_factory
        self.gripper, self.half_open = loop.gripper_index, loop.half_open

    def start(self, sim, instruction: str, color: str) -> None:
        self.sim, self.color, self.record, self.was_open = sim, color, None, True
        self.driver = self.driver_factory() if self.driver_factory else None

    def joint_state(self, stamp) -> None: ...

    def frame(self, rgb, stamp, camera) -> None: ...

    def status(self) -> None: ...

    def execute(self, q_policy):
        sim = self.sim
        q = q_policy
        if self.driver is not None:
            q = self.driver.command(
                sim.time_s, sim.tcp_position(), sim.cup_positions()[self.color], sim.joint_positions()
            )
        if q is not None:
            is_open = q[self.gripper] >= self.half_open  # the evaluation's own rule for a close
            if self.was_open and not is_open and self.record is None:
                cup = sim.cup_positions()[self.color]
                points = {"tcp": sim.tcp_position()[:2], **self.beliefs(self.session)}
                self.record = {"t_s": round(sim.time_s, 3), **{k: along_across_cm(v, cup) for k, v in points.items()}}
            self.was_open = is_open
        return q, False


def summarise(rows: list[dict]) -> dict:
    """Signed medians and means of each point along and across the reach, over all first closes and the failed ones."""

    def stats(sel):
        if not sel:
            return None
        out = {}
        for p in POINTS:
            a = np.array([r[p] for r in sel], float)
            out[p] = {
                "along_median_cm": round(float(np.median(a[:, 0])), 2),
                "along_mean_cm": round(float(a[:, 0].mean()), 2),
                "across_median_cm": round(float(np.median(a[:, 1])), 2),
                "across_mean_cm": round(float(a[:, 1].mean()), 2),
            }
        return out | {"episodes": len(sel)}

    closed = [r for r in rows if "tcp" in r]
    return {
        "episodes": len(rows),
        "success_rate": round(float(np.mean([r["success"] for r in rows])), 3) if rows else None,
        "first_close": stats(closed),
        "first_close_failed": stats([r for r in closed if not r["success"]]),
    }


def run(model_dir, episodes: int, seed: int = 0, templates=None, driver_factory=None, threads: int = 1) -> dict:
    import torch

    from vla_ros.evaluation.closed_loop import ClosedLoop
    from vla_ros.sim.tasks import EVAL_SEED_START, HELDOUT_TEMPLATES, eval_episodes

    torch.set_num_threads(threads)
    beliefs = CupBeliefs(model_dir)
    loop = ClosedLoop(model_dir, backend="onnx", threads=threads)
    rows = []
    try:
        for ep_seed, color, instruction in eval_episodes(episodes, seed, templates or HELDOUT_TEMPLATES):
            hook = FirstClose(beliefs, loop, driver_factory)
            r = loop.run_episode(ep_seed, instruction, color, hook=hook)
            rows.append({"seed": ep_seed, "color": color, "success": r.success, **(hook.record or {})})
    finally:
        loop.close()
    return {
        **summarise(rows),
        "model": str(model_dir),
        "seeds": [EVAL_SEED_START + seed, EVAL_SEED_START + seed + episodes - 1],
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vla_ros.evaluation.aim", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="vla_cups", help="model folder or name under models/ (default vla_cups)")
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="offset into the evaluation seed range")
    parser.add_argument("--json", action="store_true", help="print only the JSON line (without the per-episode rows)")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.seed < 0:
        print(f"--episodes must be >= 1 and --seed >= 0, got {args.episodes}, {args.seed}", file=sys.stderr)
        return 2
    from vla_ros.model.io import resolve_model_dir

    try:
        result = run(resolve_model_dir(args.model), args.episodes, args.seed)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aim: {exc}", file=sys.stderr)
        return 2
    if not args.json:
        for row in result["rows"]:
            print(json.dumps(row))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
