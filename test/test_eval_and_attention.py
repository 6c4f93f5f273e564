"""`vla-ros eval` runs closed-loop episodes through the node cores, deterministically per seed, and
`vla-ros attention` measures grounding; both on a small random-weight model (behaviour, not skill)."""

import json
from collections import Counter

import numpy as np
import pytest
import torch

from vla_ros.evaluation.attention import cup_patches
from vla_ros.evaluation.attention import run as attention_run
from vla_ros.evaluation.closed_loop import ClosedLoop, EvalConfig, grasp_offset
from vla_ros.evaluation.run_eval import evaluate, load_templates
from vla_ros.evaluation.run_eval import main as eval_main
from vla_ros.evaluation.tables import grasp_summary
from vla_ros.model.config import tiny_config
from vla_ros.model.io import save_model
from vla_ros.model.model import VLATransformer
from vla_ros.safety import REASONS
from vla_ros.sim import ArmSim

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("eval") / "tiny"
    save_model(VLATransformer(tiny_config(chunk_length=8, chunk_rate_hz=20.0, max_text_tokens=16)), folder)
    return folder


def test_closed_loop_is_deterministic_per_seed_and_counts_what_the_filter_did(tiny_model):
    torch.set_num_threads(1)
    loop = ClosedLoop(tiny_model, config=EvalConfig(max_episode_s=1.5))
    a = loop.run_episode(1_000_003, "pick up the red cup", "red")
    b = loop.run_episode(1_000_003, "pick up the red cup", "red")
    c = loop.run_episode(1_000_004, "pick up the red cup", "red")
    loop.close()
    assert a.chunks == b.chunks == pytest.approx(1.5 * 10, abs=2)  # 10 Hz policy ticks
    assert a.verdicts == b.verdicts and sum(a.verdicts.values()) == a.chunks
    assert (
        a.min_target_distance_m == b.min_target_distance_m
        and a.initial_target_distance_m == b.initial_target_distance_m
    )
    assert a.initial_target_distance_m != c.initial_target_distance_m  # another seed, another layout
    assert not a.success


def test_grasp_offsets_split_along_and_across_the_reach():
    cup = np.array([0.3, 0.4, 0.045])  # the reach points along (0.6, 0.8)
    along = grasp_offset(1.0, cup + [0.6 * 0.02, 0.8 * 0.02, 0.01], cup)
    assert along["along_reach_m"] == pytest.approx(0.02) and along["across_reach_m"] == pytest.approx(0.0, abs=1e-4)
    across = grasp_offset(1.0, cup + [-0.8 * 0.03, 0.6 * 0.03, 0.0], cup)  # to the left seen from the base
    assert across["across_reach_m"] == pytest.approx(0.03) and across["along_reach_m"] == pytest.approx(0.0, abs=1e-4)
    assert (across["x_m"], across["y_m"]) == (pytest.approx(-0.024), pytest.approx(0.018))
    rows = [
        {"success": True, "closes": [{"along_reach_m": 0.01, "across_reach_m": -0.002}]},
        {
            "success": False,
            "closes": [{"along_reach_m": -0.04, "across_reach_m": 0.01}, {"along_reach_m": 0.0, "across_reach_m": 0.0}],
        },
        {"success": False, "closes": []},
    ]
    summary = grasp_summary(rows)
    assert summary["closes_per_episode"] == 1.0
    assert summary["first_close_offset"] == {"along_reach_cm": 2.5, "across_reach_cm": 0.6, "episodes": 2}
    assert summary["first_close_offset_failed"] == {"along_reach_cm": 4.0, "across_reach_cm": 1.0, "episodes": 1}
    assert grasp_summary([{"success": True, "closes": []}])["first_close_offset"] is None
    assert summary["first_close_motion"] is None  # rows written before the hand's motion was recorded


