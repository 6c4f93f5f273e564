"""The GPU host's install is explicit (make setup GPU=1, requirements-gpu.txt) and the CPU one stays the default;
device "auto" picks CUDA (torch) and the CUDA execution provider (ONNX Runtime) exactly where they exist."""

import re
import shutil
import subprocess

import pytest
from ros_helpers import REPO

pytestmark = pytest.mark.unit  # no ROS node, no DDS, no wall-clock timing: `make test` runs it beside others


def _pins(path):
    return dict(re.findall(r"^([A-Za-z0-9_.\-\[\],]+?)={2,3}(\S+)$", (REPO / path).read_text(), re.M))


def test_gpu_requirements_replace_the_cpu_wheels_at_the_same_torch():
    cpu, gpu = _pins("requirements.txt"), _pins("requirements-gpu.txt")
    assert gpu["torch"] == cpu["torch"]  # the same torch, only the build differs
    assert "===" in (REPO / "requirements-gpu.txt").read_text()  # never a local +cpu build
    assert any(name.startswith("onnxruntime-gpu") for name in gpu) and "onnxruntime" not in gpu
    assert "onnxruntime" in cpu and not any(name.startswith("onnxruntime-gpu") for name in cpu)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_setup_is_cpu_by_default_and_cuda_with_gpu_1():
    def recipe(*args):
        return subprocess.run(
            ["make", "-n", "-B", "setup", *args], capture_output=True, text=True, cwd=REPO, check=True
        ).stdout

    cpu, gpu = recipe(), recipe("GPU=1")
    assert "-r requirements.txt" in cpu and "requirements-gpu.txt" not in cpu
    assert "-r requirements-gpu.txt" in gpu and "uninstall -y -q torch onnxruntime" in gpu
    # torch from another index only when asked for (TORCH_INDEX); by default that step is skipped
    assert 'if [ -n "" ]; then' in cpu
    assert '--index-url "https://example.invalid/cpu"' in recipe("TORCH_INDEX=https://example.invalid/cpu")


def test_device_auto_picks_cuda_exactly_where_it_exists():
    import onnxruntime as ort
    import torch

    from vla_ros.model.onnx_backend import ort_providers
    from vla_ros.model.runtime import resolve_device

    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    cuda_ep = "CUDAExecutionProvider" in ort.get_available_providers()
    assert ort_providers("auto")[0] == ("CUDAExecutionProvider" if cuda_ep else "CPUExecutionProvider")
    assert ort_providers("cpu") == ["CPUExecutionProvider"]
