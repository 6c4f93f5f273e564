"""``vla-ros <verb>``: one command for everything that is not a node (like ``ros2 <verb>``).

Verbs: ``launch`` (run a ROS 2 XML launch file without ros2 launch), ``demo`` (the simulated demo),
``demo-two-hosts`` (the demo split over two simulated computers),
``record``/``bag``/``collect``/``train``/``eval``/``select``
(data and training), ``bench`` (benchmarks), ``params`` (parameter tables of every node, as in the README),
``robot check`` (will a URDF or robot profile run, and what to fix).
Each verb's ``--help`` ends with a runnable example.
"""

from __future__ import annotations

import argparse
import json
import sys

# Each benchmark is a module with ``main(argv) -> int`` and its own argument parser.
BENCHMARKS = {
    "sim": "vla_ros.bench.sim_bench",
    "tokens": "vla_ros.bench.tokens_bench",
    "policy": "vla_ros.bench.policy_bench",
    "safety": "vla_ros.bench.safety_bench",
    "mesh": "vla_ros.bench.mesh_bench",
    "controller": "vla_ros.bench.controller_bench",
    "faults": "vla_ros.bench.faults",
    "latency": "vla_ros.bench.latency_bench",
}


def print_result(result: dict, json_only: bool, width: int) -> None:
    """A verb's result: unless ``json_only`` (its ``--json``), one ``key: value`` line per entry, the keys
    right-aligned to ``width``; then the whole of it as one JSON line, always the last line of output."""
    if not json_only:
        for key, value in result.items():
            print(f"{key:>{width}}: {value}")
    print(json.dumps(result))


def _usage(text: str, argv: list[str]) -> int:
    """Print ``text``; exit status 0 when help was asked for, 2 for a missing or unknown verb."""
    print(text)
    return 0 if argv and argv[0] in ("-h", "--help") else 2


def _run_module(module: str):
    """The verb that runs ``module``'s ``main(argv) -> int``, importing the module only when it runs."""

    def run(argv: list[str]) -> int:
        import importlib

        return importlib.import_module(module).main(argv)

    return run


def _bench(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        return _usage(
            "usage: vla-ros bench {" + ",".join(BENCHMARKS) + "} [--json] [options]\n"
            "Benchmarks; the last line of output is a JSON object.\n"
            "example: vla-ros bench tokens --json",
            argv,
        )
    return _run_module(BENCHMARKS[argv[0]])(argv[1:])


# Each robot tool is a module with ``main(argv) -> int`` and its own argument parser.
ROBOT_TOOLS = {"check": "vla_ros.tools.robot_check"}


def _robot(argv: list[str]) -> int:
    if not argv or argv[0] not in ROBOT_TOOLS:
        return _usage(
            "usage: vla-ros robot check URDF|PROFILE [--json] [--srdf FILE] [--package-path [NAME=]FOLDER]\n"
            "                         [--write-profile FILE] [--write-controller-config FILE]\n"
            "Check a robot description or profile as the nodes load it; write a starter profile.\n"
            "example: vla-ros robot check fr3.urdf --srdf fr3.srdf --package-path fr3=. --write-profile fr3.yaml",
            argv,
        )
    return _run_module(ROBOT_TOOLS[argv[0]])(argv[1:])


def _params(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros params",
        description="Print the parameter table of every node as Markdown (docs/parameters.md is generated from here).",
        epilog="example: vla-ros params --write",
    )
    parser.add_argument(
        "--write", action="store_true", help="write docs/parameters.md in the source tree instead of printing"
    )
    args = parser.parse_args(argv)
    from vla_ros.tools.param_docs import DOC_PATH, all_tables, document

    if args.write:
        DOC_PATH.write_text(document())
        print(f"wrote {DOC_PATH}")
    else:
        print(all_tables())
    return 0


VERBS = {
    "launch": (
        _run_module("vla_ros.launch_runner"),
        "run a ROS 2 XML launch file (pip mode): vla-ros launch vla_ros sim.launch.xml seed:=3",
    ),
    "demo": (_run_module("vla_ros.tools.demo"), "the simulated demo: vla-ros demo --color red"),
    "demo-two-hosts": (
        _run_module("vla_ros.tools.two_hosts"),
        "policy on a GPU host, robot side on another (namespaces, root): vla-ros demo-two-hosts",
    ),
    "record": (
        _run_module("vla_ros.tools.record"),
        "record topics to a bag folder: vla-ros record --use-sim-time --duration 5 --out runs/ep",
    ),
    "bag": (_run_module("vla_ros.tools.bag"), "what a bag holds: vla-ros bag info runs/ep --json"),
    "collect": (
        _run_module("vla_ros.tools.collect"),
        "expert demonstrations as MCAP: vla-ros collect --episodes 20 --out runs/demos",
    ),
    "train": (
        _run_module("vla_ros.training.train"),
        "train the policy: vla-ros train --data runs/demos --out runs/vla_cups --task cups --steps 3600",
    ),
    "eval": (
        _run_module("vla_ros.evaluation.run_eval"),
        "closed-loop success rate in the sim: vla-ros eval --model models/vla_cups --episodes 50 --json",
    ),
    "select": (
        _run_module("vla_ros.evaluation.select_run"),
        "keep the best of several runs, on seeds of their own: vla-ros select --runs runs/s0 runs/s1 --out "
        "runs/vla_cups",
    ),
    "grounding": (
        _run_module("vla_ros.tools.grounding"),
        "the instruction check of a model: vla-ros grounding check --model vla_cups 'pick up the yellow cup'",
    ),
    "attention": (
        _run_module("vla_ros.evaluation.attention"),
        "where the colour word looks: vla-ros attention --model models/vla_cups --json",
    ),
    "export-onnx": (
        _run_module("vla_ros.model.export_onnx"),
        "export a model folder to ONNX and check parity: vla-ros export-onnx models/vla_cups",
    ),
    "bench": (
        _bench,
        "benchmarks (sim, tokens, policy, safety, mesh, controller, faults, latency): vla-ros bench sim --json",
    ),
    "robot": (
        _robot,
        "check a URDF or robot profile, write a starter profile: vla-ros robot check my.urdf --write-profile my.yaml",
    ),
    "params": (_params, "node parameter tables (docs/parameters.md): vla-ros params --write"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in VERBS:
        verbs = "\n".join(f"  {name:<12} {text}" for name, (_fn, text) in VERBS.items())
        return _usage("usage: vla-ros <verb> [args]\n\nverbs:\n" + verbs, argv)
    fn, _text = VERBS[argv[0]]
    return fn(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
