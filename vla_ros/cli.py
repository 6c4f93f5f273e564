"""``vla-ros <verb>``: one command for everything that is not a node (like ``ros2 <verb>``).

Verbs: ``launch`` (run a ROS 2 XML launch file without ros2 launch), ``demo`` (the simulated demo),
``demo-two-hosts`` (the demo split over two simulated computers),
``record``/``bag``/``collect``/``train``/``eval``/``select``
(data and training), ``bench`` (benchmarks), ``params`` (parameter tables of every node, as in the README).
Each verb's ``--help`` ends with a runnable example.
"""

from __future__ import annotations

import argparse
import sys

# Each benchmark is a module with ``main(argv) -> int`` and its own argument parser.
BENCHMARKS = {
    "sim": "vla_ros.bench.sim_bench",
    "tokens": "vla_ros.bench.tokens_bench",
    "policy": "vla_ros.bench.policy_bench",
    "safety": "vla_ros.bench.safety_bench",
    "controller": "vla_ros.bench.controller_bench",
    "faults": "vla_ros.bench.faults",
}


def _bench(argv: list[str]) -> int:
    if not argv or argv[0] not in BENCHMARKS:
        print(
            "usage: vla-ros bench {" + ",".join(BENCHMARKS) + "} [--json] [options]\n"
            "Benchmarks; the last line of output is a JSON object.\n"
            "example: vla-ros bench tokens --json"
        )
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    import importlib

    return importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:])


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


def _launch(argv: list[str]) -> int:
    from vla_ros.launch_runner import main as launch_main

    return launch_main(argv)


def _record(argv: list[str]) -> int:
    from vla_ros.tools import record

    return record.main(argv)


def _collect(argv: list[str]) -> int:
    from vla_ros.tools import collect

    return collect.main(argv)


def _bag(argv: list[str]) -> int:
    from vla_ros.tools import bag

    return bag.main(argv)


def _export_onnx(argv: list[str]) -> int:
    from vla_ros.model import export_onnx

    return export_onnx.main(argv)


def _train(argv: list[str]) -> int:
    from vla_ros.training import train

    return train.main(argv)


def _eval(argv: list[str]) -> int:
    from vla_ros.evaluation import run_eval

    return run_eval.main(argv)


def _select(argv: list[str]) -> int:
    from vla_ros.evaluation import select_run

    return select_run.main(argv)


def _attention(argv: list[str]) -> int:
    from vla_ros.evaluation import attention

    return attention.main(argv)


def _demo(argv: list[str]) -> int:
    from vla_ros.tools import demo

    return demo.main(argv)


def _demo_two_hosts(argv: list[str]) -> int:
    from vla_ros.tools import two_hosts

    return two_hosts.main(argv)


VERBS = {
    "launch": (_launch, "run a ROS 2 XML launch file (pip mode): vla-ros launch vla_ros sim.launch.xml seed:=3"),
    "demo": (_demo, "the simulated demo: vla-ros demo --color red"),
    "demo-two-hosts": (
        _demo_two_hosts,
        "policy on a GPU host, robot side on another (namespaces, root): vla-ros demo-two-hosts",
    ),
    "record": (_record, "record topics to a bag folder: vla-ros record --use-sim-time --duration 5 --out runs/ep"),
    "bag": (_bag, "what a bag holds: vla-ros bag info runs/ep --json"),
    "collect": (_collect, "expert demonstrations as MCAP: vla-ros collect --episodes 20 --out runs/demos"),
    "train": (_train, "train the policy: vla-ros train --data runs/demos --out runs/vla_cups --task cups --steps 3600"),
    "eval": (_eval, "closed-loop success rate in the sim: vla-ros eval --model models/vla_cups --episodes 50 --json"),
    "select": (
        _select,
        "keep the best of several runs, on seeds of their own: vla-ros select --runs runs/s0 runs/s1 --out "
        "runs/vla_cups",
    ),
    "attention": (_attention, "where the colour word looks: vla-ros attention --model models/vla_cups --json"),
    "export-onnx": (
        _export_onnx,
        "export a model folder to ONNX and check parity: vla-ros export-onnx models/vla_cups",
    ),
    "bench": (_bench, "benchmarks (sim, tokens, policy, safety, controller, faults): vla-ros bench sim --json"),
    "params": (_params, "node parameter tables (docs/parameters.md): vla-ros params --write"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in VERBS:
        print("usage: vla-ros <verb> [args]\n\nverbs:")
        for name, (_fn, text) in VERBS.items():
            print(f"  {name:<12} {text}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    fn, _text = VERBS[argv[0]]
    return fn(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