def test_the_hand_motion_at_a_close_is_summarised_per_first_close():
    from vla_ros.evaluation.closed_loop import hand_speed

    path = [(1.0 + 0.01 * i, np.array([0.4 + 0.003 * i, 0.1 + 0.004 * i, 0.08 - 0.002 * i])) for i in range(11)]
    v = hand_speed(path)  # 0.3 m/s and 0.4 m/s sideways, 0.2 m/s down
    assert v["hand_speed_xy_m_s"] == pytest.approx(0.5) and v["hand_speed_z_m_s"] == pytest.approx(-0.2)
    assert hand_speed(path[:1]) == {"hand_speed_xy_m_s": 0.0, "hand_speed_z_m_s": 0.0}

    def close(xy, z, lift, fingers):
        return {
            "along_reach_m": 0.0,
            "across_reach_m": 0.0,
            "hand_speed_xy_m_s": xy,
            "hand_speed_z_m_s": z,
            "lift_after_s": lift,
            "fingers_at_lift_m": fingers,
        }

    rows = [
        {"success": True, "closes": [close(0.0, 0.0, 0.77, 0.0285)]},
        {"success": True, "closes": [close(0.02, -0.01, 0.6, 0.0335), close(0.5, 0.5, None, None)]},
        {"success": False, "closes": [close(0.04, -0.03, None, None)]},
    ]
    s = grasp_summary(rows)
    assert s["first_close_motion"] == {
        "hand_speed_xy_cm_s": 2.0,
        "hand_speed_z_cm_s": -1.0,
        "lift_after_s": 0.685,
        "fingers_at_lift_mm": 31.0,
        "episodes": 3,
        "lifted_after_close": 2,
    }
    assert s["first_close_motion_failed"] == {
        "hand_speed_xy_cm_s": 4.0,
        "hand_speed_z_cm_s": -3.0,
        "lift_after_s": None,
        "fingers_at_lift_mm": None,
        "episodes": 1,
        "lifted_after_close": 0,
    }


def test_the_evaluation_records_where_each_grasp_closes(tiny_model):
    """The expert drives through the evaluation's hook: its one grasp is recorded where it shut, on the cup;
    the recorded camera frames (what ``eval --videos`` writes) are the images the robot graph carried, in order."""
    from vla_ros.sim.expert import PickExpert

    class ExpertDrives:
        def start(self, sim, instruction, color):
            self.sim, self.color, self.expert, self.shut_at, self.frames = sim, color, PickExpert(), None, []

        def joint_state(self, stamp): ...

        def frame(self, rgb, stamp, camera):
            self.frames.append(rgb.copy())

        def status(self): ...

        def execute(self, q_policy):
            sim = self.sim
            q = self.expert.command(
                sim.time_s, sim.tcp_position(), sim.cup_positions()[self.color], sim.joint_positions()
            )
            if self.shut_at is None and q[-1] < 0.02:
                self.shut_at = (sim.time_s, sim.tcp_position() - sim.cup_positions()[self.color])
            return q, False

    torch.set_num_threads(1)
    loop = ClosedLoop(tiny_model, config=EvalConfig(max_episode_s=8.0, hold_after_success_s=1.0))
    hook = ExpertDrives()
    try:
        result = loop.run_episode(1_000_002, "pick up the green cup", "green", record=True, hook=hook)
    finally:
        loop.close()
    assert result.success and len(result.closes) == 1, result.closes
    # held for a second past the lift (eval --hold): the cup is still up at the end, the frames go on
    assert result.lifted == "green" and len(result.frames) >= round((result.time_to_success_s + 1.0) * 30) - 1
    # each 30 Hz frame as it was rendered: the arm moved between the first and the last
    assert len(result.frames) == len(hook.frames) > 30
    assert all(np.array_equal(a, b) for a, b in zip(result.frames, hook.frames))
    assert np.abs(result.frames[0].astype(int) - result.frames[-1]).mean() > 0.5
    close, (t, d) = result.closes[0], hook.shut_at
    assert close["t_s"] == pytest.approx(t, abs=1e-6)
    assert (close["x_m"], close["y_m"]) == (pytest.approx(d[0], abs=1e-4), pytest.approx(d[1], abs=1e-4))
    assert np.hypot(close["along_reach_m"], close["across_reach_m"]) == pytest.approx(np.hypot(d[0], d[1]), abs=2e-4)
    assert np.hypot(d[0], d[1]) < 0.015  # the expert closes within its 1.2 cm tolerance
    # on a still hand; it lifts close_s (0.9 s) after its close phase began, the fingers squeezing the cup
    assert close["hand_speed_xy_m_s"] < 0.005 and abs(close["hand_speed_z_m_s"]) < 0.005, close
    assert 0.6 < close["lift_after_s"] < 0.9 and 0.02 < close["fingers_at_lift_m"] < 0.035, close
    assert "_z" not in close


