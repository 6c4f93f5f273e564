"""``vla-ros export-onnx <models/name>``: write model.onnx next to model.safetensors and check it.

The exported graph is the streaming step with the KV cache as explicit inputs/outputs
(``model.StepGraph``). After export the file is run with ONNX Runtime on random step inputs of several
shapes (empty cache, state-only tick, chunk decode, text rebuild) and compared with torch; the command
fails if any output differs by more than --tolerance. The folder's config.json records the file's sha256
and the weights' sha256 it came from, so a stale export is refused at load time.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from vla_ros.model.io import ModelFileError, export_to_folder, load_model
from vla_ros.model.model import StepGraph
from vla_ros.model.onnx_backend import example_inputs

# Shapes checked after export: (frames, states, text, actions, past).
CHECK_SHAPES = ((2, 3, 4, 2, 5), (0, 1, 0, 0, 40), (1, 3, 0, 0, 100), (0, 0, 0, 16, 120), (0, 0, 12, 0, 0))


def parity(model, onnx_path, device: str = "cpu") -> float:
    """Max |ONNX Runtime - torch| over every output, for the CHECK_SHAPES step inputs."""
    import onnxruntime as ort

    from vla_ros.model.onnx_backend import ort_providers

    session = ort.InferenceSession(str(onnx_path), providers=ort_providers(device))
    graph = StepGraph(model.eval())
    worst = 0.0
    for i, (f, n, t, a, c) in enumerate(CHECK_SHAPES):
        a = min(a, model.config.chunk_length)
        t = min(t, model.config.max_text_tokens)
        inputs = example_inputs(model.config, frames=f, states=n, text=t, actions=a, past=c, seed=i)
        got = session.run(None, inputs)
        with torch.inference_mode():
            want = graph(*[torch.from_numpy(inputs[name]) for name in graph.input_names])
        worst = max([worst] + [float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want)])
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vla-ros export-onnx",
        description="Export a model folder's streaming step to model.onnx (KV cache as explicit inputs/outputs) and "
        "check it against torch with ONNX Runtime.",
        epilog="example: vla-ros export-onnx models/vla_cups",
    )
    parser.add_argument("folder", help="model folder with config.json and model.safetensors")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="max allowed |onnx - torch| (default 1e-4)")
    parser.add_argument("--no-check", action="store_true", help="skip the ONNX Runtime parity check")
    parser.add_argument("--json", action="store_true", help="print only a JSON line")
    args = parser.parse_args(argv)
    try:
        model = load_model(args.folder)
        path = export_to_folder(model, args.folder)
    except (FileNotFoundError, ModelFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = {"onnx": str(path), "bytes": path.stat().st_size}
    if not args.no_check:
        diff = parity(model, path)
        result["max_abs_diff"] = float(f"{diff:.3g}")
        result["ok"] = diff <= args.tolerance
    if not args.json:
        print(f"wrote {path} ({result['bytes']} bytes)")
        if "max_abs_diff" in result:
            print(f"ONNX Runtime vs torch: max |diff| = {result['max_abs_diff']} (tolerance {args.tolerance})")
    print(json.dumps(result))
    return 0 if result.get("ok", True) else 1


if __name__ == "__main__":
    raise SystemExit(main())
