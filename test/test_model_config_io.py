"""Model config validation and model folders: save/load round trip, checksum, names, shapes, clear errors."""

import json
from pathlib import Path

import pytest
import torch
from torch_threads import one_torch_thread  # noqa: F401  (module-wide fixture)

from vla_ros.chunks import COMMANDED_JOINTS
from vla_ros.model import ModelConfig, ModelFileError, VLATransformer, load_config, load_model, save_model, tiny_config
from vla_ros.model.io import sha256_file
from vla_ros.model.sequence import build_sequence, collate
from vla_ros.model.synthetic import random_instruction, synthetic_stream

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


def test_shipped_config_is_sized_for_cpu_training():
    config = ModelConfig()
    assert config.joint_names == COMMANDED_JOINTS and config.action_dim == 7 and config.state_dim == 14
    assert config.num_visual_tokens == 24 and config.head_dim == 32
    window_tokens = config.window_seconds * (30 * config.num_visual_tokens + 100)
    assert 200 <= window_tokens <= 600, window_tokens  # "a few hundred": a full-window step stays cheap
    assert VLATransformer(config).num_parameters() < 2_000_000
    assert config.chunk_offsets_ns[0] == 50_000_000 and len(config.chunk_offsets_ns) == config.chunk_length


def test_config_json_has_the_keys_the_tokenizer_reads():
    data = ModelConfig().to_dict()
    for key in (
        "image_height",
        "image_width",
        "image_mean",
        "image_std",
        "joint_names",
        "state_velocities",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "rms_norm_eps",
        "rope_min_period_s",
        "rope_max_period_s",
        "window_seconds",
        "chunk_length",
        "chunk_rate_hz",
        "num_visual_tokens",
        "text_embedding_dim",
        "crop",
    ):
        assert key in data, key
        value = getattr(ModelConfig(), key)  # what the model itself uses, as JSON writes it
        assert data[key] == (list(value) if isinstance(value, tuple) else value), (key, data[key], value)
    assert len(data["image_mean"]) == 3 and data["text_embedding_dim"] == 384
    assert ModelConfig.from_dict(json.loads(json.dumps(data))) == ModelConfig()


@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(hidden_size=130), ["hidden_size=130", "num_attention_heads=4"]),
        (dict(num_key_value_heads=3), ["num_attention_heads=4", "num_key_value_heads=3"]),
        (dict(patch_grid=(5, 6)), ["patch_grid=(5, 6)", "36x48"]),
        (dict(rope_min_period_s=5.0, rope_max_period_s=1.0), ["rope_min_period_s=5.0", "rope_max_period_s=1.0"]),
        (dict(window_seconds=0.0), ["window_seconds=0.0"]),
        (dict(action_std=(1.0,) * 6), ["action_std has 6 values, expected 7"]),
        (dict(state_std=(0.0,) * 14), ["state_std"]),
        (dict(relative_actions="yes"), ["relative_actions='yes'", "true or false"]),
        (dict(action_loss="huber"), ["action_loss='huber'", "mse, l1"]),
    ],
)
def test_config_errors_quote_the_values(changes, words):
    with pytest.raises(ValueError) as err:
        ModelConfig(**changes)
    for word in words:
        assert word in str(err.value)


def test_derived_keys_must_agree():
    data = ModelConfig().to_dict()
    data["num_visual_tokens"] = 12
    with pytest.raises(ValueError, match="num_visual_tokens=12 disagrees"):
        ModelConfig.from_dict(data)


def _outputs(model, config):
    stream = synthetic_stream(config, 0.2, seed=1)
    batch = collate([build_sequence(config, stream, random_instruction(config, 4).embeddings)])
    with torch.no_grad():
        return model.full_pass(batch).hidden


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    config = tiny_config(action_mean=tuple(range(7)), action_std=(2.0,) * 7)
    model = VLATransformer(config).eval()
    save_model(model, tmp_path / "m", metadata={"git_commit": "abc", "data_sha256": "00"})
    data = json.loads((tmp_path / "m" / "config.json").read_text())
    assert data["weights_sha256"] == sha256_file(tmp_path / "m" / "model.safetensors")
    assert data["metadata"]["git_commit"] == "abc"
    loaded = load_model(tmp_path / "m")
    assert loaded.config == config
    assert torch.equal(loaded.action_mean, model.action_mean)  # statistics come from config.json
    assert torch.equal(_outputs(loaded, config), _outputs(model, config))


def test_missing_folder_and_files_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        load_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_config(tmp_path / "empty")
    save_model(VLATransformer(tiny_config()), tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_model(tmp_path / "m")


def test_checksum_mismatch_is_refused(tmp_path):
    save_model(VLATransformer(tiny_config()), tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-5] ^= 0xFF  # flip bits inside the last tensor's data
    weights.write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match="sha256 .* does not match weights_sha256"):
        load_model(tmp_path / "m")


def _resave_config(folder, **changes):
    path = folder / "config.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_shape_and_name_mismatches_are_listed(tmp_path):
    from safetensors.torch import save_file

    folder = tmp_path / "m"
    save_model(VLATransformer(tiny_config()), folder)
    _resave_config(folder, intermediate_size=48)  # config no longer fits the weights
    with pytest.raises(ModelFileError) as err:
        load_model(folder)
    assert "blocks.0.mlp.down_proj.weight: shape [32, 64] in the file, config.json needs [32, 48]" in str(err.value)

    tensors = {k: v.contiguous() for k, v in VLATransformer(tiny_config()).state_dict().items()}
    del tensors["norm.weight"]
    tensors["extra.weight"] = torch.zeros(3)
    save_file(tensors, str(folder / "model.safetensors"))
    _resave_config(folder, intermediate_size=64, weights_sha256=sha256_file(folder / "model.safetensors"))
    with pytest.raises(ModelFileError) as err:
        load_model(folder)
    assert "missing tensors ['norm.weight']" in str(err.value) and "unexpected tensors ['extra.weight']" in str(
        err.value
    )


def test_bad_json_and_bad_values_name_the_file(tmp_path):
    folder = tmp_path / "m"
    save_model(VLATransformer(tiny_config()), folder)
    _resave_config(folder, window_seconds=-1)
    with pytest.raises(ModelFileError, match=r"config.json: window_seconds=-1"):
        load_config(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="not valid JSON"):
        load_config(folder)


def test_model_init_is_seeded():
    torch.manual_seed(3)
    a = VLATransformer(tiny_config())
    torch.manual_seed(3)
    b = VLATransformer(tiny_config())
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert all(torch.isfinite(p).all() for p in a.parameters())


def test_the_sim_is_asked_for_the_hand_camera_only_by_a_model_that_reads_it(tmp_path):
    """``vla-ros demo`` and ``vla-ros eval --live`` start the sim with ``wrist_camera:=true`` for a model whose
    config.json lists ``wrist_camera``, and without it for the others (a missing folder is the loader's to report)."""
    from vla_ros.cameras import model_cameras, sim_launch_args

    wrist = tmp_path / "wrist"
    wrist.mkdir()
    (wrist / "config.json").write_text(json.dumps(tiny_config(cameras=("camera", "wrist_camera")).to_dict()))
    assert model_cameras(wrist) == ("camera", "wrist_camera") and sim_launch_args(wrist) == ["wrist_camera:=true"]
    assert (
        sim_launch_args(Path(__file__).parents[1] / "models" / "vla_cups") == []
        and sim_launch_args(tmp_path / "missing") == []
    )
