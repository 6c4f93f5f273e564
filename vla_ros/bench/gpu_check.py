"""GPU check: the policy benchmark and the exactness/parity checks on CUDA, as one JSON line.

Run it where a GPU is: ``python -m vla_ros.bench.gpu_check`` (or ``vla-ros bench policy --device cuda``
for the figures alone). It needs nothing from the network: torch, onnxruntime, safetensors and numpy
from the environment, random weights, synthetic streams. On a machine without CUDA it says so and exits 0.

Checks, each a max |difference| that must stay under --tolerance (1e-4):

* stream_vs_full: the streamed outputs on CUDA (every token's hidden state and every chunk, over a
  stream of 6 windows with evictions) against one full forward pass on CUDA;
* late_vs_full: the same with frames arriving 30 ms after the joint states (replays on CUDA);
* cuda_vs_cpu: the CUDA stream against the CPU stream;
* time_shift: chunks of the same stream with every stamp moved by 1.7e9 s;
* ort_vs_torch: ONNX Runtime (CUDA execution provider when present) against torch on CUDA;

for the tiny test config and the shipped config. Then the policy bench runs on CUDA (torch CUDA for the
streaming figures, ONNX Runtime with the CUDA provider when present).
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time

import numpy as np
import torch

from vla_ros.model.check import compare_with_full_pass, max_stream_diff, record_stream
from vla_ros.model.config import ModelConfig, tiny_config
from vla_ros.model.io import export_to_folder, save_model
from vla_ros.model.model import VLATransformer
from vla_ros.model.runtime import StreamingPolicy, TorchBackend
from vla_ros.model.synthetic import random_instruction, shifted, synthetic_stream, ticks
from vla_ros.tokens.types import Kind

EPOCH_NS = 1_700_000_000 * 10**9


def environment() -> dict:
    info = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available(), "machine": platform.machine()}
    try:
        import onnxruntime as ort

        info["onnxruntime"] = ort.__version__
        info["ort_providers"] = ort.get_available_providers()
    except ImportError as exc:  # reported, not fatal: the torch checks still run
        info["onnxruntime"] = f"unavailable: {exc}"
        info["ort_providers"] = []
    if info["cuda_available"]:
        info["device_name"] = torch.cuda.get_device_name(0)
        info["torch_cuda"] = torch.version.cuda
    return info


def _copy(model: VLATransformer) -> VLATransformer:
    copy = VLATransformer(model.config)
    copy.load_state_dict({k: v.detach().cpu() for k, v in model.state_dict().items()})
    return copy.eval()


def parity_checks(config: ModelConfig, device: str, seed: int = 0) -> dict:
    """The checks listed in the module docstring for one config; values are max |differences|."""
    torch.manual_seed(seed)
    model = VLATransformer(config).eval()
    instruction = random_instruction(config, 8, seed=seed)
    stream = synthetic_stream(config, seconds=6 * config.window_seconds + 0.05, seed=seed, start_ns=EPOCH_NS)
    tick_list = ticks(stream)
    chunk_after = range(2, len(tick_list), 5)

    def run(policy, ticks_):
        policy.set_instruction(instruction)
        return record_stream(policy, ticks_, chunk_after)

    out = {}
    on_device = run(StreamingPolicy(config, TorchBackend(model, device)), tick_list)
    out["stream_vs_full"] = compare_with_full_pass(model, stream, instruction.embeddings, *on_device)
    late = sorted(stream, key=lambda o: o.stamp_ns + (30_000_000 if o.kind == Kind.IMAGE else 0))
    late_policy = StreamingPolicy(config, TorchBackend(model, device))
    late_hidden, _ = run(late_policy, [[o] for o in late])
    _, late_chunks = record_stream(late_policy, [[]], chunk_after=[0])
    out["late_vs_full"] = compare_with_full_pass(model, stream, instruction.embeddings, late_hidden, late_chunks)
    on_cpu = run(StreamingPolicy(config, TorchBackend(_copy(model), "cpu")), tick_list)
    out["cuda_vs_cpu"] = max_stream_diff(on_device, on_cpu)
    moved = run(
        StreamingPolicy(config, TorchBackend(model, device)), ticks(shifted(stream, -EPOCH_NS + 86_400 * 10**9))
    )
    out["time_shift"] = max(
        float(np.abs(a.positions - b.positions).max()) for (_, a), (_, b) in zip(on_device[1], moved[1])
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cpu_model = _copy(model)
            save_model(cpu_model, tmp)
            export_to_folder(cpu_model, tmp)
            ort_policy = StreamingPolicy.from_pretrained(tmp, backend="onnx", device=device)
        out["ort_provider"] = ort_policy.backend.providers[0]
        out["ort_vs_torch"] = max_stream_diff(run(ort_policy, tick_list), on_device)
    except ImportError as exc:
        out["ort_provider"] = f"unavailable: {exc}"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vla_ros.bench.gpu_check",
        description="Policy benchmark and exactness/parity checks on CUDA; the last line is a JSON object.",
        epilog="example: python -m vla_ros.bench.gpu_check --ticks 60",
    )
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--ticks", type=int, default=60, help="timed ticks of the CUDA bench")
    parser.add_argument("--skip-bench", action="store_true", help="only the checks")
    parser.add_argument("--force-cpu", action="store_true", help="run the checks on the CPU (to try the script)")
    args = parser.parse_args(argv)
    result = {"environment": environment()}
    if not result["environment"]["cuda_available"] and not args.force_cpu:
        result["ok"] = True
        result["skipped"] = "CUDA is not available on this machine (torch.cuda.is_available() is False)"
        print(json.dumps(result))
        return 0
    device = "cpu" if args.force_cpu else "cuda"
    t0 = time.perf_counter()
    checks, ok = {}, True
    for name, config in (("tiny", tiny_config()), ("shipped", ModelConfig())):
        values = parity_checks(config, device)
        for key, value in values.items():
            if isinstance(value, float):
                ok &= value < args.tolerance
                values[key] = float(f"{value:.3g}")
        checks[name] = values
    result["checks"] = checks
    result["checks_s"] = round(time.perf_counter() - t0, 1)
    if not args.skip_bench:
        from vla_ros.bench.policy_bench import run

        providers = result["environment"]["ort_providers"]
        onnx_device = "cuda" if "CUDAExecutionProvider" in providers and device == "cuda" else "cpu"
        torch.manual_seed(0)
        result["bench"] = run(
            model=VLATransformer(ModelConfig()),
            device=device,
            ticks_timed=args.ticks,
            onnx_device=onnx_device if providers else None,
        )
        if onnx_device == "cuda":  # the CPU ONNX figure too, for the README table
            cpu = run(
                model=VLATransformer(ModelConfig()),
                device="cpu",
                ticks_timed=20,
                recompute_ticks=5,
                onnx_device="cpu",
                check=False,
            )
            result["bench"]["onnx_cpu_ms_p50"] = cpu["onnx_cpu_ms_p50"]
        ok &= result["bench"].get("max_abs_diff_streaming", 0.0) < args.tolerance
    result["ok"] = bool(ok)
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
