"""``vla-ros bench latency``: where a chunk's milliseconds go in the launched graph, stage by stage.

Runs the live evaluation (``vla-ros eval --live``: sim, policy, safety filter and controller as separate
processes, DDS, simulated time) once per ``--load`` level (CPU hogs beside the graph, ``yes > /dev/null``
each), and joins the nodes' own timing of every chunk (``/vla/chunk_timing``, ``vla_ros.latency``): per
segment of a chunk's way from its observation's stamp to the controller's first command from it, and for the
whole, p50 / p99 / mean / max over the chunks. Prints a table per level, writes a stacked bar per level side
by side (``latency_budget.png``), and the JSON as the last line.

The figures are this machine's, with what ran beside the graph: the JSON says both (the CPU, its count, the
load average, the hogs). Segments within one host are on the monotonic clock; the first (the stamp to the
policy's intake) is on the ROS clock, in steps of the ``/clock`` period in the sim (5 ms at 200 Hz).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path

from vla_ros.latency import SEGMENTS, WHOLE, plot_budget

# the figures of each level's live evaluation kept beside the stages
KEPT = (
    "success_rate",
    "episodes",
    "latency_ms_p50",
    "latency_ms_p99",
    "joint_msgs_dropped_pct",
    "image_msgs_dropped_pct",
    "filter_pass_unmodified_pct",
    "controller_period_err_ms_p99",
    "real_time_factor_achieved",
    "load_avg_1min",
    "wall_s",
)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_levels(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not levels or any(not 0 <= n <= 64 for n in levels):
        raise ValueError(f"--load wants a comma-separated list of 0-64 CPU hogs, got {text!r}")
    return levels


def table(summary: dict) -> str:
    rows = [f"{'segment':<18} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'n':>5}  what"]
    what = {name: text for name, _, text in SEGMENTS}
    what[WHOLE] = "the stamp to the first command"
    for name, v in summary["segments_ms"].items():
        if v is None:
            rows.append(f"{name:<18} {'-':>8} {'-':>8} {'-':>8} {0:>5}  {what[name]}")
        else:
            rows.append(f"{name:<18} {v['p50']:>8.1f} {v['p99']:>8.1f} {v['mean']:>8.1f} {v['n']:>5}  {what[name]}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench latency",
        description="the launched graph's latency, stage by stage (the live evaluation with the nodes' timing)",
    )
    parser.add_argument("--model", default="vla_cups")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per load level (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--load", default="0", help="CPU hogs beside the graph, a run per comma-separated level: 0,2 (default 0)"
    )
    parser.add_argument("--real-time-factor", type=float, default=1.0)
    parser.add_argument("--max-episode-s", type=float, default=15.0)
    parser.add_argument("--out", type=Path, default=None, help="default runs/bench-latency-<time>")
    parser.add_argument("--json", action="store_true", help="only the JSON line")
    args = parser.parse_args(argv)
    try:
        levels = parse_levels(args.load)
    except ValueError as err:
        parser.error(str(err))
    if args.episodes < 1:
        parser.error(f"--episodes must be >= 1, got {args.episodes}")

    from vla_ros.evaluation.live_eval import evaluate_live
    from vla_ros.evaluation.run_eval import load_templates
    from vla_ros.model.io import resolve_model_dir

    out = args.out or Path(f"runs/bench-latency-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    templates = load_templates(None)
    runs: dict[str, dict] = {}
    for n in levels:
        label = f"load {n}" if n else "quiet"
        run_dir = out / label.replace(" ", "_")
        summary = evaluate_live(
            str(resolve_model_dir(args.model)),
            args.episodes,
            args.seed,
            templates,
            max_episode_s=args.max_episode_s,
            real_time_factor=args.real_time_factor,
            out=run_dir,
            progress=not args.json,
            load=n,
        )
        latency = json.loads((run_dir / "results.json").read_text())["latency"]
        latency.pop("records")  # kept in the level's results.json
        runs[label] = {"load_hogs": n, **{k: summary.get(k) for k in KEPT}, **latency}
        if not args.json:
            print(
                f"\n{label} ({n} CPU hogs), {summary.get('episodes')} episodes, success {summary.get('success_rate')}"
            )
            print(table(latency))
    picture = plot_budget(runs, out / "latency_budget.png", f"{args.model}: a chunk's way, live")
    result = {
        "model": args.model,
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "real_time_factor": args.real_time_factor,
        "runs": runs,
        "picture": str(picture),
        "out": str(out),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
