"""``vla-ros eval --live``: two short episodes of the shipped model through the launched graph (sim, policy,
safety filter and controller processes, DDS, simulated time at real time). Checks the JSON the command
prints (every key of the in-process evaluation plus the live figures, with values that fit together), not
the success rate: two 2-second episodes on a loaded CI machine say nothing about skill."""

import json
import subprocess
import sys

import pytest

from ros_helpers import REPO
from vla_ros.evaluation.run_eval import load_templates
from vla_ros.sim.tasks import EVAL_SEED_START, episode_task

IN_PROCESS_KEYS = {"success_rate", "success_by_color", "mean_time_to_success_s", "safety_interventions", "safety_verdicts",
                   "wrong_cup", "mean_distance_reduction", "episodes", "seeds", "model", "backend", "wall_s", "load_avg_1min",
                   "success_by_phrasing", "filter_pass_unmodified_pct", "filter_rejected_pct"}
LIVE_KEYS = {"latency_ms_p50", "latency_ms_p99", "latency_chunks", "joint_msgs_dropped_pct", "image_msgs_dropped_pct",
             "filter_pass_unmodified_pct", "controller_period_err_ms_p99", "real_time_factor", "real_time_factor_achieved"}


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    out = tmp_path_factory.mktemp("live_eval")
    cmd = [sys.executable, "-m", "vla_ros.cli", "eval", "--live", "--episodes", "2", "--seed", "3", "--max-episode-s", "2",
           "--out", str(out), "--json"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    graph_log = (out / "graph.log").read_text()[-3000:] if (out / "graph.log").is_file() else ""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:] + graph_log
    return json.loads(proc.stdout.strip().splitlines()[-1]), out, graph_log


def test_the_live_json_has_the_in_process_keys_and_the_live_figures(live):
    summary, _, _ = live
    assert IN_PROCESS_KEYS | LIVE_KEYS <= set(summary), sorted(IN_PROCESS_KEYS | LIVE_KEYS - set(summary))
    assert summary["mode"] == "live" and summary["backend"] == "onnx" and summary["episodes"] == 2
    assert summary["seeds"] == [EVAL_SEED_START + 3, EVAL_SEED_START + 4]
    assert summary["success_rate"] in (0.0, 0.5, 1.0)
    assert set(summary["success_by_color"]) == {"red", "green", "blue"}
    assert sum(v["episodes"] for v in summary["success_by_phrasing"].values()) == 2
    assert set(summary["success_by_phrasing"]) <= set(load_templates(None))
    assert summary["real_time_factor"] == 1.0 and summary["real_time_factor_achieved"] > 0.0


def test_the_live_figures_fit_together(live):
    summary, _, _ = live
    for source, rate_hz in (("joint_msgs", 100), ("image_msgs", 30)):
        counts = summary[source]
        # at least the two episodes' worth of simulated time was received (the run spans more)
        assert counts["received"] >= 0.5 * rate_hz * 2 * 2.0, (source, counts)
        assert counts["dropped"] == counts["lost"] + counts["rejected"] + counts["unused"]
        pct = summary[source.replace("_msgs", "_msgs_dropped_pct")]
        assert pct == pytest.approx(100 * counts["dropped"] / (counts["received"] + counts["lost"]), abs=1e-3)
    verdicts = summary["safety_verdicts"]
    assert set(verdicts) == {"pass", "modified", "truncated", "rejected"} and all(v >= 0 for v in verdicts.values())
    assert summary["safety_interventions"] == sum(verdicts.values()) - verdicts["pass"]
    total = sum(verdicts.values())
    if total:
        assert summary["filter_pass_unmodified_pct"] == pytest.approx(100 * verdicts["pass"] / total, abs=0.01)
    assert summary["policy_ticks"] >= 1
    if summary["latency_chunks"]:
        # stamps are observation times, so a chunk arrives after its stamp, within the filter's age limit
        assert 0.0 <= summary["latency_ms_p50"] <= summary["latency_ms_p99"] < 1000.0
    assert summary["controller_period_err_ms_p99"] is not None and summary["controller_period_err_ms_p99"] >= 0.0


def test_the_episodes_are_the_in_process_evaluations_episodes(live):
    summary, out, _ = live
    episodes = json.loads((out / "results.json").read_text())["episodes"]
    templates = load_templates(None)
    assert [e["seed"] for e in episodes] == summary["seeds"]
    for e in episodes:
        color, instruction = episode_task(e["seed"], templates)
        assert (e["color"], e["instruction"]) == (color, instruction)
        assert 0.0 < e["initial_target_distance_m"] < 1.0 and 0.0 <= e["min_target_distance_m"] <= e["initial_target_distance_m"]
    assert sum(e["chunks"] for e in episodes) == summary["latency_chunks"]
    assert episodes[1]["episode"] == episodes[0]["episode"] + 1  # one reset per episode, through the sim's service
