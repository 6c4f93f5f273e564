"""The policy model: a streaming Transformer over timed tokens with an exact rolling KV cache (no rclpy).

Layout (lerobot-style split of configuration, modeling and runtime):

* ``config``: ``ModelConfig``, the dataclass behind ``models/<name>/config.json``.
* ``timeline``: the attention rule (time window, pinned instruction, chunks) and the time-RoPE tables.
* ``layers`` / ``model``: the Transformer (``VLATransformer``) and its one shared ``step`` (``StepInputs``).
* ``sequence``: observations -> token layout, training batches (``build_sequence``, ``collate``).
* ``runtime``: ``StreamingPolicy``, the rolling-cache runtime the node drives (torch backend).
* ``onnx_backend`` / ``export_onnx``: ONNX export of the step and the ONNX Runtime backend.
* ``io``: ``save_model`` / ``load_model`` with checksum, name and shape checks.
"""

from vla_ros.model.config import ModelConfig, tiny_config
from vla_ros.model.io import ModelFileError, load_config, load_model, save_model
from vla_ros.model.model import StepGraph, StepInputs, VLATransformer
from vla_ros.model.runtime import ObserveReport, PolicyChunk, PolicyNotReady, StreamingPolicy, TorchBackend
from vla_ros.model.sequence import ChunkSpec, TokenBatch, build_sequence, collate

__all__ = [
    "ChunkSpec",
    "ModelConfig",
    "ModelFileError",
    "ObserveReport",
    "PolicyChunk",
    "PolicyNotReady",
    "StepGraph",
    "StepInputs",
    "StreamingPolicy",
    "TokenBatch",
    "TorchBackend",
    "VLATransformer",
    "build_sequence",
    "collate",
    "load_config",
    "load_model",
    "save_model",
    "tiny_config",
]
