"""``vla-ros bench controller`` runs the real node on wall time and ends with the JSON line (short run)."""

import json
import sys

from vla_ros.bench import controller_bench


def test_bench_reports_idle_and_loaded_loop_figures_as_the_last_line(capsys):
    sleeper = f"{sys.executable} -c 'import time; time.sleep(60)'"
    assert controller_bench.main(["--json", "--seconds", "1", "--warmup", "0.5", "--load-cmd", sleeper, "--no-blend"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    for phase in ("idle", "loaded"):
        figures = result[phase]
        for key in ("period_err_ms_p50", "period_err_ms_p99", "overruns", "cpu_pct"):
            assert key in figures, (phase, key)
        assert figures["cycles"] == 100  # the window holds exactly the measured cycles
        assert 9.0 < figures["period_ms_mean"] < 11.0 and figures["cpu_pct"] > 0.0
        assert 0.0 <= figures["steal_pct"] <= 100.0
        # inline mode counts callbacks that ran into the busy-wait; over 100 cycles of a quiet rig, few if any
        assert 0 <= figures["late_callbacks"] <= 10 and figures["skipped_cycles"] >= 0
    assert result["commands_received"] > 100  # the node really ran its loop against the rig
    assert result["clock"] == "wall" and result["seconds"] == 1.0
    assert result["loop_mode"] == "inline" and result["load"] == "cmd"  # auto on wall time: cycles and callbacks in one thread


def test_bench_help_has_a_runnable_example(capsys):
    try:
        controller_bench.main(["--help"])
    except SystemExit as done:
        assert done.code == 0
    text = capsys.readouterr().out
    assert "example: vla-ros bench controller" in text and "--load-cmd" in text and "--load {policy,torch}" in text
