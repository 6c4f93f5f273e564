"""Model folders: ``models/<name>/config.json`` + ``model.safetensors`` (+ ``model.onnx``), saved and checked.

``config.json`` is flat (the tokenizer reads image size, normalisation and joint names from its top
level) and describes the folder: the architecture and time fields of ``ModelConfig``, the derived sizes,
the sha256 of the weights file, and free-form ``metadata`` (training data hash, git commit, step...).
Loading fails early and says what is wrong: a missing folder or file names the path; a checksum mismatch
names the file and both hashes; a weights file that does not fit the config lists every missing,
unexpected or mis-shaped tensor with both shapes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch

from vla_ros.model.config import DERIVED_KEYS, ModelConfig
from vla_ros.model.model import VLATransformer

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ONNX_FILE = "model.onnx"
MODEL_TYPE = "vla_ros.streaming_vla"
FORMAT_VERSION = 1
FILE_KEYS = (
    "model_type",
    "format_version",
    "weights_file",
    "weights_sha256",
    "onnx_file",
    "onnx_sha256",
    "onnx_weights_sha256",
    "metadata",
)


class ModelFileError(ValueError):
    """A model folder whose files do not agree with each other (checksum, names, shapes)."""


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _folder(folder: str | Path) -> Path:
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(
            f"model folder not found: {folder} (expected {folder}/{CONFIG_FILE} and {folder}/{WEIGHTS_FILE})"
        )
    return folder


def read_config_json(folder: str | Path) -> dict[str, Any]:
    path = _folder(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"model config not found: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelFileError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ModelFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def load_config(folder: str | Path) -> ModelConfig:
    """Read and validate ``config.json`` (ModelConfig's ValueError, prefixed with the path)."""
    path = Path(folder) / CONFIG_FILE
    data = read_config_json(folder)
    if data.get("model_type", MODEL_TYPE) != MODEL_TYPE:
        raise ModelFileError(f"{path}: model_type={data['model_type']!r} is not {MODEL_TYPE!r}")
    if int(data.get("format_version", FORMAT_VERSION)) > FORMAT_VERSION:
        raise ModelFileError(
            f"{path}: format_version={data['format_version']} is newer than this code reads ({FORMAT_VERSION})"
        )
    known = {f for f in ModelConfig.__dataclass_fields__} | set(DERIVED_KEYS) | set(FILE_KEYS)
    unknown = sorted(set(data) - known)
    if unknown:
        log.warning("%s: ignoring unknown keys %s", path, unknown)
    try:
        return ModelConfig.from_dict(data, source=str(path))
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: {exc}") from exc


def save_model(
    model: VLATransformer, folder: str | Path, metadata: dict[str, Any] | None = None, onnx: bool = False
) -> Path:
    """Write config.json (with the weights' sha256 and ``metadata``) and model.safetensors into ``folder``;
    with ``onnx`` also export model.onnx and record its checksum."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / WEIGHTS_FILE
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in model.state_dict().items()}
    # One metadata key: safetensors writes its metadata map in hash order, so two keys come out in either
    # order and the same weights would get two checksums. The model type is in config.json.
    save_file(tensors, str(weights), metadata={"format": "pt"})
    data = {
        "model_type": MODEL_TYPE,
        "format_version": FORMAT_VERSION,
        **model.config.to_dict(),
        "weights_file": WEIGHTS_FILE,
        "weights_sha256": sha256_file(weights),
        "metadata": dict(metadata or {}),
    }
    old = folder / CONFIG_FILE
    if old.is_file():  # keep what a previous save recorded that this one does not override
        try:
            previous = json.loads(old.read_text())
            data["metadata"] = {**previous.get("metadata", {}), **data["metadata"]}
            # Keep the record of an earlier ONNX export: check_onnx then sees it came from other weights.
            for key in ("onnx_file", "onnx_sha256", "onnx_weights_sha256"):
                if key in previous:
                    data[key] = previous[key]
        except json.JSONDecodeError:
            pass
    _write_json(folder / CONFIG_FILE, data)
    if onnx:
        export_to_folder(model, folder)
    return folder


def export_to_folder(model: VLATransformer, folder: str | Path) -> Path:
    """Export model.onnx next to the weights and record its sha256 and the weights' sha256 it came from."""
    from vla_ros.model.onnx_backend import export_onnx

    folder = _folder(folder)
    data = read_config_json(folder)
    path = export_onnx(model, folder / ONNX_FILE)
    data.update(onnx_file=ONNX_FILE, onnx_sha256=sha256_file(path), onnx_weights_sha256=data.get("weights_sha256"))
    _write_json(folder / CONFIG_FILE, data)
    return path


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)  # atomic: a reader never sees half a config


