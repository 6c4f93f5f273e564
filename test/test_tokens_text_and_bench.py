"""The real MiniLM instruction encoder, and the token benchmark's figures (direction, not timing)."""

import json

import numpy as np
import pytest

from vla_ros.bench import tokens_bench
from vla_ros.tokens import StreamConfig, TokenStream
from vla_ros.tokens.text import shared_encoder

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


@pytest.fixture(scope="module")
def encoder():
    return shared_encoder(32)


def test_instruction_becomes_word_piece_embeddings(encoder):
    red = encoder("pick up the red cup")
    assert red.tokens == ("[CLS]", "pick", "up", "the", "red", "cup", "[SEP]")
    assert red.embeddings.shape == (7, 384) and red.embeddings.dtype == np.float32
    assert np.all(np.isfinite(red.embeddings))
    blue = encoder("pick up the blue cup")
    i = red.tokens.index("red")
    # the colour word differs most; embeddings are contextual, so "cup" differs a little too
    diff = np.linalg.norm(red.embeddings - blue.embeddings, axis=1)
    assert diff[i] == diff.max() and diff[i] > 1.0
    assert np.array_equal(encoder("pick up the red cup").embeddings, red.embeddings)  # deterministic


# Odd inputs included: empty, whitespace, accents and case, CJK, emoji, control characters, past the budget.
REFERENCE_TEXTS = (
    "pick up the red cup",
    "",
    "   ",
    "Hey ROBOT, go get the r\u00ebd cup for me!!",
    "\u62ff\u8d77\u7ea2\u8272\u7684\u676f\u5b50",
    "do not pick up the red cup " * 10,
    "x" * 300,
    "\x00\t\n",
    "\U0001f642 cup",
    "lift whichever cup is green",
)


def test_the_encoder_gives_the_reference_implementations_word_pieces_and_hidden_states(encoder):
    """The package's own reference (transformers' tokenizer and BertModel over the same files, truncated
    to the same budget) against the encoder written here: the same word pieces, hidden states within
    1e-5 (float32 sums in another order)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from vla_ros.tokens.text import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = AutoModel.from_pretrained(minilm_path()).eval()
    for text in REFERENCE_TEXTS:
        batch = tokenizer([text], return_tensors="pt", truncation=True, max_length=encoder.max_tokens)
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state[0].numpy()
        ours = encoder(text)
        assert ours.tokens == tuple(tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())), text
        assert ours.embeddings.shape == hidden.shape, text
        np.testing.assert_allclose(ours.embeddings, hidden, atol=1e-5, rtol=0, err_msg=text)


def test_long_instructions_are_cut_to_the_token_budget(encoder):
    from vla_ros.tokens.text import TextEncoder

    short = TextEncoder(max_tokens=6)("please pick up the red cup on the left of the table")
    assert len(short.tokens) == 6 and short.tokens[-1] == "[SEP]"


def test_stream_pins_the_instruction_and_bumps_its_generation_only_on_change(encoder):
    stream = TokenStream(stream=StreamConfig(), encode_text=encoder)
    first = stream.set_instruction("pick up the red cup", 5)
    assert first is not None and stream.instruction_generation == 1 and first.stamp_ns == 5
    assert stream.set_instruction("  pick up   the red cup ", 6) is first  # same words, same tokens
    assert stream.instruction_generation == 1
    stream.set_instruction("pick up the green cup", 7)
    assert stream.instruction_generation == 2 and "green" in stream.instruction.tokens


def test_token_bench_reports_the_comparison(capsys, tmp_path):
    """The figures recomputed from the bench's samples (``--raw``): one tokenize time per message of the
    modelled streams (4 s: 120 frames, 400 joint states), their percentiles; the tokens' staleness at
    each frame recomputed here from the modelled arrivals alone (every joint state becomes a token, so
    at a frame's arrival the newest joint information is the newest joint state that has arrived); the
    nearest pairing's, one per pair it made, at most one per frame. Direction, not timing: no figure is
    held to a number of microseconds."""
    raw_path = tmp_path / "raw.json"
    assert tokens_bench.main(["--seconds", "4", "--json", "--raw", str(raw_path)]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    raw = json.loads(raw_path.read_text())
    events = tokens_bench.make_arrivals(4.0, 0)
    frames = [(a, s) for a, s, kind in events if kind == "image"]
    joints = [(a, s) for a, s, kind in events if kind == "joints"]
    assert (len(frames), len(joints)) == (120, 400) == (result["frames"], result["joint_msgs"])
    assert result["tokens_rejected"] == 0 and result["joint_msgs_used_pct_tokens"] == 100.0
    for kind, key in (("image", "image"), ("joints", "joints")):
        cost = raw["tokenize_us"][kind]
        assert len(cost) == len(frames if kind == "image" else joints)
        for q in (50, 99):
            assert result[f"tokenize_us_per_msg_p{q}_{key}"] == pytest.approx(np.percentile(cost, q), abs=0.051)
    newest = [max((s for a, s in joints if a < arrival), default=None) for arrival, _ in frames]
    expected = [(arrival - s) / 1e6 for (arrival, _), s in zip(frames, newest) if s is not None]
    np.testing.assert_allclose(raw["staleness_ms"]["tokens"], expected, rtol=0, atol=1e-9)
    assert result["staleness_ms_p50_tokens"] == pytest.approx(np.percentile(expected, 50), abs=0.0051)
    nearest = raw["staleness_ms"]["nearest"]
    assert len(nearest) <= len(frames) and result["joint_msgs_used_pct_nearest"] == pytest.approx(
        100.0 * len(nearest) / len(joints), abs=0.0051
    )
    assert (
        25.0 <= result["joint_msgs_used_pct_nearest"] <= 30.0
    )  # one joint message per frame, and most frames find one
    assert result["staleness_ms_p50_nearest"] == pytest.approx(np.percentile(nearest, 50), abs=0.0051)
    assert result["staleness_ms_p50_tokens"] < result["staleness_ms_p50_nearest"]


def test_nearest_pairing_uses_one_joint_message_per_frame_within_the_slop():
    pairing = tokens_bench.NearestPairing(slop_ns=10)
    assert pairing.add("joints", 100, "j100") is None
    assert pairing.add("joints", 108, "j108") is None
    assert pairing.add("image", 105, "f105") == ("f105", "j108")  # closest within slop
    assert pairing.add("image", 140, "f140") is None  # nothing within 10 ns
    assert pairing.add("joints", 145, "j145") == ("f140", "j145")
    assert pairing.queues["joints"] == {100: "j100"}
