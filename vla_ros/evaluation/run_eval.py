"""``vla-ros eval``: closed-loop success rate of a model in the sim.

In process (default): the cores the nodes wrap, stepped on simulated time with a modelled policy latency,
deterministic per seed. ``--live``: the same episodes through the launched processes and DDS
(``live_eval``), with the latency, drop and filter figures of the running system.

Episodes use the evaluation seed range (never used for training data) and, by default, instruction
phrasings held out from training. Prints per-episode progress, writes ``results.json`` (and a video of
the first episodes with ``--videos``) to a dated folder, and prints a JSON object as the last line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from vla_ros.cli import print_result
from vla_ros.evaluation.tables import outcome_summary, refusal_summary, robot_fields

EXAMPLE = (
    "examples: vla-ros eval --model models/vla_cups --episodes 50 --seed 0 --json\n"
    "          vla-ros eval --model runs/fr3_cups --robot fr3 --episodes 50 --seed 0 --json   # another arm\n"
    "          vla-ros eval --live --episodes 20 --seed 0 --json\n"
    "          vla-ros eval --model runs/a --episodes 100 --seed 1000000 --instructions train --json   # choose "
    "between runs"
)


class Templates(tuple):
    """Instruction templates (a tuple of strings); ``refuse``: every one of them must be refused."""

    refuse = False

    def __new__(cls, templates, refuse: bool = False):
        out = super().__new__(cls, templates)
        out.refuse = refuse
        return out


def load_templates(path: str | None) -> Templates:
    """The phrasings to evaluate with: None or "heldout" (the default, never trained on), "unseen"
    (in neither the training nor the held-out list), "train" (the training list: for choosing between
    trained runs on seeds of their own, leaving the held-out phrasings to the final figure), "refuse" (the
    held-out list of instructions the policy must refuse: ``sim.tasks.REFUSE_HELDOUT_TEMPLATES``), or a file:
    one template per line with {color}; a file whose first line is ``# refuse`` lists instructions to refuse,
    {color} optional (filled with the colour of a cup in the scene). Other lines starting with # are comments."""
    from vla_ros.sim.tasks import HELDOUT_TEMPLATES, REFUSE_HELDOUT_TEMPLATES, TRAIN_TEMPLATES, UNSEEN_TEMPLATES

    named = {
        None: HELDOUT_TEMPLATES,
        "": HELDOUT_TEMPLATES,
        "heldout": HELDOUT_TEMPLATES,
        "unseen": UNSEEN_TEMPLATES,
        "train": TRAIN_TEMPLATES,
    }
    if path in named:
        return Templates(named[path])
    if path == "refuse":
        return Templates(REFUSE_HELDOUT_TEMPLATES, refuse=True)
    text = Path(path).read_text().splitlines()
    refuse = bool(text) and text[0].strip().lower() == "# refuse"
    lines = [line.strip() for line in text if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ValueError(f"{path}: no instruction in it")
    for line in lines:
        try:
            line.format(color="red")
        except (KeyError, IndexError, ValueError) as err:
            raise ValueError(f"{path}: {line!r}: only {{color}} may stand in braces ({err})") from None
    bad = [line for line in lines if "{color}" not in line]
    if bad and not refuse:
        raise ValueError(
            f"{path}: every line must be a template containing {{color}} (or the first line '# refuse' for "
            f"instructions to refuse); bad: {bad[:3]}"
        )
    return Templates(lines, refuse=refuse)


_LOOP = None  # one ClosedLoop per worker process (built once, reused for every episode it runs)
_INIT_ERROR: BaseException | None = None  # why this worker could not build it


def _init_worker(model, backend, device, config, share_dir, robot, threads, in_pool: bool = False) -> None:
    global _LOOP, _INIT_ERROR
    from vla_ros.evaluation.closed_loop import ClosedLoop

    # A pool initializer that raises kills its worker and the pool starts another, forever: keep the error
    # and raise it from the first episode instead, which ends the pool and reaches the caller.
    try:
        _LOOP = ClosedLoop(
            model, backend=backend, device=device, config=config, share_dir=share_dir, threads=threads, robot=robot
        )
    except Exception as exc:  # noqa: BLE001 (re-raised by _run_one)
        if not in_pool:
            raise
        _INIT_ERROR = exc


def _run_one(job):
    """One episode in this process's ClosedLoop; the video is written here, frames never cross processes."""
    if _INIT_ERROR is not None:
        raise _INIT_ERROR
    ep_seed, instruction, color, record, out = job
    r = _LOOP.run_episode(ep_seed, instruction, color, record=record)
    if r.frames and out is not None:
        write_video(r.frames, out / f"episode_{ep_seed}_{color}.mp4")
    r.frames = r.commanded = r.measured = None
    return r


def evaluate(
    model: str,
    episodes: int,
    seed: int,
    templates,
    backend="onnx",
    device="cpu",
    videos: int = 0,
    out: Path | None = None,
    progress: bool = True,
    config=None,
    share_dir=None,
    workers: int = 1,
    robot: str | None = None,
) -> dict:
    """Run the episodes; with ``workers`` > 1 they are spread over processes (one torch thread each).

    Every episode starts from its own seed with a reset sim and policy, so the results do not depend on
    which worker runs it or in what order. ``robot``: a robot profile's name or file (None: the model's
    recorded robot, else the bundled arm); ProfileError (a ValueError) where it does not fit the model.
    """
    import multiprocessing as mp

    from tqdm import tqdm

    from vla_ros.robot_profile import profile_for_model
    from vla_ros.sim.tasks import eval_episodes

    profile = profile_for_model(model, robot)  # before any worker starts; they all get this one file

    load_start = os.getloadavg()
    refuse = getattr(templates, "refuse", False)  # instructions to refuse: each of them in turn
    jobs = [
        (ep_seed, instruction, color, i < videos, out)
        for i, (ep_seed, color, instruction) in enumerate(
            eval_episodes(episodes, seed, templates, every_template=refuse)
        )
    ]
    results = []
    t0 = time.time()
    bar = tqdm(total=episodes, desc="evaluating", unit="ep", disable=not progress)

    def done(r) -> None:
        results.append(r)
        bar.update(1)
        bar.set_postfix(success=f"{np.mean([x.success for x in results]):.0%}")

    init = (model, backend, device, config, share_dir, str(profile.source))
    if workers <= 1:
        _init_worker(*init, None)
        for job in jobs:
            done(_run_one(job))
        _LOOP.close()
    else:
        # spawn, not fork: each worker gets its own MuJoCo/EGL context and torch thread pool
        with mp.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(*init, 1, True)) as pool:
            for r in pool.imap_unordered(_run_one, jobs):
                done(r)
    bar.close()
    results.sort(key=lambda r: r.seed)
    rows = [r.__dict__ for r in results]
    summary = {
        **(refusal_summary(rows) if refuse else outcome_summary(rows)),
        "instructions_list": "refuse" if refuse else "request",
        "model": str(model),
        **robot_fields(profile),
        "backend": backend,
        "mode": "in_process",
        "workers": max(1, workers),
        "load_avg_1min": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
        "wall_s": round(time.time() - t0, 1),
    }
    if config is not None and config.policy_instruction is not None:
        summary["policy_instruction"] = config.policy_instruction
    hold_s = config.hold_after_success_s if config is not None else 0.0
    if hold_s > 0:  # success counts the lift; a cup dropped within the hold is counted here
        held = sum(1 for r in results if r.success and r.lifted == r.color)
        summary["held_after_lift"] = {
            "hold_s": hold_s,
            "rate": round(held / len(results), 3) if results else None,
            "dropped": sum(1 for r in results if r.success) - held,
        }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(
            json.dumps({"summary": summary, "episodes": [r.__dict__ for r in results]}, indent=1, default=str)
        )
    return summary