def check_weights(config: ModelConfig, tensors: dict[str, torch.Tensor], source: str) -> None:
    """Compare tensor names and shapes with what ``config`` builds; one error listing every difference."""
    expected = {name: tuple(t.shape) for name, t in VLATransformer(config).state_dict().items()}
    found = {name: tuple(t.shape) for name, t in tensors.items()}
    problems = []
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing:
        problems.append(f"missing tensors {missing}")
    if unexpected:
        problems.append(f"unexpected tensors {unexpected}")
    for name in sorted(set(expected) & set(found)):
        if expected[name] != found[name]:
            problems.append(f"{name}: shape {list(found[name])} in the file, config.json needs {list(expected[name])}")
        elif tensors[name].dtype != torch.float32:
            problems.append(f"{name}: dtype {tensors[name].dtype}, expected torch.float32")
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise ModelFileError(f"{source} does not match its config.json: " + "; ".join(shown))


# Tensors whose name and meaning changed: old name -> (new name, conversion). Folders written before a change
# load unchanged (their weights file and its checksum stay as they were); the next save writes the new name.
LEGACY_KEYPOINT_TEMPERATURE = "patch_encoder.keypoint_temperature"


def upgrade_legacy_tensors(tensors: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Convert tensors saved under an older name: the spatial softmax's raw ``keypoint_temperature`` became
    ``keypoint_log_temperature`` (positive by construction); its log is computed in float64, so the
    model computes the same function to float32 rounding."""
    if LEGACY_KEYPOINT_TEMPERATURE not in tensors:
        return tensors
    tensors = dict(tensors)
    raw = tensors.pop(LEGACY_KEYPOINT_TEMPERATURE)
    if not bool((raw > 0).all()):
        raise ModelFileError(
            f"{source}: {LEGACY_KEYPOINT_TEMPERATURE} = {raw.tolist()} is not positive (its spatial "
            f"softmax picks the weakest pixel); this version keeps the temperature positive and "
            f"cannot load it: retrain the model"
        )
    tensors[LEGACY_KEYPOINT_TEMPERATURE.replace("temperature", "log_temperature")] = raw.double().log().to(raw.dtype)
    return tensors


def load_model(folder: str | Path, device: str | torch.device = "cpu", verify_checksum: bool = True) -> VLATransformer:
    """Load a model folder with every check: config, file presence, sha256, tensor names and shapes."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = _folder(folder)
    config = load_config(folder)
    data = read_config_json(folder)
    weights = folder / data.get("weights_file", WEIGHTS_FILE)
    if not weights.is_file():
        raise FileNotFoundError(f"model weights not found: {weights}")
    if verify_checksum:
        expected = data.get("weights_sha256")
        if not expected:
            raise ModelFileError(
                f"{folder / CONFIG_FILE}: no weights_sha256 recorded; save the model with vla_ros.model.io.save_model"
            )
        actual = sha256_file(weights)
        if actual != expected:
            raise ModelFileError(
                f"{weights}: sha256 {actual} does not match weights_sha256 {expected} in "
                f"{folder / CONFIG_FILE} (file changed or truncated)"
            )
    try:
        tensors = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelFileError(f"{weights}: not a readable safetensors file ({exc})") from exc
    tensors = upgrade_legacy_tensors(tensors, str(weights))
    check_weights(config, tensors, str(weights))
    model = VLATransformer(config)
    model.load_state_dict(tensors, strict=True)
    return model.to(device).eval()


def check_onnx(folder: str | Path) -> Path:
    """The folder's model.onnx exists, is the file that was exported, and came from the current weights."""
    folder = _folder(folder)
    data = read_config_json(folder)
    path = folder / data.get("onnx_file", ONNX_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"ONNX model not found: {path} (export it with: vla-ros export-onnx {folder})")
    if data.get("onnx_sha256") and sha256_file(path) != data["onnx_sha256"]:
        raise ModelFileError(f"{path}: sha256 does not match onnx_sha256 in {folder / CONFIG_FILE}; re-export it")
    if data.get("onnx_weights_sha256") and data.get("onnx_weights_sha256") != data.get("weights_sha256"):
        raise ModelFileError(
            f"{path} was exported from other weights than {folder / WEIGHTS_FILE}; re-export it "
            f"with: vla-ros export-onnx {folder}"
        )
    return path


def resolve_model_dir(model: str | Path) -> Path:
    """A model folder path, or a name under <share>/models/ (colcon install, or the source tree in pip mode)."""
    text = str(model)
    path = Path(text).expanduser()
    if path.is_absolute() or path.exists() or "/" in text:
        return path
    from vla_ros.launch_runner.packages import find_package_share

    return find_package_share("vla_ros") / "models" / text
