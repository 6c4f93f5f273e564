"""ONNX export of the streaming step and an ONNX Runtime backend for ``StreamingPolicy``.

The exported graph is ``model.StepGraph``: new tokens' inputs plus the past keys/values in, actions,
hidden states and the new tokens' keys/values out. Everything that depends on absolute time (the RoPE
cos/sin tables, reduced in integer nanoseconds and float64) and the attention mask are computed outside
the graph by the runtime and passed in, so the graph itself is time-free float32 arithmetic and the ONNX
path is exactly as stream-exact as the torch one.

All sizes are dynamic: frames F, states N, text tokens L, action tokens A, new tokens T, cached tokens C
(any of F, N, L, A, C may be 0). Exported with the TorchScript-based exporter (``dynamo=False``): it
needs no onnxscript and turns fused scaled-dot-product attention into plain MatMul/Softmax nodes.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import torch

from vla_ros.model.config import ModelConfig
from vla_ros.model.model import StepGraph, VLATransformer, step_input_names

log = logging.getLogger(__name__)

OPSET = 17
DYNAMIC_AXES = {
    "images": {0: "frames"},
    "states": {0: "states"},
    "text": {0: "text_tokens"},
    "action_index": {0: "action_tokens"},
    "gather": {0: "new_tokens"},
    "cos": {0: "new_tokens"},
    "sin": {0: "new_tokens"},
    "mask": {0: "new_tokens", 1: "all_tokens"},
    "past_key": {2: "past_tokens"},
    "past_value": {2: "past_tokens"},
    "actions": {0: "new_tokens"},
    "hidden": {0: "new_tokens"},
    "new_key": {2: "new_tokens"},
    "new_value": {2: "new_tokens"},
}


def example_inputs(
    config: ModelConfig, frames: int = 2, states: int = 3, text: int = 4, actions: int = 2, past: int = 5, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random step inputs of the given sizes (for export tracing and parity checks)."""
    rng = np.random.default_rng(seed)
    P, d = config.num_visual_tokens, config.head_dim
    T = frames * P + states + text + actions
    layers, G = config.num_hidden_layers, config.num_key_value_heads
    angle = rng.uniform(0, 2 * np.pi, (T, len(config.rope_periods_ns)))
    return {
        "images": rng.standard_normal((frames, 3, config.image_height, config.image_width)).astype(np.float32),
        "states": rng.standard_normal((states, config.state_dim)).astype(np.float32),
        "text": rng.standard_normal((text, config.text_embedding_dim)).astype(np.float32),
        "action_index": rng.integers(0, config.chunk_length, actions).astype(np.int64),
        "gather": rng.permutation(np.arange(1, T + 1)).astype(np.int64),
        "cos": np.cos(angle).astype(np.float32),
        "sin": np.sin(angle).astype(np.float32),
        "mask": np.zeros((T, past + T), np.float32),
        "past_key": rng.standard_normal((layers, G, past, d)).astype(np.float32),
        "past_value": rng.standard_normal((layers, G, past, d)).astype(np.float32),
        "instruction": rng.standard_normal(config.text_embedding_dim).astype(np.float32),
        **(
            {"image_camera": rng.integers(0, config.frame_embeddings, frames).astype(np.int64)}
            if config.frame_embeddings
            else {}
        ),
    }


def export_onnx(model: VLATransformer, path: str | Path, opset: int = OPSET) -> Path:
    """Write the streaming step of ``model`` to ``path`` and check the file with onnx.checker."""
    import onnx

    path = Path(path)
    graph = StepGraph(model.cpu().eval())
    inputs = example_inputs(model.config)
    args = tuple(torch.from_numpy(inputs[name]) for name in graph.input_names)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notices
        torch.onnx.export(
            graph,
            args,
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=list(graph.input_names),
            output_names=list(StepGraph.output_names),
            dynamic_axes={**DYNAMIC_AXES, "image_camera": {0: "frames"}},
            do_constant_folding=True,
        )
    onnx.checker.check_model(str(path))
    return path