def test_the_evaluation_ticks_as_the_node_is_configured(tiny_model, tmp_path):
    """rate_hz and tick_on_frame come from config/policy.yaml, as the node reads them (the evaluation used to
    tick at 10 Hz whatever the file said); EvalConfig.policy_rate_hz (`--policy-rate`) overrides the rate."""
    import shutil

    import yaml

    from vla_ros.launch_runner.packages import find_package_share

    torch.set_num_threads(1)
    config = tmp_path / "config"
    shutil.copytree(find_package_share("vla_ros") / "config", config)
    policy = yaml.safe_load((config / "policy.yaml").read_text())
    params = policy["/**/policy"]["ros__parameters"]

    def chunks(rate_hz: float, tick_on_frame: bool, override: float | None = None) -> int:
        params.update(rate_hz=rate_hz, tick_on_frame=tick_on_frame)
        (config / "policy.yaml").write_text(yaml.safe_dump(policy))
        loop = ClosedLoop(tiny_model, config=EvalConfig(max_episode_s=2.0, policy_rate_hz=override), share_dir=tmp_path)
        try:
            return loop.run_episode(1_000_003, "pick up the red cup", "red").chunks
        finally:
            loop.close()

    assert chunks(4.0, False) == pytest.approx(2.0 * 4, abs=2)
    assert chunks(0.0, True) == pytest.approx(2.0 * 30, abs=3)  # one tick per frame (30 Hz camera)
    assert chunks(4.0, False, override=20.0) == pytest.approx(2.0 * 20, abs=2)
    with pytest.raises(ValueError, match="never ticks"):
        chunks(0.0, False)


def test_eval_summary_is_what_its_episodes_add_up_to(tiny_model, tmp_path):
    """Each figure of the summary recomputed here from the episodes it saved (results.json), whose colour and
    instruction are the ones the seed draws from the held-out phrasings; a random model lifts nothing."""
    from vla_ros.sim.tasks import HELDOUT_TEMPLATES, episode_task

    summary = evaluate(
        str(tiny_model),
        2,
        0,
        load_templates(None),
        backend="torch",
        out=tmp_path,
        progress=False,
        config=EvalConfig(max_episode_s=1.0),
    )
    assert "held_after_lift" not in summary  # only asked for with a hold
    episodes = json.loads((tmp_path / "results.json").read_text())["episodes"]
    assert [(e["seed"], e["color"], e["instruction"]) for e in episodes] == [
        (seed, *episode_task(seed, HELDOUT_TEMPLATES)) for seed in (1_000_000, 1_000_001)
    ]
    assert not any(e["success"] for e in episodes) and summary["success_rate"] == 0.0
    assert summary["success_by_color"] == {
        c: (0.0 if any(e["color"] == c for e in episodes) else None) for c in ("red", "green", "blue")
    }
    assert summary["mean_time_to_success_s"] is None
    all_verdicts = sum((Counter(e["verdicts"]) for e in episodes), Counter())
    assert summary["safety_verdicts"] == dict(all_verdicts) and sum(all_verdicts.values()) == sum(
        e["chunks"] for e in episodes
    )
    assert summary["safety_interventions"] == sum(all_verdicts.values()) - all_verdicts["pass"]
    assert summary["grasps"]["closes_per_episode"] == pytest.approx(np.mean([len(e["closes"]) for e in episodes]))
    held = evaluate(
        str(tiny_model),
        2,
        0,
        load_templates(None),
        backend="torch",
        progress=False,
        config=EvalConfig(max_episode_s=1.0, hold_after_success_s=0.5),
    )
    assert held["held_after_lift"] == {"hold_s": 0.5, "rate": 0.0, "dropped": 0}  # nothing lifted, nothing dropped
    assert summary["episodes"] == 2 and summary["seeds"] == [1_000_000, 1_000_001]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved["episodes"]) == 2
    # per phrasing: the held-out templates the episodes were asked with, and every episode counted once
    by_phrasing = summary["success_by_phrasing"]
    assert set(by_phrasing) <= set(load_templates(None)) and sum(v["episodes"] for v in by_phrasing.values()) == 2
    for e in saved["episodes"]:
        assert e["instruction"].replace(e["color"], "{color}", 1) in by_phrasing
    verdicts = summary["safety_verdicts"]
    total = sum(verdicts.values())
    assert total > 0 and summary["filter_pass_unmodified_pct"] == pytest.approx(
        100 * verdicts.get("pass", 0) / total, abs=0.01
    )
    assert summary["filter_rejected_pct"] == pytest.approx(100 * verdicts.get("rejected", 0) / total, abs=0.01)
    # every chunk the filter acted on has at least one finding code; a passed chunk has none
    findings = summary["safety_findings"]
    acted = total - verdicts.get("pass", 0)
    assert set(findings) <= set(REASONS) | {"position_clamped", "time_scaled", "past_points"}, findings
    assert (sum(findings.values()) >= acted) and (acted == 0 or findings), (findings, verdicts)
    assert findings == dict(sum((Counter(e["findings"]) for e in saved["episodes"]), Counter()))


