"""`vla-ros select` keeps the run that succeeds in the closed loop, on selection seeds, and refuses what it
cannot judge before any episode runs."""

import json
from pathlib import Path

import pytest
import torch

from vla_ros.evaluation.select_run import candidates, rank_runs
from vla_ros.evaluation.select_run import main as select_main
from vla_ros.model.io import load_config, load_model, save_model, sha256_file
from vla_ros.model.model import VLATransformer

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "vla_cups"
# Simulated seconds per episode: the shipped model lifts on the selection seeds 2,000,000-3 in 2.9-3.4 s (the
# in-process episodes are deterministic per seed); an untrained model, which never lifts, runs to the limit.
MAX_EPISODE_S = 6.0


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A random-weight model of the shipped model's shape: it never lifts a cup."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("select") / "untrained"
    save_model(VLATransformer(load_config(SHIPPED)), folder)
    return folder


def test_runs_rank_by_success_then_unmodified_chunks_then_time():
    def s(rate, unmodified, seconds):
        return {"success_rate": rate, "filter_pass_unmodified_pct": unmodified, "mean_time_to_success_s": seconds}

    assert rank_runs({"a": s(0.70, 99.0, 2.0), "b": s(0.80, 50.0, 9.0)}) == ["b", "a"]
    assert rank_runs({"a": s(0.80, 90.0, 2.0), "b": s(0.80, 95.0, 9.0)}) == ["b", "a"]
    assert rank_runs({"a": s(0.80, 95.0, 4.0), "b": s(0.80, 95.0, 3.0)}) == ["b", "a"]
    # no success: no time; no chunks: no share; both rank after a run that has them, equal keys keep the order
    assert rank_runs({"a": s(0.0, None, None), "b": s(0.0, 10.0, None), "c": s(0.0, None, None)}) == ["b", "a", "c"]