def ort_providers(device: str = "auto") -> list[str]:
    """CUDA execution provider when asked for ("auto" or "cuda") and available, else CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if str(device).startswith("cuda") and "CUDAExecutionProvider" not in available:
        log.warning(
            "device=%s asked for but ONNX Runtime has no CUDAExecutionProvider (has %s): using CPU", device, available
        )
    if str(device) in ("auto",) or str(device).startswith("cuda"):
        if "CUDAExecutionProvider" in available:
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


class OnnxBackend:
    """Runs ``model.onnx`` with ONNX Runtime; the KV cache is a pair of numpy arrays fed in and out.

    The past keys/values are passed as a contiguous copy of the live slots each step (ONNX Runtime
    needs contiguous inputs); with the shipped config that is well under a megabyte per step.
    """

    name = "onnx"

    def __init__(self, path: str | Path, config: ModelConfig, device: str = "auto", threads: int | None = None) -> None:
        import onnxruntime as ort

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"ONNX model not found: {path} (export it with: vla-ros export-onnx {path.parent})")
        self.config = config
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            options.intra_op_num_threads = threads
        # No busy-waiting between runs: the policy shares the CPU with the other nodes (and with torch),
        # and spinning worker threads would steal the cycles they need between ticks.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.providers = ort_providers(device)
        self.session = ort.InferenceSession(str(path), sess_options=options, providers=self.providers)
        self._check_io(path)
        self.cache_k: np.ndarray | None = None
        self.cache_v: np.ndarray | None = None

    def _check_io(self, path: Path) -> None:
        names = tuple(i.name for i in self.session.get_inputs())
        outs = tuple(o.name for o in self.session.get_outputs())
        expected = step_input_names(self.config)
        if names != expected or outs != StepGraph.output_names:
            raise ValueError(
                f"{path}: graph inputs {names} / outputs {outs} are not the step graph of this "
                f"config.json (cameras {list(self.config.cameras)}: expected {expected} / "
                f"{StepGraph.output_names}); re-export it"
            )
        self._input_names = names
        pk = self.session.get_inputs()[names.index("past_key")].shape
        c = self.config
        if [pk[0], pk[1], pk[3]] != [c.num_hidden_layers, c.num_key_value_heads, c.head_dim]:
            raise ValueError(
                f"{path}: past_key shape {pk} does not match config.json "
                f"(layers {c.num_hidden_layers}, kv heads {c.num_key_value_heads}, "
                f"head_dim {c.head_dim}); re-export it from this folder's weights"
            )

    def allocate(self, capacity: int) -> None:
        c = self.config
        shape = (c.num_hidden_layers, c.num_key_value_heads, capacity, c.head_dim)
        self.cache_k = np.zeros(shape, np.float32)
        self.cache_v = np.zeros(shape, np.float32)

    @property
    def cache_bytes(self) -> int:
        return 0 if self.cache_k is None else self.cache_k.nbytes + self.cache_v.nbytes

    def run(self, inputs: dict[str, np.ndarray], past_len: int, keep: int) -> tuple[np.ndarray, np.ndarray]:
        """Same contract as ``TorchBackend.run``."""
        feed = {
            name: np.ascontiguousarray(inputs[name])
            for name in self._input_names
            if name not in ("past_key", "past_value")
        }
        feed["past_key"] = np.ascontiguousarray(self.cache_k[:, :, :past_len])
        feed["past_value"] = np.ascontiguousarray(self.cache_v[:, :, :past_len])
        actions, hidden, new_k, new_v = self.session.run(None, feed)
        if keep:
            self.cache_k[:, :, past_len : past_len + keep] = new_k[:, :, :keep]
            self.cache_v[:, :, past_len : past_len + keep] = new_v[:, :, :keep]
        return actions, hidden

    def move(self, src: int, dst: int, n: int) -> None:
        self.cache_k[:, :, dst : dst + n] = self.cache_k[:, :, src : src + n].copy()
        self.cache_v[:, :, dst : dst + n] = self.cache_v[:, :, src : src + n].copy()

    def synchronize(self) -> None:
        pass

    def describe(self) -> str:
        return f"onnxruntime:{self.providers[0]}"