def write_video(frames, path: Path, fps: int = 30) -> None:
    import cv2

    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    for f in frames:
        writer.write(np.ascontiguousarray(f[:, :, ::-1]))
    writer.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros eval",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default="",
        help="model folder or name under models/ (default: the one the package ships for --robot, fr3_cups for fr3, "
        "else vla_cups)",
    )
    parser.add_argument(
        "--robot",
        default="",
        metavar="PROFILE",
        help="robot profile to simulate: a name (fr3) or a YAML file (docs/your_robot.md); default: the robot the "
        "model folder records (vla-ros train --robot), else the bundled arm. Its commanded joints must be the model's",
    )
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="offset into the evaluation seed range")
    parser.add_argument(
        "--instructions",
        default=None,
        help="heldout (default: phrasings held out from training), unseen (in neither list), train (the training list, "
        "to choose between runs), refuse (held-out instructions the policy must refuse: the JSON reports lifts, "
        "refused_pct and per instruction max_tcp_displacement_m) or a file of templates with {color}, one per line "
        "(first line '# refuse': instructions to refuse, {color} optional)",
    )
    parser.add_argument(
        "--backend", default="onnx", choices=("torch", "onnx"), help="inference backend (default onnx, as the node)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--videos", type=int, default=0, help="write a video of the first N episodes")
    parser.add_argument("--out", default="", help="output folder (default runs/eval-<date>)")
    parser.add_argument("--max-episode-s", type=float, default=15.0)
    parser.add_argument(
        "--smoothing-degree",
        type=int,
        default=None,
        help="override the policy's chunk_smoothing_degree (default: config/policy.yaml)",
    )
    parser.add_argument(
        "--policy-rate",
        type=float,
        default=None,
        metavar="HZ",
        help="override the policy's rate_hz, its ticks per simulated second (default: config/policy.yaml)",
    )
    parser.add_argument(
        "--shape-chunks",
        choices=("on", "off"),
        default=None,
        help="override the policy's shape_chunks (default: config/policy.yaml)",
    )
    parser.add_argument(
        "--temporal-ensemble",
        type=float,
        default=None,
        metavar="S",
        help="override the policy's temporal_ensemble_s (0 = newest chunk alone; default: config/policy.yaml)",
    )
    parser.add_argument(
        "--policy-instruction",
        choices=("as_given", "grounded"),
        default=None,
        help="override the policy's policy_instruction: what it reads of an accepted instruction, its words or the "
        "task's wording of the cup the instruction check found (default: config/policy.yaml)",
    )
    parser.add_argument(
        "--hold",
        type=float,
        default=0.0,
        metavar="S",
        help="run each episode S simulated seconds past the lift (success still counts the lift); the summary's "
        "held_after_lift says how many named cups are still up then",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="episodes run in this many processes at once (one torch thread each)"
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="run the episodes through the launched graph (sim, policy, safety filter and controller processes, DDS, "
        "simulated time) instead of in process",
    )
    parser.add_argument(
        "--real-time-factor", type=float, default=1.0, help="--live: simulated seconds per wall second (default 1)"
    )
    parser.add_argument(
        "--startup-timeout", type=float, default=240.0, help="--live: wall seconds for the graph to come up"
    )
    parser.add_argument(
        "--load",
        type=int,
        default=0,
        help="--live: start this many CPU hogs (`yes > /dev/null` each) beside the graph for the run (default 0)",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    if args.live and (
        args.videos
        or args.workers != 1
        or args.smoothing_degree is not None
        or args.shape_chunks is not None
        or args.policy_rate is not None
        or args.temporal_ensemble is not None
        or args.policy_instruction is not None
        or args.hold
    ):
        parser.error(
            "--live runs the shipped configuration in one graph: --videos, --workers, --smoothing-degree, "
            "--shape-chunks, --policy-rate, --temporal-ensemble, --policy-instruction and --hold do not apply"
        )
    if args.load and not args.live or not 0 <= args.load <= 64:
        parser.error(f"--load takes 0-64 CPU hogs and needs --live, got {args.load}")
    if not 0.0 <= args.hold <= 5.0:  # NaN fails too
        parser.error(f"--hold must be in [0, 5] simulated seconds, got {args.hold}")
    if args.temporal_ensemble is not None:  # the node parameter's own range check, before anything loads
        from vla_ros.params import policy as policy_params
        from vla_ros.params.spec import validate_all

        for reason in validate_all(policy_params.PARAMS, {"temporal_ensemble_s": args.temporal_ensemble}):
            parser.error(f"--temporal-ensemble: {reason}")
    from vla_ros.evaluation.closed_loop import EvalConfig
    from vla_ros.evaluation.select_run import check_run
    from vla_ros.model.io import resolve_model_dir
    from vla_ros.robot_profile import ProfileError, shipped_model_name

    try:
        args.model = args.model or shipped_model_name(args.robot or None)
    except ProfileError as err:
        print(f"vla-ros eval: {err}", file=sys.stderr)
        return 2

    # before any worker or graph starts: the model's files, and the robot it runs on
    problem = check_run(resolve_model_dir(args.model), args.backend, args.robot or None)
    if problem:
        print(f"vla-ros eval: {problem}", file=sys.stderr)
        return 2
    templates = load_templates(args.instructions)
    out = Path(args.out or f"runs/eval-{'live-' if args.live else ''}{datetime.datetime.now():%Y%m%d-%H%M%S}")
    if args.live:
        from vla_ros.evaluation.live_eval import evaluate_live

        summary = evaluate_live(
            str(resolve_model_dir(args.model)),
            args.episodes,
            args.seed,
            templates,
            args.backend,
            args.max_episode_s,
            args.real_time_factor,
            out,
            progress=not args.json,
            startup_timeout_s=args.startup_timeout,
            robot=args.robot or None,
            load=args.load,
        )
        print_result(summary, args.json, 28)
        return 0
    summary = evaluate(
        str(resolve_model_dir(args.model)),
        args.episodes,
        args.seed,
        templates,
        args.backend,
        args.device,
        args.videos,
        out,
        progress=not args.json,
        config=EvalConfig(
            max_episode_s=args.max_episode_s,
            chunk_smoothing_degree=args.smoothing_degree,
            policy_rate_hz=args.policy_rate,
            shape_chunks=None if args.shape_chunks is None else args.shape_chunks == "on",
            temporal_ensemble_s=args.temporal_ensemble,
            policy_instruction=args.policy_instruction,
            hold_after_success_s=args.hold,
        ),
        workers=args.workers,
        robot=args.robot or None,
    )
    print_result(summary, args.json, 24)
    return 0
