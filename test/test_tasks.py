"""Training tasks as plug-ins (``vla_ros.tasks``): the generic model and trainer know no task; the cup task
registers its heads, losses, targets and options by name, and the shipped model loads with its heads under
the names it was saved with."""

import dataclasses

import numpy as np
import pytest
import torch
from safetensors import safe_open

from vla_ros.model.config import tiny_config
from vla_ros.model.io import load_model
from vla_ros.model.model import VLATransformer
from vla_ros.model.sequence import ChunkSpec, build_sequence, collate
from vla_ros.model.synthetic import random_instruction, synthetic_stream
from vla_ros.tasks import Task, get_task, register, task_names, task_of, task_options
from vla_ros.tasks.cups import AUX_DIM, CupsOptions
from vla_ros.tokens import Kind
from vla_ros.training.train import TrainConfig, task_model_config

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

SHIPPED = "models/vla_cups"


def test_the_shipped_model_loads_with_the_cup_tasks_heads_under_their_saved_names():
    model = load_model(SHIPPED)
    with safe_open(f"{SHIPPED}/model.safetensors", "pt") as f:
        saved = set(f.keys())
    assert set(model.state_dict()) == saved  # no key renamed, added or left out
    assert task_of(model.config) is get_task("cups") and model.task is get_task("cups")
    assert {"aux_head.weight", "frame_aux_head.0.weight", "frame_aux_head.2.bias"} <= saved


def test_the_generic_model_carries_no_task_head_and_no_task_loss():
    model = VLATransformer(tiny_config())
    assert model.task is get_task("none") and task_of(model.config).name == "none"
    assert not any("aux" in name for name in model.state_dict())
    assert not hasattr(model, "aux_head") and not hasattr(model, "view_loss")
    assert task_model_config("none") == get_task("none").model_config()
    assert task_model_config("cups").aux_dim == AUX_DIM


def test_a_task_is_chosen_by_name_and_its_options_belong_to_it():
    assert task_names()[:2] == ("none", "cups")
    tc = TrainConfig(task="cups", task_options={"views": 8})
    assert tc.task_options == CupsOptions(views=8) and dataclasses.asdict(tc)["task_options"]["views"] == 8
    assert TrainConfig().task_options == get_task("none").options()
    assert task_options(get_task("cups"), CupsOptions(view_batch=2)).view_batch == 2
    with pytest.raises(ValueError, match="views needs task 'cups', got task 'none'"):
        TrainConfig(task_options={"views": 8})
    with pytest.raises(ValueError, match="not an option of any task"):
        TrainConfig(task="cups", task_options={"colour": "red"})
    with pytest.raises(ValueError, match="registered already"):
        register(Task())


def test_the_cup_tasks_losses_are_added_to_the_action_loss_with_their_weights():
    """forward: action loss + weight x each task loss, each reported by name."""
    torch.manual_seed(0)
    config = tiny_config(aux_dim=AUX_DIM, aux_loss_weight=0.5, frame_aux_loss_weight=2.0)
    model = VLATransformer(config)
    stream = synthetic_stream(config, seconds=0.3, seed=1)
    anchor = [o for o in stream if o.kind == Kind.STATE][-1]
    frames = [np.ones(AUX_DIM, np.float32) if o.kind == Kind.IMAGE else None for o in stream]
    targets = np.zeros((config.chunk_length, config.action_dim))
    seq = build_sequence(
        config,
        stream,
        text=random_instruction(config, 4).embeddings,
        chunks=[ChunkSpec(anchor=anchor.key, targets=targets, aux=np.ones(AUX_DIM, np.float32))],
        frame_aux=frames,
    )
    batch = collate([seq])
    loss, info = model(batch)
    assert {"aux_loss", "frame_aux_loss"} <= set(info)
    expected = info["loss"] + 0.5 * info["aux_loss"] + 2.0 * info["frame_aux_loss"]
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
