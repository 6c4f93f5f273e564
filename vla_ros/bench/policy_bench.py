"""``vla-ros bench policy``: streaming vs full recompute, cached vs uncached chunk decode, torch vs ONNX.

A synthetic 30 Hz camera + 100 Hz joint-state stream (random data, fixed seed, stamps starting at
1.7e9 s like wall-clock ROS time) is fed to the policy one *tick* at a time, a tick being what arrives in
one camera period (one frame + ~3 joint states), as when the node runs the policy once per frame. After a
warm-up that fills the window (W + lateness), each tick is timed for:

* streaming: ``observe(tick)`` on the rolling KV cache (only the new tokens run);
* recompute: a full forward pass over the window's tokens (instruction + observations within W of the
  newest), as a policy without a cache would run, encoders included;
* chunk decode with the cache (``predict_action_chunk``) and without it (full pass over the window plus
  the chunk's tokens);
* the same streaming tick with ONNX Runtime on the CPU and with torch on the CPU;
* the policy node's own tick (``PolicySession``: intake of ROS messages, a 10 Hz tick over 10 joint states
  and 3 frames, chunk post-processing) with each backend, interleaved, and the cost of admitting one
  message (``--no-session`` skips it).

Exactness is measured, not assumed: every token's streamed output and every chunk is compared with one
full pass over the whole stream (max_abs_diff_streaming), and the ONNX stream with the torch stream.
Device timings synchronise the device. The last line is the JSON object.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from vla_ros.cli import print_result
from vla_ros.model.check import compare_with_full_pass, record_stream
from vla_ros.model.config import ModelConfig
from vla_ros.model.io import export_to_folder, load_config, load_model, save_model
from vla_ros.model.model import VLATransformer
from vla_ros.model.runtime import StreamingPolicy, TorchBackend, resolve_device
from vla_ros.model.sequence import ChunkSpec, build_sequence, collate
from vla_ros.model.synthetic import random_instruction, synthetic_stream, ticks
from vla_ros.tokens.types import Kind

START_NS = 1_700_000_000 * 10**9  # wall-clock-like ROS time: exercises the large-stamp path


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3) if values else float("nan")


def _window(policy: StreamingPolicy, config: ModelConfig):
    """Raw observations within W of the newest: what a no-cache policy would recompute over."""
    newest = policy.newest_key[0]
    return [o for o in policy.raw_observations() if newest - o.stamp_ns <= config.window_ns]


def _timed(fn, sync) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    sync()
    return (time.perf_counter() - t0) * 1e3, out


def _run_ticks(policies: dict, tick_list, warm: int, after_tick=None) -> tuple[dict, dict]:
    """Feed every tick to each policy in turn; per policy, observe() and predict_action_chunk() times in
    ms for the ticks after the first ``warm``. ``after_tick(i)`` runs after each tick (untimed here)."""
    tick_ms = {name: [] for name in policies}
    chunk_ms = {name: [] for name in policies}
    for i, tick in enumerate(tick_list):
        for name, pol in policies.items():
            dt, _ = _timed(lambda: pol.observe(tick), pol.backend.synchronize)
            dc, _ = _timed(pol.predict_action_chunk, pol.backend.synchronize)
            if i >= warm:
                tick_ms[name].append(dt)
                chunk_ms[name].append(dc)
        if after_tick is not None:
            after_tick(i)
    return tick_ms, chunk_ms


def run(
    config: ModelConfig | None = None,
    model: VLATransformer | None = None,
    device: str = "auto",
    ticks_timed: int = 40,
    recompute_ticks: int = 40,
    seed: int = 0,
    onnx_device: str | None = "cpu",
    torch_cpu: bool = True,
    check: bool = True,
    threads: int | None = None,
    raw: bool = False,
) -> dict:
    """The figures; with ``raw`` also the timings they summarise (``"raw"``, ms per timed tick, in order:
    ``tick_ms`` and ``chunk_ms`` per policy, ``recompute_ms``, ``chunk_nocache_ms``), for a check that
    recomputes them."""
    torch.manual_seed(seed)
    if model is None:
        model = VLATransformer(config or ModelConfig())
    config = model.config
    model = model.eval()
    dev = resolve_device(device)
    instruction = random_instruction(config, length=min(12, config.max_text_tokens), seed=seed)
    text = instruction.embeddings
    span_s = config.window_seconds + config.max_lateness_s
    warm_ticks = int(np.ceil(span_s * config.camera_rate_hz)) + 5
    n_ticks = warm_ticks + ticks_timed
    stream = synthetic_stream(
        config,
        seconds=(n_ticks + 0.5) / config.camera_rate_hz,
        seed=seed,
        start_ns=START_NS,
        camera_hz=config.camera_rate_hz,
        state_hz=config.state_rate_hz,
    )
    tick_list = ticks(stream)[:n_ticks]
    stream = [o for t in tick_list for o in t]

    # --- 1: streaming vs recompute on the chosen device, interleaved tick by tick so that machine
    # load hits both alike ---
    policy = StreamingPolicy(config, TorchBackend(model, dev))
    policy.set_instruction(instruction)
    sync = policy.backend.synchronize
    recompute_ms, chunk_nocache_ms, window_tokens = [], [], 0

    def no_cache(i: int) -> None:
        nonlocal window_tokens
        if i < n_ticks - recompute_ticks:
            return
        # No cache: a full forward pass over the window's tokens (and the chunk's, for the decode).
        window = _window(policy, config)
        anchor = policy.newest_key

        def full(chunk: bool):
            seq = build_sequence(config, window, text, [ChunkSpec(anchor)] if chunk else (), validate=False)
            with torch.inference_mode():
                return model.full_pass(collate([seq]).to(dev)), seq.num_tokens

        full(False)  # warm this shape
        dt, (_, window_tokens) = _timed(lambda: full(False), sync)
        dc, _ = _timed(lambda: full(True), sync)
        recompute_ms.append(dt)
        chunk_nocache_ms.append(dc)

    tick_ms, chunk_ms = _run_ticks({"stream": policy}, tick_list, warm_ticks, no_cache)

    # --- 2: the backends on the CPU, ONNX Runtime and torch, interleaved with each other ---
    cpu_policies = {}
    onnx_policy = None
    if onnx_device:
        with tempfile.TemporaryDirectory() as tmp:
            cpu_copy = load_copy(model)
            save_model(cpu_copy, tmp)
            export_to_folder(cpu_copy, tmp)
            onnx_policy = StreamingPolicy.from_pretrained(
                tmp, backend="onnx", device=onnx_device, threads=threads or None
            )
        cpu_policies["onnx"] = onnx_policy
    if torch_cpu:
        cpu_policies["torch_cpu"] = StreamingPolicy(config, TorchBackend(load_copy(model), "cpu"))
    for pol in cpu_policies.values():
        pol.set_instruction(instruction)
    if cpu_policies:
        more_tick, more_chunk = _run_ticks(cpu_policies, tick_list, warm_ticks)
        tick_ms.update(more_tick)
        chunk_ms.update(more_chunk)

    stream_ms, chunk_kv_ms = tick_ms["stream"], chunk_ms["stream"]
    result = {
        "tick_ms_p50_streaming": _pct(stream_ms, 50),
        "tick_ms_p99_streaming": _pct(stream_ms, 99),
        "tick_ms_p50_recompute": _pct(recompute_ms, 50),
        "tick_ms_p99_recompute": _pct(recompute_ms, 99),
        "streaming_speedup": round(_pct(recompute_ms, 50) / _pct(stream_ms, 50), 2),
        "chunk_ms_p50_kv": _pct(chunk_kv_ms, 50),
        "chunk_ms_p99_kv": _pct(chunk_kv_ms, 99),
        "chunk_ms_p50_nocache": _pct(chunk_nocache_ms, 50),
        "kv_decode_speedup": round(_pct(chunk_nocache_ms, 50) / _pct(chunk_kv_ms, 50), 2),
    }
    period_ms = 1e3 / config.camera_rate_hz
    result["deadline_ms"] = round(period_ms, 3)
    result["missed_deadlines"] = int(sum(a + b > period_ms for a, b in zip(stream_ms, chunk_kv_ms)))
    if onnx_policy is not None:
        key = "onnx_cpu_ms_p50" if onnx_device == "cpu" else "onnx_cuda_ms_p50"
        result[key] = _pct(tick_ms["onnx"], 50)
        result[key.replace("_ms_p50", "_chunk_ms_p50")] = _pct(chunk_ms["onnx"], 50)
        result["onnx_provider"] = onnx_policy.backend.providers[0]
    if torch_cpu:
        result["torch_cpu_ms_p50"] = _pct(tick_ms["torch_cpu"], 50)
        result["torch_cpu_chunk_ms_p50"] = _pct(chunk_ms["torch_cpu"], 50)

    # --- exactness: streamed outputs vs one full pass over the whole stream; ONNX vs torch ---
    if check:
        ref = StreamingPolicy(config, TorchBackend(model, dev))
        ref.set_instruction(instruction)
        chunk_after = range(n_ticks - 10, n_ticks)
        hidden, chunks = record_stream(ref, tick_list, chunk_after)
        diff = compare_with_full_pass(model, stream, text, hidden, chunks)
        result["max_abs_diff_streaming"] = float(f"{diff:.3g}")
        if onnx_policy is not None:
            onnx_policy.reset()
            o_hidden, o_chunks = record_stream(onnx_policy, tick_list, chunk_after)
            diff = max(float(np.abs(o_hidden[k] - hidden[k]).max()) for k in hidden)
            diff = max(
                [diff] + [float(np.abs(a.positions - b.positions).max()) for (_, a), (_, b) in zip(o_chunks, chunks)]
            )
            result["max_abs_diff_onnx_torch"] = float(f"{diff:.3g}")

    result.update(
        {
            "cache_mb": round(policy.cache_mb, 3),
            "cache_capacity_tokens": policy.capacity,
            "window_tokens": window_tokens,
            "tokens_per_tick": round(
                sum(config.num_visual_tokens if o.kind == Kind.IMAGE else 1 for t in tick_list[warm_ticks:] for o in t)
                / max(1, ticks_timed),
                2,
            ),
            "ticks": ticks_timed,
            "device": str(dev),
            "torch_threads": torch.get_num_threads(),
            "parameters": model.num_parameters(),
            "window_seconds": config.window_seconds,
            "torch": torch.__version__,
            "machine": platform.machine(),
        }
    )
    if raw:
        result["raw"] = {
            "tick_ms": tick_ms,
            "chunk_ms": chunk_ms,
            "recompute_ms": recompute_ms,
            "chunk_nocache_ms": chunk_nocache_ms,
        }
    return result


def session_ticks(
    model: VLATransformer,
    ticks_timed: int = 60,
    seed: int = 0,
    threads: int | None = 1,
    rate_hz: float = 10.0,
    raw: bool = False,
) -> dict:
    """The node's tick through ``PolicySession`` on ROS messages (random 320x240 frames at 30 Hz, joint
    states at 100 Hz, stamps from 1.7e9 s), ONNX Runtime and torch on the CPU, interleaved tick by tick.
    With ``raw`` also the timings (``"raw"``: ``session_tick_ms`` per backend, ``intake_us`` per message
    type, in order)."""
    from sensor_msgs.msg import Image, JointState

    from vla_ros.policy import PolicySession
    from vla_ros.tokens.text import shared_encoder

    config = model.config
    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 256, 320 * 240 * 3, dtype=np.uint8).tobytes() for _ in range(4)]
    names = list(config.joint_names)

    def messages(t0: int, t1: int):
        """(type, msg) stamped in [t0, t1), in stamp order."""
        out = []
        for t in range(t0, t1, 10_000_000):
            q = rng.normal(0.0, 0.3, len(names)).tolist()
            msg = JointState(name=names, position=q, velocity=[0.0] * len(names))
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t, 10**9)
            out.append((t, "sensor_msgs/msg/JointState", msg))
        period = 10**9 // 30
        for t in range(-(-t0 // period) * period, t1, period):
            msg = Image(height=240, width=320, encoding="rgb8", step=960, data=frames[(t // period) % 4])
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(t, 10**9)
            out.append((t, "sensor_msgs/msg/Image", msg))
        return [(name, msg) for _, name, msg in sorted(out, key=lambda e: e[0])]

    encoder = shared_encoder(config.max_text_tokens)
    instruction = "pick up the red cup"
    with tempfile.TemporaryDirectory() as tmp:
        save_model(load_copy(model), tmp, onnx=True)
        sessions = {
            backend: PolicySession.from_pretrained(tmp, backend=backend, device="cpu", threads=threads, encoder=encoder)
            for backend in ("onnx", "torch")
        }
    for session in sessions.values():
        session.set_instruction(instruction, START_NS)
    period_ns = round(1e9 / rate_hz)
    warm = int(np.ceil((config.window_seconds + config.max_lateness_s) * rate_hz)) + 3
    tick_ms = {b: [] for b in sessions}
    intake_us = {"sensor_msgs/msg/JointState": [], "sensor_msgs/msg/Image": []}
    diff = 0.0
    for i in range(warm + ticks_timed):
        t0 = START_NS + i * period_ns
        batch = messages(t0, t0 + period_ns)
        chunks = {}
        for backend, session in sessions.items():
            for type_name, msg in batch:
                a = time.perf_counter()
                session.add_message(
                    type_name,
                    msg,
                    t0 + period_ns,
                    "/camera/image_raw" if type_name.endswith("Image") else "/joint_states",
                )
                if backend == "onnx" and i >= warm:
                    intake_us[type_name].append((time.perf_counter() - a) * 1e6)
            a = time.perf_counter()
            chunks[backend] = session.tick(t0 + period_ns).chunk
            if i >= warm:
                tick_ms[backend].append((time.perf_counter() - a) * 1e3)
        if chunks["onnx"] is not None and chunks["torch"] is not None:
            diff = max(diff, float(np.abs(chunks["onnx"].positions - chunks["torch"].positions).max()))
    result = {
        "session_tick_ms_p50_onnx": _pct(tick_ms["onnx"], 50),
        "session_tick_ms_p99_onnx": _pct(tick_ms["onnx"], 99),
        "session_tick_ms_p50_torch": _pct(tick_ms["torch"], 50),
        "session_tick_ms_p99_torch": _pct(tick_ms["torch"], 99),
        "session_rate_hz": rate_hz,
        "intake_us_p50_joint_state": _pct(intake_us["sensor_msgs/msg/JointState"], 50),
        "intake_us_p50_image_320x240": _pct(intake_us["sensor_msgs/msg/Image"], 50),
        "session_max_abs_diff_onnx_torch": float(f"{diff:.3g}"),
    }
    if raw:
        result["raw"] = {"session_tick_ms": tick_ms, "intake_us": intake_us}
    return result


def load_copy(model: VLATransformer) -> VLATransformer:
    copy = VLATransformer(model.config)
    copy.load_state_dict({k: v.detach().cpu() for k, v in model.state_dict().items()})
    return copy.eval()


def resolve_model(spec: str | None, seed: int) -> VLATransformer:
    """None: the shipped default config with random weights; a folder: its weights (or its config with
    random weights if it has none yet); a .json file: that config with random weights."""
    torch.manual_seed(seed)
    if spec is None:
        return VLATransformer(ModelConfig())
    path = Path(spec)
    if path.is_dir():
        if (path / "model.safetensors").is_file():
            return load_model(path)
        return VLATransformer(load_config(path))
    if path.is_file():
        return VLATransformer(ModelConfig.from_dict(json.loads(path.read_text()), source=str(path)))
    raise FileNotFoundError(f"--config: no such file or folder: {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros bench policy",
        description="Streaming KV-cache policy vs full recompute, cached vs uncached chunk decode, torch vs ONNX "
        "Runtime, and the measured streaming error; the last line of output is a JSON object.",
        epilog="example: vla-ros bench policy --json",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    parser.add_argument(
        "--config", default=None, help="model folder or config.json (default: the shipped config, random weights)"
    )
    parser.add_argument("--device", default="auto", help="torch device for the streaming figures: auto, cpu, cuda")
    parser.add_argument("--onnx-device", default="cpu", help="ONNX Runtime device: cpu, cuda, or none to skip")
    parser.add_argument("--ticks", type=int, default=40, help="timed ticks after the window is full (default 40)")
    parser.add_argument(
        "--recompute-ticks",
        type=int,
        default=40,
        help="last ticks also timed without the cache (default 40: all timed ticks)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads for torch and ONNX Runtime (default 1, as the node on a shared CPU; 0 = the libraries' "
        "defaults)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-check", action="store_true", help="skip the exactness comparisons")
    parser.add_argument("--no-session", action="store_true", help="skip the node's tick through the policy session")
    parser.add_argument(
        "--raw", default=None, metavar="FILE", help="also write the timings behind the figures to FILE (JSON)"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = resolve_model(args.config, args.seed)
    result = run(
        model=model,
        device=args.device,
        ticks_timed=args.ticks,
        recompute_ticks=args.recompute_ticks,
        seed=args.seed,
        onnx_device=None if args.onnx_device == "none" else args.onnx_device,
        check=not args.no_check,
        threads=args.threads,
        raw=bool(args.raw),
    )
    samples = result.pop("raw", {})
    if not args.no_session:
        session = session_ticks(
            model, ticks_timed=args.ticks, seed=args.seed, threads=args.threads or None, raw=bool(args.raw)
        )
        samples.update(session.pop("raw", {}))
        result.update(session)
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump(samples, f)
    print_result(result, args.json, 26)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