def test_eval_in_worker_processes_gives_the_same_episodes(tiny_model, tmp_path):
    """Episodes spread over two processes (one torch thread each) match a single process with one thread."""
    torch.set_num_threads(1)
    cfg = EvalConfig(max_episode_s=1.0)
    one = evaluate(
        str(tiny_model),
        3,
        5,
        load_templates(None),
        backend="torch",
        out=tmp_path / "one",
        progress=False,
        config=cfg,
        workers=1,
    )
    two = evaluate(
        str(tiny_model),
        3,
        5,
        load_templates(None),
        backend="torch",
        out=tmp_path / "two",
        progress=False,
        config=cfg,
        workers=2,
    )
    assert (one["workers"], two["workers"]) == (1, 2) and one["episodes"] == two["episodes"] == 3
    eps = [json.loads((tmp_path / d / "results.json").read_text())["episodes"] for d in ("one", "two")]
    assert [e["seed"] for e in eps[1]] == [1_000_005, 1_000_006, 1_000_007]  # back in seed order
    for a, b in zip(*eps):
        assert (a["seed"], a["chunks"], a["verdicts"]) == (b["seed"], b["chunks"], b["verdicts"])
        assert a["min_target_distance_m"] == pytest.approx(b["min_target_distance_m"], abs=1e-6)


