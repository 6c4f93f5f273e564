"""``vla-ros select``: keep the best of several trained runs, judged in the closed loop on seeds of their own.

Runs of one recipe that differ only in their training seed land far apart in closed-loop success (0.585 to
0.845 on the cup task), and their validation losses do not say which is which: they ordered two runs
backwards. Closed-loop success on 100 selection episodes (seeds 2,000,000 on, the training phrasings)
follows the 200 held-out episodes' figure (correlation 0.75 over nine models), so this verb evaluates
every run there, copies the winner's files into ``--out`` and writes ``selection.json`` with every run's
figures. The held-out seeds and phrasings stay untouched for the final figure (``vla-ros eval``): with 100
episodes a selection figure is itself +-0.04 and flatters the winner.

Success also drifts along one run (checkpoints 400 steps apart differ by up to 0.3, and the selection seeds
follow them: correlation 0.96 with the held-out figure), so ``--checkpoints`` makes every checkpoint a run
wrote (``vla-ros train --checkpoints``) a candidate too. ``--screen-episodes N`` keeps the cost of many
candidates down: every candidate runs the first N selection episodes, only the best ``--finalists`` run the
rest, and the winner is the best finalist over all of them (successive halving with one cut).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

EXAMPLE = (
    "example: vla-ros select --runs runs/seed0 runs/seed1 --out runs/vla_cups --episodes 100 --workers 2 --json\n"
    "         vla-ros select --runs runs/seed0 runs/seed1 --checkpoints --screen-episodes 50 --out runs/vla_cups\n"
    "         vla-ros eval --model runs/vla_cups --episodes 100 --seed 0 --json   # the held-out figure"
)
SELECTION_FILE = "selection.json"
HELDOUT_OFFSETS = 1_000_000  # `vla-ros eval --seed` offsets below this are the held-out figure's seeds


def rank_key(summary: dict) -> tuple:
    """Order of preference: success, then chunks the filter left unmodified, then the sooner success. A
    missing figure ranks last; equal keys keep the order the runs were given in (sorting is stable)."""
    unmodified = summary.get("filter_pass_unmodified_pct")
    seconds = summary.get("mean_time_to_success_s")
    return (
        -summary["success_rate"],
        -(unmodified if unmodified is not None else -1.0),
        seconds if seconds is not None else float("inf"),
    )


def rank_runs(summaries: dict[str, dict]) -> list[str]:
    """Run names, best first."""
    return sorted(summaries, key=lambda name: rank_key(summaries[name]))


def check_out_folder(out: Path, runs: list[Path]) -> str | None:
    """Why ``out`` may not receive the winner (None when it may): never one of the runs, and never a
    folder with other content than an earlier selection, which would be mixed with or replace it."""
    if any(out.resolve() == run.resolve() for run in runs):
        return f"--out {out} is one of the runs; give a new folder"
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / SELECTION_FILE).is_file())):
        return f"--out {out} exists and holds something other than an earlier selection; give a new folder or remove it"
    return None


def check_run(run: Path, backend: str, robot: str | None = None) -> str | None:
    """Why ``run`` cannot be evaluated (None when it can), before any episode starts: its files, and its robot
    (``robot``, a profile's name or file; None: the one it records, else the bundled arm) loading and commanding its
    joints."""
    from vla_ros.model.io import check_onnx, load_model
    from vla_ros.robot_profile import ProfileError, profile_for_model

    try:
        load_model(run)
        if backend == "onnx":
            check_onnx(run)
    except (FileNotFoundError, ValueError) as exc:
        return f"{run}: {exc}"
    try:
        profile_for_model(run, robot)
    except ProfileError as exc:  # it names the model
        return str(exc)
    return None


def training_figures(run: Path) -> dict:
    """What the run's own report says, beside its closed-loop figures (the loss is not the criterion)."""
    try:
        report = json.loads((run / "train_report.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    keys = ("checkpoint", "steps", "steps_planned", "stopped_by_time_limit", "final_val_loss", "duration_min")
    return {k: report[k] for k in keys if k in report}


def install(winner: Path, out: Path) -> list[str]:
    """Replace ``out``'s model files with the winner's top-level files; returns the names copied."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    names = []
    for f in sorted(winner.iterdir()):
        if f.is_file():
            shutil.copy2(f, out / f.name)
            names.append(f.name)
    return names


def checkpoint_step(folder: Path) -> int | None:
    """The step of a ``checkpoints/step_<n>`` folder (None for anything else)."""
    head, _, step = folder.name.partition("_")
    return int(step) if head == "step" and step.isdigit() else None


def candidates(runs: list[Path], with_checkpoints: bool) -> tuple[list[Path], dict[str, str]]:
    """The runs as given, then (``with_checkpoints``) each run's checkpoints, later steps first; and the
    folders left out because their weights are byte-identical to a candidate already listed (the checkpoint
    at a run's last step is its saved model), each with the candidate that stands for it. Ties in
    ``rank_runs`` keep this order, so a run's final weights go before its checkpoints."""
    from vla_ros.model.io import sha256_file
    from vla_ros.training.train import CHECKPOINTS_DIR

    listed = list(runs)
    if with_checkpoints:
        for run in runs:
            steps = [(checkpoint_step(f), f) for f in (run / CHECKPOINTS_DIR).glob("step_*") if f.is_dir()]
            listed += [f for step, f in sorted((x for x in steps if x[0] is not None), reverse=True)]
    kept, seen, same = [], {}, {}
    for folder in listed:
        weights = folder / "model.safetensors"
        digest = sha256_file(weights) if weights.is_file() else str(folder.resolve())
        if digest in seen:
            same[str(folder)] = str(seen[digest])
        else:
            seen[digest] = folder
            kept.append(folder)
    return kept, same


def label(folder: Path) -> str:
    """A short name for a candidate's episode folder: a checkpoint is named with its run."""
    return f"{folder.parent.parent.name}-{folder.name}" if checkpoint_step(folder) is not None else folder.name


def combine_rounds(first: Path, rest: Path) -> dict:
    """One summary and one ``results.json`` (in ``first``) for a candidate's episodes of both rounds;
    ``rest`` is removed. The figures are computed over all episodes as one evaluation would."""
    from vla_ros.evaluation.tables import outcome_summary

    a, b = (json.loads((folder / "results.json").read_text()) for folder in (first, rest))
    rows = sorted(a["episodes"] + b["episodes"], key=lambda r: r["seed"])
    summary = {
        **a["summary"],
        **outcome_summary(rows),
        "wall_s": round(a["summary"]["wall_s"] + b["summary"]["wall_s"], 1),
    }
    (first / "results.json").write_text(json.dumps({"summary": summary, "episodes": rows}, indent=1, default=str))
    shutil.rmtree(rest)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros select",
        description=__doc__.splitlines()[0],
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", nargs="+", required=True, help="trained model folders to choose between")
    parser.add_argument("--out", required=True, help="folder that receives the winner's files and selection.json")
    parser.add_argument("--episodes", type=int, default=100, help="selection episodes per run (default 100)")
    parser.add_argument(
        "--checkpoints",
        action="store_true",
        help="also every checkpoint the runs wrote (<run>/checkpoints/step_*), each a candidate of its own",
    )
    parser.add_argument(
        "--screen-episodes",
        type=int,
        default=0,
        help="run every candidate on this many of the --episodes first; only the best --finalists run the rest "
        "(default 0: every candidate runs all of them)",
    )
    parser.add_argument("--finalists", type=int, default=2, help="candidates that go on after screening (default 2)")
    parser.add_argument(
        "--seed",
        type=int,
        default=HELDOUT_OFFSETS,
        help=f"offset into the evaluation seeds (default {HELDOUT_OFFSETS:,}: none of the held-out figure's)",
    )
    parser.add_argument(
        "--instructions",
        default="train",
        help="phrasings, as for vla-ros eval (default train: the held-out ones stay for the final figure)",
    )
    parser.add_argument("--backend", default="onnx", choices=("torch", "onnx"))
    parser.add_argument(
        "--robot",
        default="",
        metavar="PROFILE",
        help="robot profile to simulate (a name or a YAML file); default: the one each run records, else the bundled "
        "arm",
    )
    parser.add_argument("--max-episode-s", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=1, help="episodes run in this many processes at once")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.workers < 1 or args.finalists < 1:
        parser.error("--episodes, --workers and --finalists must be at least 1")
    if not 0 <= args.screen_episodes < args.episodes:
        parser.error(f"--screen-episodes must be in [0, --episodes) = [0, {args.episodes}); 0 screens nothing")
    runs = [Path(r) for r in args.runs]
    if len({r.resolve() for r in runs}) != len(runs):
        parser.error("--runs names a folder twice")
    out = Path(args.out)
    reason = check_out_folder(out, runs)
    pool, same_weights = candidates(runs, args.checkpoints) if not reason else (runs, {})
    for run in pool:
        reason = reason or check_run(run, args.backend, args.robot or None)
    if reason:
        parser.error(reason)
    from vla_ros.evaluation.closed_loop import EvalConfig
    from vla_ros.evaluation.run_eval import evaluate, load_templates

    try:
        templates = load_templates(args.instructions)
    except (OSError, ValueError) as exc:
        parser.error(f"--instructions: {exc}")
    if args.seed < HELDOUT_OFFSETS:
        print(
            f"warning: --seed {args.seed} selects on the held-out figure's seeds (offsets below {HELDOUT_OFFSETS:,}); "
            f"that figure will then flatter the winner",
            file=sys.stderr,
        )

    for folder, twin in same_weights.items():
        print(f"note: {folder} has the weights of {twin}; judged once, as {twin}", file=sys.stderr)
    # screening only pays when it leaves someone out
    screen = args.screen_episodes if len(pool) > args.finalists else 0
    staging = out.parent / f".{out.name}.selecting"
    folders = {str(run): staging / f"{i}-{label(run)}" for i, run in enumerate(pool)}
    shutil.rmtree(staging, ignore_errors=True)

    def run_round(members: list[Path], episodes: int, seed: int, suffix: str) -> dict:
        figures = {}
        for i, run in enumerate(members):
            if not args.json:
                print(f"[{i + 1}/{len(members)}] {run}: {episodes} episodes from seed offset {seed:,}")
            figures[str(run)] = evaluate(
                str(run),
                episodes,
                seed,
                templates,
                args.backend,
                "cpu",
                0,
                Path(str(folders[str(run)]) + suffix),
                progress=not args.json,
                config=EvalConfig(max_episode_s=args.max_episode_s),
                workers=args.workers,
                robot=args.robot or None,
            )
        return figures

    summaries = run_round(pool, screen or args.episodes, args.seed, "")
    finalists = [Path(name) for name in rank_runs(summaries)[: args.finalists]] if screen else pool
    if screen:
        run_round(finalists, args.episodes - screen, args.seed + screen, ".rest")
        for run in finalists:
            summaries[str(run)] = combine_rounds(folders[str(run)], Path(str(folders[str(run)]) + ".rest"))
    # the finalists by their figures over every episode, then the screened-out by their screening figures;
    # equal figures keep the order the candidates were listed in
    order = rank_runs({str(r): summaries[str(r)] for r in pool if r in finalists})
    order += rank_runs({name: v for name, v in summaries.items() if name not in order})
    winner = Path(order[0])
    copied = install(winner, out)
    staging.rename(out / "selection")  # every run's per-episode results, beside the winner
    keys = (
        "success_rate",
        "success_by_color",
        "filter_pass_unmodified_pct",
        "filter_rejected_pct",
        "mean_time_to_success_s",
        "wrong_cup",
        "episodes",
        "wall_s",
    )
    report = {
        "chosen": str(winner),
        "order": order,
        "runs": {
            name: {
                **{k: summaries[name].get(k) for k in keys},
                "screened_out": Path(name) not in finalists,
                "training": training_figures(Path(name)),
            }
            for name in order
        },
        "same_weights": same_weights,
        "episodes": args.episodes,
        "screen_episodes": screen,
        "finalists": len(finalists) if screen else None,
        "seeds": summaries[order[0]]["seeds"],
        "instructions": args.instructions,
        "backend": args.backend,
        "files": copied,
        "out": str(out),
    }
    (out / SELECTION_FILE).write_text(json.dumps(report, indent=1))
    if not args.json:
        for name in order:
            r = report["runs"][name]
            print(
                f"  {'chosen' if name == order[0] else '      '} {name}: success {r['success_rate']} over "
                f"{r['episodes']}"
                f"{' (screened out)' if r['screened_out'] else ''}, unmodified {r['filter_pass_unmodified_pct']} %, "
                f"val loss {r['training'].get('final_val_loss')}"
            )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
