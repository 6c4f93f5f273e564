"""policy_node's parameters (timed tokens -> streaming Transformer -> action chunks). No rclpy import."""

from __future__ import annotations

from vla_ros.params.spec import ParamSpec

DEFAULT_MODEL = "vla_cups"

PARAMS = [
    ParamSpec("model", DEFAULT_MODEL, "model folder, or a name under the package's models/ (changeable: the new model is loaded and checked first)"),
    ParamSpec("backend", "torch", "inference backend", read_only=True, choices=("torch", "onnx")),
    ParamSpec("device", "auto", "auto = CUDA when available, else CPU; or cpu, cuda, cuda:1", read_only=True),
    ParamSpec("threads", 0, "CPU threads for inference (0 = library default)", read_only=True, min_value=0, max_value=256),
    ParamSpec("rate_hz", 10.0, "tick rate on the node's clock (0 = tick only on frames)", read_only=True, min_value=0.0, max_value=200.0),
    ParamSpec("tick_on_frame", False, "also tick whenever a camera frame is accepted"),
    ParamSpec("instruction", "", "task in words; also settable on /vla/instruction (the newest wins)"),
    ParamSpec("publish_horizon", 0, "chunk points to publish (0 = the model's whole chunk)", min_value=0, max_value=1000),
    ParamSpec("chunk_smoothing_degree", 3, "fit each joint's chunk with a polynomial in time of this degree before publishing (0 = off): removes point-to-point noise the safety filter would read as acceleration", min_value=0, max_value=8),
    ParamSpec("max_observation_age_s", 0.5, "newest observation older than this on the node's clock: no chunk", min_value=0.01, max_value=60.0),
    ParamSpec("image_transport", "raw", "camera input: raw (sensor_msgs/Image) or compressed (CompressedImage on <topic>/compressed)", read_only=True, choices=("raw", "compressed")),
    ParamSpec("image_topic", "/camera/image_raw", "camera topic (remapping works too)", read_only=True),
    ParamSpec("sensor_qos", "reliable", "camera/joint subscriptions: reliable (the sim, most drivers) or best_effort (drivers using SensorDataQoS)", read_only=True, choices=("reliable", "best_effort")),
    ParamSpec("input_width", 0, "required camera width in pixels (0 = any; frames of another size are rejected)", read_only=True, min_value=0, max_value=8192),
    ParamSpec("input_height", 0, "required camera height in pixels (0 = any)", read_only=True, min_value=0, max_value=8192),
    ParamSpec("diagnostics_period_s", 1.0, "period of the status on /diagnostics (node clock)", read_only=True, min_value=0.05, max_value=60.0),
    ParamSpec("debug_attention", False, "publish ~/attention_overlay (rgb8): the newest frame as the model crops it, with the heat map of its patches' attention to the instruction's colour word (all words when it names none); one full pass with attention weights after a chunk (backend onnx: the folder's torch weights are loaded for it)"),
    ParamSpec("debug_attention_rate_hz", 2.0, "at most this many attention overlays per second (node clock)", min_value=0.1, max_value=30.0),
]