def test_a_model_that_cannot_load_is_one_error_not_endless_worker_restarts(tmp_path, capsys):
    """A pool initializer that raises would be restarted forever: the command line refuses the folder
    before any worker starts (exit 2, one line), and evaluate() itself raises the workers' error."""
    import signal

    def hung(*_):
        raise AssertionError("did not return: the pool kept restarting its workers")

    missing = tmp_path / "missing"
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(300)  # wall-clock guard only against a hang; it normally returns in seconds
    try:
        assert (
            eval_main(["--model", str(missing), "--episodes", "2", "--workers", "2", "--out", str(tmp_path / "x")]) == 2
        )
        err = capsys.readouterr().err
        assert (
            err.startswith("vla-ros eval: ") and "model folder not found" in err and len(err.strip().splitlines()) == 1
        ), err
        assert not (tmp_path / "x").exists()
        with pytest.raises(FileNotFoundError, match="model folder not found"):
            evaluate(str(missing), 2, 0, load_templates(None), backend="torch", progress=False, workers=2)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_an_out_of_range_temporal_ensemble_is_refused_on_the_command_line(tiny_model, tmp_path, capsys):
    """Before anything loads: exit 2 and one line naming the option and why (the node parameter's check)."""
    for bad, why in (
        ("-0.5", "is below the minimum 0.0"),
        ("11", "is above the maximum 10.0"),
        ("nan", "must be a number, got NaN"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            eval_main(
                [
                    "--model",
                    str(tiny_model),
                    "--episodes",
                    "1",
                    "--temporal-ensemble",
                    bad,
                    "--out",
                    str(tmp_path / "x"),
                ]
            )
        assert exit_info.value.code == 2
        assert "--temporal-ensemble: temporal_ensemble_s" in (err := capsys.readouterr().err) and why in err, err
    assert not (tmp_path / "x").exists()


def test_a_bad_hold_is_refused_on_the_command_line(tiny_model, tmp_path, capsys):
    """--hold outside [0, 5] s (or NaN), or with --live: exit 2 and one line, before anything loads."""
    for argv, why in (
        (["--hold", "-1"], "--hold must be in [0, 5]"),
        (["--hold", "nan"], "--hold must be in [0, 5]"),
        (["--hold", "6"], "--hold must be in [0, 5]"),
        (["--hold", "1", "--live"], "--hold do not apply"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            eval_main(["--model", str(tiny_model), "--episodes", "1", "--out", str(tmp_path / "x"), *argv])
        assert exit_info.value.code == 2
        assert why in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_instruction_files_must_hold_templates(tmp_path):
    from vla_ros.sim.tasks import HELDOUT_TEMPLATES, TRAIN_TEMPLATES, UNSEEN_TEMPLATES

    # the named lists: choosing between runs ("train") must never spend the held-out phrasings
    assert load_templates("train") == TRAIN_TEMPLATES and load_templates("heldout") == HELDOUT_TEMPLATES
    assert load_templates("unseen") == UNSEEN_TEMPLATES
    assert not set(load_templates("train")) & set(HELDOUT_TEMPLATES)
    good = tmp_path / "good.txt"
    good.write_text("# held out\nfetch the {color} cup\n")
    assert load_templates(str(good)) == ("fetch the {color} cup",)
    bad = tmp_path / "bad.txt"
    bad.write_text("fetch the cup\n")
    with pytest.raises(ValueError, match="color"):
        load_templates(str(bad))


def test_cup_patches_cover_where_the_cup_is_drawn():
    sim = ArmSim()
    sim.reset(1_000_000)
    rgb = sim.render()
    for color, channel in (("red", 0), ("green", 1), ("blue", 2)):
        cells = cup_patches(sim, color, (4, 6)).reshape(4, 6)
        # the cell with the most strongly coloured pixels is one of the cup's cells
        strong = (rgb[:, :, channel].astype(int) - rgb.astype(int).mean(axis=2)) > 60
        counts = np.add.reduceat(
            np.add.reduceat(strong, np.arange(0, 240, 60), axis=0), np.linspace(0, 320, 7)[:-1].astype(int), axis=1
        )
        r, c = np.unravel_index(np.argmax(counts), counts.shape)
        assert cells[r, c], (color, counts, cells.astype(int))
    sim.close()


def _spy(monkeypatch, module, name: str, calls: list) -> None:
    """Replace ``module.name`` by a wrapper that records (args, result) of every call, in order."""
    real = getattr(module, name)

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append((args, out))
        return out

    monkeypatch.setattr(module, name, spy)


def test_attention_reports_the_grounding_ratio_of_its_attention_weights_and_draws_a_panel_per_word(
    tmp_path, monkeypatch
):
    """The ratio recomputed here from the definition, on what the tool looked at: for each sampled frame,
    the attention weights of the newest frame's patches (layers, heads, words, patches) and the patches
    that cover the named cup, with the colour word found here in the instruction the episode's seed draws.
    Share of the word's attention on the cup's patches / the patches' share of the image, mean over heads
    and frames (and per layer). The panels: one per instruction word, 4 to a row, at the figure's size."""
    import matplotlib.image

    from vla_ros.evaluation import attention
    from vla_ros.sim.tasks import EVAL_SEED_START, HELDOUT_TEMPLATES, episode_task

    # The random tiny model attends almost evenly (a ratio within 0.001 of 1 whatever the word): sharper
    # queries and keys make every word's and every patch's share differ, so a wrong one shows.
    torch.manual_seed(0)
    model = VLATransformer(tiny_config(chunk_length=8, chunk_rate_hz=20.0, max_text_tokens=16))
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            attn.qkv_proj.weight[: (attn.num_heads + attn.num_kv_heads) * attn.head_dim] *= 8.0
    save_model(model, tmp_path / "sharp")
    atts, masks = [], []
    _spy(monkeypatch, attention, "frame_attention", atts)
    _spy(monkeypatch, attention, "cup_patches", masks)
    result = attention_run(tmp_path / "sharp", episodes=1, seed=0, frames_per_episode=2, out=tmp_path)
    color, text = episode_task(EVAL_SEED_START, HELDOUT_TEMPLATES)
    assert result["frames"] == len(atts) == len(masks) == 2
    ratios, per_layer = [], []
    for (args, att), ((_sim, mask_color, *_), mask) in zip(atts, masks):
        instruction = args[3]
        assert mask_color == color and instruction.text == text, (mask_color, instruction.text)
        a = att[:, :, list(instruction.tokens).index(color), :]  # (layers, heads, patches)
        on_cup = a[..., mask].sum(-1) / a.sum(-1)  # (layers, heads)
        ratios.append(on_cup.mean() / mask.mean())
        per_layer.append(on_cup.mean(axis=1) / mask.mean())
    assert result["grounding_ratio"] == pytest.approx(np.mean(ratios), abs=5e-4)
    assert result["grounding_ratio_by_layer"] == pytest.approx(list(np.mean(per_layer, axis=0)), abs=5e-4)
    assert len(result["grounding_ratio_by_layer"]) == 2  # the tiny model's layers
    n = len(atts[0][0][3].tokens)
    cols, rows = min(4, n), -(-n // 4)
    for i in range(2):  # the two frames of the first episode
        height, width = matplotlib.image.imread(tmp_path / f"attention_{i}.png").shape[:2]
        assert (width, height) == (round(3.2 * cols * 90), round(2.6 * rows * 90)), (n, width, height)
    assert json.loads((tmp_path / "attention.json").read_text()) == result


def test_attention_that_prefers_no_patch_has_a_grounding_ratio_of_one(tmp_path):
    """A known answer: with its query and key projections zeroed, every query attends equally to all the
    keys it may see, and the newest frame's patches all see the same keys: the colour word's attention is
    spread evenly over the patches, its share on the cup's patches is their share of the image, ratio 1
    in every layer, whatever the cup covers."""
    torch.manual_seed(0)
    model = VLATransformer(tiny_config(chunk_length=8, chunk_rate_hz=20.0, max_text_tokens=16))
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            attn.qkv_proj.weight[: (attn.num_heads + attn.num_kv_heads) * attn.head_dim] = 0.0
    save_model(model, tmp_path / "even")
    result = attention_run(tmp_path / "even", episodes=1, seed=0, frames_per_episode=2, out=None)
    assert result["frames"] == 2
    assert result["grounding_ratio"] == 1.0 and result["grounding_ratio_by_layer"] == [1.0, 1.0], result


def _true_cup_xy(seeds) -> list[np.ndarray]:
    """The named cup of each evaluation seed where the sim puts it (the held-out phrasings draw the colour).
    At reset: at rest it moves by tens of micrometres as it settles in the 0.6 s the tool waits."""
    from vla_ros.sim.tasks import HELDOUT_TEMPLATES, episode_task

    sim = ArmSim()
    try:
        out = []
        for seed in seeds:
            sim.reset(seed)
            out.append(sim.cup_positions()[episode_task(seed, HELDOUT_TEMPLATES)[0]][:2].copy())
        return out
    finally:
        sim.close()


def test_attention_reports_where_the_aux_head_puts_the_named_cup_at_rest(tmp_path, monkeypatch):
    """With an auxiliary head the tool measures the at-rest localisation error against the sim's truth:
    recomputed here from the heads' predictions (as the tool read them) and each layout's named cup as a
    fresh sim places it; the frame head's error too."""
    from vla_ros.evaluation import attention
    from vla_ros.sim.tasks import EVAL_SEED_START

    torch.manual_seed(0)
    folder = tmp_path / "aux"
    save_model(
        VLATransformer(
            tiny_config(chunk_length=8, chunk_rate_hz=20.0, max_text_tokens=16, aux_dim=3, frame_aux_loss_weight=1.0)
        ),
        folder,
    )
    estimates = []
    _spy(monkeypatch, attention, "cup_estimates", estimates)
    rest = attention_run(folder, episodes=0, seed=3, frames_per_episode=1, out=None, rest_layouts=3)[
        "named_cup_error_at_rest_m"
    ]
    truth = _true_cup_xy(EVAL_SEED_START + 3 + e for e in range(3))
    assert rest["layouts"] == len(estimates) == 3
    predictions = np.array([xy for _args, (xy, _frame_xy) in estimates])
    errors = np.linalg.norm(predictions - truth, axis=1)
    frame_errors = np.linalg.norm(np.array([frame_xy for _args, (_xy, frame_xy) in estimates]) - truth, axis=1)
    assert rest["mean"] == pytest.approx(errors.mean(), abs=2e-4) and rest["max"] == pytest.approx(
        errors.max(), abs=2e-4
    )
    assert rest["prediction_spread"] == pytest.approx(
        np.linalg.norm(predictions.std(axis=0)), abs=6e-5
    )  # (rounded to 0.1 mm)
    assert rest["frame_head_mean"] == pytest.approx(frame_errors.mean(), abs=2e-4)


def test_an_aux_head_that_always_says_one_point_is_off_by_that_points_distance_to_each_cup(tmp_path):
    """A known answer: an auxiliary head with zero weights says its bias, one point for every layout, so
    the prediction spread is 0 and the error of each layout is the distance from that point to the named
    cup; a model without a frame head reports no frame-head figure."""
    from vla_ros.sim.tasks import EVAL_SEED_START
    from vla_ros.tasks.cups import scale_aux

    torch.manual_seed(0)
    model = VLATransformer(tiny_config(chunk_length=8, chunk_rate_hz=20.0, max_text_tokens=16, aux_dim=3))
    point = np.array([0.38, -0.12, 0.045])
    with torch.no_grad():
        model.aux_head.weight.zero_()
        model.aux_head.bias.copy_(torch.from_numpy(scale_aux(point)))
    save_model(model, tmp_path / "fixed")
    rest = attention_run(tmp_path / "fixed", episodes=0, seed=0, frames_per_episode=1, out=None, rest_layouts=3)[
        "named_cup_error_at_rest_m"
    ]
    errors = np.linalg.norm(point[:2] - np.array(_true_cup_xy(EVAL_SEED_START + e for e in range(3))), axis=1)
    assert rest["layouts"] == 3 and rest["prediction_spread"] == 0.0
    assert rest["mean"] == pytest.approx(errors.mean(), abs=2e-4) and rest["max"] == pytest.approx(
        errors.max(), abs=2e-4
    )
    assert "frame_head_mean" not in rest


def test_no_auxiliary_head_no_rest_figure(tiny_model):
    assert (
        attention_run(tiny_model, episodes=1, seed=0, frames_per_episode=1, out=None, rest_layouts=2)[
            "named_cup_error_at_rest_m"
        ]
        is None
    )


def test_aim_reads_the_hand_and_both_cup_heads_at_the_first_close():
    """``python -m vla_ros.evaluation.aim`` on the shipped model, the expert driving (its aim is known: it closes
    on the cup's axis, 2 mm beyond it along the reach): the hand's offsets are the expert's, and both of the
    model's heads put the cup within a few centimetres of the truth at that moment, signed along the reach."""
    from pathlib import Path

    from vla_ros.evaluation import aim
    from vla_ros.sim.expert import PickExpert

    model = Path(__file__).resolve().parents[1] / "models" / "vla_cups"
    result = aim.run(model, episodes=2, seed=3, driver_factory=PickExpert)
    assert result["episodes"] == 2 and result["success_rate"] == 1.0
    for row in result["rows"]:
        assert row["tcp"][0] == pytest.approx(0.2, abs=0.5) and abs(row["tcp"][1]) < 0.5, row
        for head in ("transformer", "frame_head"):
            assert np.hypot(*row[head]) < 5.0, row  # cm: a belief about this cup, not the average layout
    first = result["first_close"]
    assert first["episodes"] == 2 and result["first_close_failed"] is None
    tcp_along = sorted(r["tcp"][0] for r in result["rows"])
    assert first["tcp"]["along_median_cm"] == pytest.approx(np.mean(tcp_along), abs=0.01)
    # signs: a point beyond the cup along the reach is +, to the left seen from the base is + across
    cup = np.array([0.3, 0.4, 0.045])
    assert aim.along_across_cm(cup[:2] + [0.006, 0.008], cup) == (1.0, 0.0)
    assert aim.along_across_cm(cup[:2] + [-0.008, 0.006], cup) == (0.0, 1.0)
    assert aim.main(["--episodes", "0"]) == 2


def test_aim_refuses_a_model_without_cup_heads(tiny_model, capsys):
    """A model trained without --task cups has no cup heads to read: a clear refusal (exit 2), no episode."""
    from vla_ros.evaluation import aim

    assert aim.main(["--model", str(tiny_model), "--episodes", "1"]) == 2
    assert "no cup heads" in capsys.readouterr().err
