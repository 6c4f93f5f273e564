"""The instruction check (``vla_ros.policy.grounding``): what the policy refuses to act on, and what it takes.

Checked with the real MiniLM encoder and the shipped model's own check (``models/vla_cups/grounding.npz``):
every phrasing of the training, held-out and unseen lists is accepted with the cup it names, every held-out
instruction to refuse is refused; the lists are disjoint where they must be; the word rules hold for every
phrasing with any colour (hypothesis); the check's files load or are refused with the reason; a session
that refuses an instruction gives no chunk until an accepted one comes, and says why; the in-process
evaluation of instructions to refuse lifts nothing and leaves the arm where it started.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_ros import reasons
from vla_ros.evaluation.run_eval import Templates, evaluate, load_templates
from vla_ros.model.config import tiny_config
from vla_ros.model.io import save_model
from vla_ros.model.model import VLATransformer
from vla_ros.model.runtime import StreamingPolicy
from vla_ros.policy import PolicySession, SessionConfig
from vla_ros.policy.grounding import (
    GROUNDING_META,
    GROUNDING_WEIGHTS,
    Grounder,
    GroundingModel,
    cached_grounding,
    features,
    train_grounding,
)
from vla_ros.sim import tasks
from vla_ros.tasks import get_task
from vla_ros.tasks.cups import OTHER_COLOR_WORDS, ground_cup_words
from vla_ros.tokens.text import shared_encoder
from vla_ros.tools.grounding import list_figures

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "models" / "vla_cups"
CUPS = get_task("cups")
REQUESTS = tasks.PHRASING_TEMPLATES + tasks.HELDOUT_TEMPLATES + tasks.UNSEEN_TEMPLATES


@pytest.fixture(scope="module")
def grounder():
    return Grounder(CUPS, GroundingModel.load(SHIPPED), shared_encoder(32))


def test_the_shipped_check_takes_every_request_list_and_refuses_every_heldout_refusal(grounder):
    figures = list_figures(grounder)
    for name in ("train", "heldout", "unseen"):
        row = figures[name]
        assert row["refused"] == 0 and row["wrong_target"] == 0, (name, row["refused_texts"])
        assert row["score_alone_refused"] == 0, name  # the learned score alone takes them too
    for name in ("refuse", "refuse_train"):
        row = figures[name]
        assert row["accepted"] == 0 and row["refused_pct"] == 100.0, (name, row["accepted_texts"])
    assert figures["refuse"]["texts"] >= 40 * 2  # at least 40 instructions, most with each cup's colour
    # the learned score alone refuses most of the held-out list too (rules and score overlap)
    assert figures["refuse"]["score_alone_refused"] >= 0.9 * figures["refuse"]["texts"]


@pytest.mark.parametrize(
    "text, code, target",
    [
        ("do not pick up the red cup", reasons.INSTRUCTION_NEGATED, "red"),
        ("Don\u2019t lift the green mug", reasons.INSTRUCTION_NEGATED, "green"),
        ("pick up the yellow cup", reasons.INSTRUCTION_UNKNOWN_TARGET, None),
        ("pick up the red and the blue cup", reasons.INSTRUCTION_MANY_TARGETS, None),
        ("grab both cups", reasons.INSTRUCTION_MANY_TARGETS, None),
        ("pick up the cup", reasons.INSTRUCTION_NO_TARGET, None),
        ("open the door", reasons.INSTRUCTION_NO_TARGET, None),
        ("put the red cup on the floor", reasons.INSTRUCTION_NOT_GROUNDED, "red"),
        ("smash the blue cup", reasons.INSTRUCTION_NOT_GROUNDED, "blue"),
        ("lift the green bowl", reasons.INSTRUCTION_NOT_GROUNDED, "green"),
        ("hey robot, go get the red cup for me", "", "red"),
        ("Pick up the GREEN cup.", "", "green"),
        ("lift whichever cup is blue", "", "blue"),
    ],
)
def test_each_refusal_says_why_and_each_request_names_its_cup(grounder, text, code, target):
    g = grounder(text)
    assert (g.accepted, g.code, g.target) == (code == "", code, target), g.summary()
    assert g.score is not None and 0.0 <= g.score <= 1.0
    status = g.as_dict()
    assert status["status"] == ("accepted" if g.accepted else "refused") and status["text"] == text
    json.dumps(status)  # what ~/instruction_status publishes
    if not g.accepted:
        assert text in g.summary() and "refused" in g.summary() and f"{g.score:.2f}" in g.summary()


def test_grounded_policy_text_is_the_tasks_wording_and_the_threshold_can_be_moved(grounder):
    g = grounder("could you grab me the blue cup", policy_text="grounded")
    assert g.accepted and g.policy_text == "pick up the blue cup"
    assert grounder("could you grab me the blue cup").policy_text == "could you grab me the blue cup"
    assert not grounder("lift the red mug", threshold=1.0).accepted  # its score is 0.9999: under 1
    assert grounder("put the red cup on the floor", threshold=0.0).accepted  # the words allow it; the score decides


@settings(max_examples=150, deadline=None)
@given(
    template=st.sampled_from(REQUESTS),
    color=st.sampled_from(tasks.COLORS),
    other=st.sampled_from(sorted(OTHER_COLOR_WORDS)),
    negation=st.sampled_from(["do not ", "don't ", "never ", "please don't ", "no, "]),
)
def test_word_rules_hold_for_every_phrasing_with_any_colour(template, color, other, negation):
    assert ground_cup_words(template.format(color=color)) == (color, "", "")
    assert ground_cup_words(negation + template.format(color=color))[1] == reasons.INSTRUCTION_NEGATED
    assert ground_cup_words(template.format(color=other))[1] == reasons.INSTRUCTION_UNKNOWN_TARGET
    second = next(c for c in tasks.COLORS if c != color)
    two = template.format(color=color) + f" and the {second} cup"
    assert ground_cup_words(two)[1] == reasons.INSTRUCTION_MANY_TARGETS


def test_the_lists_are_disjoint_where_a_figure_depends_on_it():
    requests, refusals = set(tasks.request_training_texts()), set(tasks.refusal_training_texts())
    heldout_refusals = set(tasks.REFUSE_HELDOUT_TEMPLATES)
    assert len(heldout_refusals) == len(tasks.REFUSE_HELDOUT_TEMPLATES) >= 40
    assert not heldout_refusals & refusals and not heldout_refusals & requests
    assert not requests & refusals
    for evaluated in (tasks.HELDOUT_TEMPLATES, tasks.UNSEEN_TEMPLATES):
        assert not set(evaluated) & requests and not set(evaluated) & refusals
    # the demonstrations keep their phrasings; the broader list only adds to them
    assert tasks.PHRASING_TEMPLATES[: len(tasks.TRAIN_TEMPLATES)] == tasks.TRAIN_TEMPLATES


def test_the_checks_files_round_trip_and_broken_ones_are_refused_with_the_reason(tmp_path):
    shipped = GroundingModel.load(SHIPPED)
    shipped.save(tmp_path)
    again = GroundingModel.load(tmp_path)
    x = np.random.default_rng(0).normal(size=(5, 768))
    np.testing.assert_array_equal(again.scores(x), shipped.scores(x))
    assert again.meta == shipped.meta and again.threshold == 0.5
    assert GroundingModel.load(tmp_path / "nothing_here") is None  # a folder without a check
    (tmp_path / GROUNDING_META).write_text(json.dumps({**shipped.meta, "features": "other"}))
    with pytest.raises(ValueError, match="features 'other'"):
        GroundingModel.load(tmp_path)
    shipped.save(tmp_path)
    bad = {k: getattr(shipped, k).copy() for k in ("w1", "b1", "w2", "b2")}
    bad["w1"][0, 0] = np.nan
    np.savez(tmp_path / GROUNDING_WEIGHTS, **bad)
    with pytest.raises(ValueError, match="NaN"):
        GroundingModel.load(tmp_path)
    np.savez(tmp_path / GROUNDING_WEIGHTS, **{**bad, "w1": np.zeros((64, 10))})
    with pytest.raises(ValueError, match="shapes"):
        GroundingModel.load(tmp_path)
    (tmp_path / GROUNDING_WEIGHTS).write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="unreadable"):
        GroundingModel.load(tmp_path)


def test_training_the_check_is_repeatable_cached_and_reports_its_cross_validation(tmp_path, monkeypatch):
    encoder = shared_encoder(32)
    torch.set_num_threads(1)
    one = train_grounding(encoder, CUPS, seed=3, steps=40, folds=2)
    two = train_grounding(encoder, CUPS, seed=3, steps=40, folds=2)
    x = np.random.default_rng(1).normal(size=(20, 768))
    np.testing.assert_allclose(one.scores(x), two.scores(x), atol=1e-4)  # the same to float rounding
    # vla-ros train reads it from the disk cache after the first run: the same check, no training
    monkeypatch.setenv("VLA_ROS_GROUNDING_CACHE", str(tmp_path))
    first = cached_grounding(encoder, CUPS, 3, 32, steps=40)
    assert first.meta["cross_validation"] is None and first.meta["steps"] == 40
    (entry,) = tmp_path.iterdir()
    again = cached_grounding(encoder, CUPS, 3, 32, steps=40)
    np.testing.assert_array_equal(again.scores(x), first.scores(x))
    np.testing.assert_allclose(again.scores(x), one.scores(x), atol=1e-4)  # what training gives
    (entry / GROUNDING_WEIGHTS).write_bytes(b"cut short")  # a broken entry is trained again and replaced
    np.testing.assert_allclose(cached_grounding(encoder, CUPS, 3, 32, steps=40).scores(x), one.scores(x), atol=1e-4)
    assert GroundingModel.load(entry) is not None
    cv = one.meta["cross_validation"]
    assert cv["folds"] == 2 and 0.0 <= cv["false_refusal_pct"] <= 100.0 and 0.0 <= cv["missed_refusal_pct"] <= 100.0
    assert one.meta["requests"] == len({CUPS.grounding_text(t) for t in CUPS.grounding_pools()[0]})
    with pytest.raises(ValueError, match="no instruction pools"):
        train_grounding(encoder, get_task("none"))
    assert features(np.ones((3, 384))).shape == (768,)


# ---- the session: one code path for the node and both evaluations ----------------------------------------
@pytest.fixture(scope="module")
def cups_tiny(tmp_path_factory):
    """A tiny untrained model of the cup task (aux head: the cup task claims it) carrying the shipped check."""
    folder = tmp_path_factory.mktemp("cups_tiny") / "model"
    torch.manual_seed(0)
    save_model(VLATransformer(tiny_config(aux_dim=3)), folder)
    for name in (GROUNDING_WEIGHTS, GROUNDING_META):
        shutil.copy2(SHIPPED / name, folder / name)
    return folder


def session_of(folder, **config):
    torch.set_num_threads(1)
    policy = StreamingPolicy.from_pretrained(folder, backend="torch", device="cpu")
    return PolicySession(policy, shared_encoder(32), SessionConfig(**config), folder)


def test_a_refused_instruction_stops_the_chunks_until_an_accepted_one_and_says_why(cups_tiny):
    session = session_of(cups_tiny)
    assert session.set_instruction("pick up the red cup", 0) is not None
    assert session.instruction_status["status"] == "accepted" and session.instruction_status["target"] == "red"
    assert session.tick(1_000_000).skip == reasons.NO_OBSERVATIONS  # accepted: waits for observations only
    assert session.set_instruction("do not pick up the red cup", 2_000_000) is None
    assert session.instruction_refused
    assert session.instruction_rejection.startswith(reasons.INSTRUCTION_NEGATED + ": ")
    status = session.instruction_status
    assert status["status"] == "refused" and status["reason"] == reasons.INSTRUCTION_NEGATED
    assert status["text"] == "do not pick up the red cup" and status["score"] is not None
    result = session.tick(3_000_000)
    assert result.chunk is None and result.skip == reasons.INSTRUCTION_REFUSED
    assert "do not pick up the red cup" in result.detail and "the arm holds" in result.detail
    assert session.instruction.text == "pick up the red cup"  # never pinned: the stream keeps the older one
    # a text the stream refuses (too long) changes nothing: still refused, the status says which stays
    assert session.set_instruction("x" * 600, 4_000_000) is None
    assert session.instruction_status["reason"] == "instruction_too_long" and session.instruction_refused
    assert session.set_instruction("lift the blue mug", 5_000_000) is not None
    assert not session.instruction_refused and session.instruction.text == "pick up the blue cup"  # its wording
    assert session.tick(6_000_000).skip == reasons.NO_OBSERVATIONS
    session.reset()
    assert session.instruction_status == {} and not session.instruction_refused


def test_the_session_grounded_wording_and_the_check_switched_off(cups_tiny):
    grounded = session_of(cups_tiny)  # the default: the policy reads the task's wording of the checked cup
    assert grounded.set_instruction("could you grab me the green cup", 0).text == "pick up the green cup"
    assert grounded.instruction_status["text"] == "could you grab me the green cup"
    as_given = session_of(cups_tiny, policy_instruction="as_given")
    assert as_given.set_instruction("could you grab me the green cup", 0).text == "could you grab me the green cup"
    off = session_of(cups_tiny, check_instructions=False)
    assert off.set_instruction("do not pick up the red cup", 0) is not None  # taken unchecked, and said so
    assert off.instruction_status["status"] == "accepted" and "unchecked" in off.instruction_status["detail"]
    strict = session_of(cups_tiny, instruction_threshold=1.0)
    assert strict.set_instruction("pick up the red cup", 0) is None
    assert strict.instruction_status["reason"] == reasons.INSTRUCTION_NOT_GROUNDED
    with pytest.raises(ValueError, match="policy_instruction"):
        SessionConfig(policy_instruction="canonical")
    with pytest.raises(ValueError, match="instruction_threshold"):
        SessionConfig(instruction_threshold=1.5)


def test_a_model_of_the_generic_task_checks_nothing():
    torch.manual_seed(0)
    session = PolicySession(
        StreamingPolicy.from_model(VLATransformer(tiny_config()).eval(), device="cpu"),
        shared_encoder(32),
        SessionConfig(),
    )
    assert session.set_instruction("wave hello", 0) is not None  # no targets, no pools: the generic task's rule
    assert session.instruction_status["status"] == "accepted" and session.instruction_status["score"] is None


# ---- the evaluation --------------------------------------------------------------------------------------
def test_a_refusal_evaluation_runs_every_instruction_in_turn_on_the_seeds_own_colours():
    templates = ("do not lift the {color} cup", "open the door", "grab the {color} pen")
    drawn = tasks.eval_episodes(7, 0, templates)
    each = tasks.eval_episodes(7, 0, templates, every_template=True)
    assert [e[:2] for e in each] == [d[:2] for d in drawn]  # the same seeds and colours
    assert [e[2] for e in each] == [templates[k % 3].format(color=each[k][1]) for k in range(7)]


def test_refusal_lists_load_by_name_and_from_a_file(tmp_path):
    refuse = load_templates("refuse")
    assert refuse.refuse and refuse == tasks.REFUSE_HELDOUT_TEMPLATES
    assert not load_templates("unseen").refuse and load_templates(None) == tasks.HELDOUT_TEMPLATES
    f = tmp_path / "neg.txt"
    f.write_text("# refuse\n# a comment\ndo not lift the {color} cup\nopen the door\n")
    assert load_templates(str(f)) == ("do not lift the {color} cup", "open the door") and load_templates(str(f)).refuse
    f.write_text("do not lift the cup\n")  # without '# refuse' every line needs {color}
    with pytest.raises(ValueError, match="# refuse"):
        load_templates(str(f))
    f.write_text("# refuse\nlift the {colour} cup\n")
    with pytest.raises(ValueError, match="braces"):
        load_templates(str(f))


def test_instructions_to_refuse_lift_nothing_and_leave_the_arm_where_it_started(tmp_path):
    """The shipped model in the in-process evaluation, as ``vla-ros eval --instructions refuse`` runs it."""
    templates = Templates(("do not pick up the {color} cup", "pick up the yellow cup", "smash the {color} mug"), True)
    summary = evaluate(str(SHIPPED), 3, 5, templates, backend="onnx", progress=False, out=tmp_path)
    assert summary["lifts"] == 0 and summary["refused_pct"] == 100.0 and summary["instructions_list"] == "refuse"
    assert summary["max_tcp_displacement_m"] <= 0.05 and summary["moved_over_5cm"] == 0
    episodes = json.loads((tmp_path / "results.json").read_text())["episodes"]
    assert all(e["refused"] and e["chunks"] == 0 for e in episodes)
    assert sum(summary["refused_by_reason"].values()) == 3


def test_the_refusal_summaries_add_up_their_episodes_in_and_out_of_process():
    from vla_ros.evaluation.live_eval import summarize
    from vla_ros.evaluation.tables import refusal_summary

    def row(seed, text, refused, lifted, moved, reason):
        return {
            "seed": seed,
            "instruction": text,
            "color": "red",
            "refused": refused,
            "lifted": lifted,
            "success": lifted == "red",
            "time_to_success_s": 2.0 if lifted == "red" else None,
            "max_tcp_displacement_m": moved,
            "instruction_status": {"reason": reason},
            "min_target_distance_m": 0.1,
            "initial_target_distance_m": 0.2,
            "chunk_arrivals": [],
        }

    rows = [
        row(1, "do not lift it", True, None, 0.001, reasons.INSTRUCTION_NEGATED),
        row(2, "do not lift it", True, None, 0.002, reasons.INSTRUCTION_NEGATED),
        row(3, "lift the red pen", False, "red", 0.31, ""),
    ]
    s = refusal_summary(rows)
    assert s["lifts"] == 1 and s["refused_pct"] == pytest.approx(66.67) and s["moved_over_5cm"] == 1
    assert s["max_tcp_displacement_m"] == 0.31 and s["instructions"] == 2 and s["episodes"] == 3
    assert s["refused_by_reason"] == {reasons.INSTRUCTION_NEGATED: 2}
    assert s["by_instruction"]["do not lift it"] == {
        "episodes": 2,
        "refused": 2,
        "lifts": 0,
        "max_tcp_displacement_m": 0.002,
        "reason": reasons.INSTRUCTION_NEGATED,
    }
    live = summarize(rows, {}, {}, [], [], "m", "onnx", [1, 3], 1.0, 1.0, ((0, 0, 0), (0, 0, 0)), None, refuse=True)
    assert {k: live[k] for k in s} == s and live["mode"] == "live" and "success_rate" not in live
    request = summarize(rows, {}, {}, [], [], "m", "onnx", [1, 3], 1.0, 1.0, ((0, 0, 0), (0, 0, 0)), None)
    assert request["false_refusal_pct"] == pytest.approx(66.67) and "lifts" not in request
