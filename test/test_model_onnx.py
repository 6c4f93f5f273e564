"""ONNX export of the streaming step and the ONNX Runtime backend: parity with torch, stream exactness, files."""

import json

import numpy as np
import pytest
import torch
from torch_threads import one_torch_thread  # noqa: F401  (module-wide fixture)

from vla_ros.model import ModelFileError, StreamingPolicy, VLATransformer, save_model, tiny_config
from vla_ros.model import export_onnx as export_cli
from vla_ros.model.check import compare_with_full_pass, record_stream
from vla_ros.model.io import export_to_folder
from vla_ros.model.onnx_backend import OnnxBackend
from vla_ros.model.synthetic import random_instruction, synthetic_stream
from vla_ros.tokens.types import Kind

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others

TOL = 1e-4
EPOCH_NS = 1_700_000_000 * 10**9


@pytest.fixture(
    scope="module",
    params=[
        dict(cameras=("camera",)),
        dict(cameras=("camera", "wrist_camera")),
        dict(cameras=("camera",), pin_first_frame=True),
    ],
    ids=["one_camera", "wrist_camera", "pinned_frame"],
)
def folder(tmp_path_factory, request):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("model")
    model = VLATransformer(tiny_config(action_mean=(0.1,) * 7, state_std=(2.0,) * 14, **request.param))
    with torch.no_grad():  # zero at init: give the instruction conditioning weights so parity covers it
        model.instruction_proj.weight.normal_(0.0, 0.05)
        model.patch_encoder.film.weight.normal_(0.0, 0.05)
        model.patch_encoder.mean_image.normal_(0.0, 0.1)
    save_model(model, path, onnx=True)
    return path


def test_step_graph_parity_over_shapes(folder):
    from vla_ros.model.io import load_model

    model = load_model(folder)
    assert export_cli.parity(model, folder / "model.onnx") < TOL  # empty cache, state-only, chunk, text-only...


def test_onnx_stream_matches_torch_stream_and_full_pass(folder):
    torch_policy = StreamingPolicy.from_pretrained(folder, backend="torch", device="cpu")
    onnx_policy = StreamingPolicy.from_pretrained(folder, backend="onnx", device="cpu")
    assert onnx_policy.backend.describe().endswith("CPUExecutionProvider")
    config = torch_policy.config
    instruction = random_instruction(config, 6)
    stream = synthetic_stream(config, seconds=0.6, seed=3, start_ns=EPOCH_NS)  # 6 windows
    # Frames 30 ms late: the ONNX path replays exactly as the torch one does.
    arrival = sorted(stream, key=lambda o: o.stamp_ns + (30_000_000 if o.kind == Kind.IMAGE else 0))
    results = []
    for policy in (torch_policy, onnx_policy):
        policy.set_instruction(instruction)
        hidden, chunks = record_stream(policy, [[o] for o in arrival])
        record_stream(policy, [[]], chunk_after=[0], chunks=chunks)
        results.append((hidden, chunks))
    (th, tc), (oh, oc) = results
    assert max(float(np.abs(th[k] - oh[k]).max()) for k in th) < TOL
    assert np.abs(tc[0][1].positions - oc[0][1].positions).max() < TOL
    model = torch_policy.backend.model
    assert compare_with_full_pass(model, stream, instruction.embeddings, oh, oc) < TOL


def test_export_cli_records_checksums_and_refuses_stale_exports(tmp_path, capsys):
    torch.manual_seed(1)
    path = tmp_path / "m"
    save_model(VLATransformer(tiny_config()), path)
    with pytest.raises(FileNotFoundError, match="vla-ros export-onnx"):
        StreamingPolicy.from_pretrained(path, backend="onnx")
    assert export_cli.main([str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["ok"] and result["max_abs_diff"] < TOL
    data = json.loads((path / "config.json").read_text())
    assert data["onnx_weights_sha256"] == data["weights_sha256"] and len(data["onnx_sha256"]) == 64
    StreamingPolicy.from_pretrained(path, backend="onnx")  # fresh export loads
    save_model(VLATransformer(tiny_config()), path)  # new weights, old model.onnx
    with pytest.raises(ModelFileError, match="exported from other weights"):
        StreamingPolicy.from_pretrained(path, backend="onnx")
    assert export_cli.main([str(tmp_path / "missing")]) == 2
    assert "model folder not found" in capsys.readouterr().err


def test_onnx_file_that_does_not_fit_the_config_is_refused(tmp_path, folder):
    other = tmp_path / "other"
    torch.manual_seed(2)
    save_model(VLATransformer(tiny_config(num_hidden_layers=3)), other)
    saved = json.loads((folder / "config.json").read_text())
    cameras, pinned = tuple(saved["cameras"]), saved["pin_first_frame"]
    with pytest.raises(ValueError, match="past_key shape"):
        OnnxBackend(folder / "model.onnx", tiny_config(num_hidden_layers=3, cameras=cameras, pin_first_frame=pinned))
    # the wrong number of cameras, or a pinned frame's graph for a config without one
    mismatched = (
        tiny_config(cameras=cameras)
        if pinned
        else tiny_config(cameras=("camera",) if len(cameras) > 1 else ("camera", "wrist_camera"))
    )
    with pytest.raises(ValueError, match="not the step graph of this config.json"):
        OnnxBackend(folder / "model.onnx", mismatched)
    export_to_folder(VLATransformer(tiny_config(num_hidden_layers=3)), other)
    assert (other / "model.onnx").is_file()


def test_cuda_provider_request_falls_back_to_cpu(folder):
    import onnxruntime as ort

    policy = StreamingPolicy.from_pretrained(folder, backend="onnx", device="cuda")
    expected = (
        "CUDAExecutionProvider" if "CUDAExecutionProvider" in ort.get_available_providers() else "CPUExecutionProvider"
    )
    assert policy.backend.providers[0] == expected
    chunk = policy.select_action(synthetic_stream(policy.config, seconds=0.1, seed=4))
    assert np.all(np.isfinite(chunk.positions))