def test_select_keeps_the_run_that_lifts_cups_and_reports_every_run(untrained, tmp_path, capsys):
    torch.set_num_threads(1)
    out = tmp_path / "chosen"
    # the untrained run is given first: the choice is not the order
    rc = select_main(
        [
            "--runs",
            str(untrained),
            str(SHIPPED),
            "--out",
            str(out),
            "--episodes",
            "4",
            "--backend",
            "torch",
            "--json",
            "--max-episode-s",
            str(MAX_EPISODE_S),
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["chosen"] == str(SHIPPED) and report["order"] == [str(SHIPPED), str(untrained)]
    shipped, bare = report["runs"][str(SHIPPED)], report["runs"][str(untrained)]
    assert shipped["success_rate"] > 0 and bare["success_rate"] == 0
    assert report["seeds"] == [2_000_000, 2_000_003] and report["instructions"] == "train"
    assert shipped["training"]["steps"] == json.loads((SHIPPED / "train_report.json").read_text())["steps"]
    assert bare["training"] == {}  # no report: no training figures, not a crash
    # the winner's files, byte for byte, and a loadable model; every run's episodes kept beside it
    for name in ("config.json", "model.safetensors", "model.onnx"):
        assert sha256_file(out / name) == sha256_file(SHIPPED / name)
    load_model(out)
    assert json.loads((out / "selection.json").read_text()) == report
    episodes = {
        p.parent.name: json.loads(p.read_text())["episodes"] for p in (out / "selection").glob("*/results.json")
    }
    assert sorted(episodes) == ["0-untrained", "1-vla_cups"]
    assert [e["seed"] for e in episodes["1-vla_cups"]] == [2_000_000, 2_000_001, 2_000_002, 2_000_003]
    assert sum(e["success"] for e in episodes["1-vla_cups"]) == round(4 * shipped["success_rate"])
    assert not any(p.name.endswith(".selecting") for p in tmp_path.iterdir())


def test_select_refuses_what_it_cannot_judge_before_running(untrained, tmp_path, capsys):
    def refused(*argv) -> str:
        with pytest.raises(SystemExit) as exc:
            select_main([*argv, "--episodes", "1"])
        assert exc.value.code == 2
        return capsys.readouterr().err

    assert "is one of the runs" in refused("--runs", str(untrained), "--out", str(untrained), "--backend", "torch")
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me")
    assert "holds something other than an earlier selection" in refused(
        "--runs", str(untrained), "--out", str(foreign), "--backend", "torch"
    )
    assert (foreign / "todo.txt").read_text() == "keep me"
    assert "model folder not found" in refused(
        "--runs", str(untrained), str(tmp_path / "missing"), "--out", str(tmp_path / "o"), "--backend", "torch"
    )
    # the default backend is the node's (ONNX): a folder without its export is refused with the command that makes it
    assert "vla-ros export-onnx" in refused("--runs", str(untrained), "--out", str(tmp_path / "o"))
    assert "names a folder twice" in refused("--runs", str(untrained), str(untrained), "--out", str(tmp_path / "o"))
    assert "template containing {color}" in refused(
        "--runs", str(SHIPPED), "--out", str(tmp_path / "o"), "--instructions", str(foreign / "todo.txt")
    )
    assert "--episodes, --workers and --finalists must be at least 1" in refused(
        "--runs", str(untrained), "--out", str(tmp_path / "o"), "--backend", "torch", "--workers", "0"
    )
    assert "--episodes, --workers and --finalists must be at least 1" in refused(
        "--runs", str(untrained), "--out", str(tmp_path / "o"), "--backend", "torch", "--finalists", "0"
    )
    # screening all of the episodes leaves none for the finalists; a negative count is no count
    for screen in ("1", "-1"):
        assert "--screen-episodes must be in [0, --episodes) = [0, 1)" in refused(
            "--runs", str(untrained), "--out", str(tmp_path / "o"), "--backend", "torch", "--screen-episodes", screen
        )
    assert not (tmp_path / "o").exists()


def test_selecting_on_the_held_out_seeds_is_warned_about(untrained, tmp_path, capsys):
    argv = ["--runs", str(untrained), "--episodes", "1", "--max-episode-s", "0.5", "--backend", "torch", "--json"]
    assert select_main([*argv, "--out", str(tmp_path / "a"), "--seed", "0"]) == 0
    assert "selects on the held-out figure's seeds" in capsys.readouterr().err
    assert select_main([*argv, "--out", str(tmp_path / "b")]) == 0  # the default seeds: no warning
    assert "held-out" not in capsys.readouterr().err
    assert json.loads((tmp_path / "a" / "selection.json").read_text())["seeds"] == [1_000_000, 1_000_000]


def test_every_command_of_make_model_is_accepted_by_its_verb(monkeypatch):
    """`make model` runs for 44 minutes; an option renamed in a verb must fail here, not at minute 40. Each
    vla-ros command of its recipe (as make expands it) is parsed by that verb's own parser, and nothing runs."""
    import argparse
    import re
    import shlex
    import shutil
    import subprocess

    from vla_ros.cli import VERBS

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    repo = Path(__file__).resolve().parents[1]
    recipe = subprocess.run(
        ["make", "-n", "-o", "setup", "model"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    recipe = recipe.replace("\\\n", " ")  # one command continued over lines is one command

    class Parsed(Exception):
        pass

    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise Parsed(original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    commands = re.findall(r"\.venv/bin/vla-ros ([a-z-]+) ([^&|;>\n]*)", recipe)
    parsed = {}
    for verb, rest in commands:
        with pytest.raises(Parsed) as got:
            VERBS[verb][0](shlex.split(rest))
        parsed.setdefault(verb, []).append(vars(got.value.args[0]))
    assert sorted(parsed) == ["collect", "eval", "select", "train"] and len(parsed["train"]) == 2
    assert sorted(t["seed"] for t in parsed["train"]) == [0, 1] and {t["lr"] for t in parsed["train"]} == {5e-4}
    assert {t["out"] for t in parsed["train"]} == set(parsed["select"][0]["runs"])
    # the runs' checkpoints are candidates too, screened on half of the selection episodes
    assert all(t["checkpoints"] for t in parsed["train"]) and parsed["select"][0]["checkpoints"]
    assert 0 < parsed["select"][0]["screen_episodes"] < parsed["select"][0]["episodes"]
    assert parsed["eval"][0]["model"] == parsed["select"][0]["out"] and parsed["eval"][0]["seed"] == 0


def run_with_checkpoints(root: Path, final: Path, checkpoints: dict[int, Path]) -> Path:
    """A run folder laid out as `vla-ros train --checkpoints` writes it: ``final``'s files at the top and each
    model of ``checkpoints`` under checkpoints/step_<n>/ (plus a folder that is not a checkpoint)."""
    import shutil

    run = root / "run"
    shutil.copytree(final, run)
    for step, model in checkpoints.items():
        shutil.copytree(model, run / "checkpoints" / f"step_{step:05d}")  # as training.train names them
        (run / "checkpoints" / f"step_{step:05d}" / "train_report.json").write_text(
            json.dumps({"checkpoint": True, "steps": step})
        )
    (run / "checkpoints" / "step_notes").mkdir()
    return run


def test_checkpoints_are_candidates_after_the_runs_and_repeated_weights_only_once(untrained, tmp_path):
    other = tmp_path / "other"
    torch.manual_seed(1)
    save_model(VLATransformer(load_config(SHIPPED)), other)
    # step 30 holds the run's own final weights (a checkpoint at the last step): listed once, as the run
    run = run_with_checkpoints(tmp_path, untrained, {10: other, 20: SHIPPED, 30: untrained})
    ck = run / "checkpoints"
    assert candidates([run], with_checkpoints=False) == ([run], {})
    assert candidates([run], with_checkpoints=True) == (
        [run, ck / "step_00020", ck / "step_00010"],
        {str(ck / "step_00030"): str(run)},
    )
    # a checkpoint with the weights of another run given before it is that run: not judged twice, and said so
    assert candidates([SHIPPED, run], with_checkpoints=True) == (
        [SHIPPED, run, ck / "step_00010"],
        {str(ck / "step_00030"): str(run), str(ck / "step_00020"): str(SHIPPED)},
    )


def test_screening_sends_the_best_candidates_on_and_judges_them_over_every_episode(untrained, tmp_path, capsys):
    torch.set_num_threads(1)
    other = tmp_path / "other"
    torch.manual_seed(1)
    save_model(VLATransformer(load_config(SHIPPED)), other)
    run = run_with_checkpoints(tmp_path, other, {5: SHIPPED})  # the good weights are a checkpoint
    checkpoint = run / "checkpoints" / "step_00005"
    out = tmp_path / "chosen"
    rc = select_main(
        [
            "--runs",
            str(untrained),
            str(run),
            "--checkpoints",
            "--episodes",
            "4",
            "--screen-episodes",
            "2",
            "--finalists",
            "2",
            "--out",
            str(out),
            "--backend",
            "torch",
            "--json",
            "--max-episode-s",
            str(MAX_EPISODE_S),
        ]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["chosen"] == str(checkpoint) and report["screen_episodes"] == 2 and report["finalists"] == 2
    assert report["same_weights"] == {}
    assert set(report["order"]) == {str(untrained), str(run), str(checkpoint)}
    figures = report["runs"]
    # two finalists over all four episodes, the screened-out one over the first two, listed last
    assert [figures[name]["episodes"] for name in report["order"]] == [4, 4, 2]
    assert [figures[name]["screened_out"] for name in report["order"]] == [False, False, True]
    assert figures[str(checkpoint)]["training"] == {"checkpoint": True, "steps": 5}
    for name in ("config.json", "model.safetensors", "model.onnx"):
        assert sha256_file(out / name) == sha256_file(SHIPPED / name)
    # each finalist's episodes are one record over seeds 2,000,000-3, its figure computed over all of them
    kept = {p.parent.name: json.loads(p.read_text()) for p in (out / "selection").glob("*/results.json")}
    assert sorted(kept) == ["0-untrained", "1-run", "2-run-step_00005"]
    episodes = kept["2-run-step_00005"]["episodes"]
    assert [e["seed"] for e in episodes] == [2_000_000, 2_000_001, 2_000_002, 2_000_003]
    assert (
        figures[str(checkpoint)]["success_rate"]
        == kept["2-run-step_00005"]["summary"]["success_rate"]
        == round(sum(e["success"] for e in episodes) / 4, 3)
    )
    (screened,) = [name for name in report["order"] if figures[name]["screened_out"]]
    assert len(kept[{str(untrained): "0-untrained", str(run): "1-run"}[screened]]["episodes"]) == 2
    assert not list((out / "selection").glob("*.rest")) and not any(
        p.name.endswith(".selecting") for p in tmp_path.iterdir()
    )


def test_a_checkpoint_with_the_weights_of_its_run_is_reported_not_judged_again(untrained, tmp_path, capsys):
    run = run_with_checkpoints(tmp_path, untrained, {30: untrained})
    out = tmp_path / "chosen"
    assert (
        select_main(
            [
                "--runs",
                str(run),
                "--checkpoints",
                "--episodes",
                "1",
                "--max-episode-s",
                "0.5",
                "--out",
                str(out),
                "--backend",
                "torch",
                "--json",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    twin = str(run / "checkpoints" / "step_00030")
    assert f"note: {twin} has the weights of {run}; judged once" in captured.err
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert report["order"] == [str(run)] and report["same_weights"] == {twin: str(run)}
