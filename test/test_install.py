"""What a user installs works from the install alone: the wheel (``pip install``) and a ``colcon build``.

Both are built from a copy of the working tree into a temporary folder, then run by a Python that sees
the project's dependencies but not its source: a temporary venv whose only link to the project venv is a
``.pth`` file naming its site-packages as a plain path (so the editable install's import hook, which would
quietly serve a subpackage missing from the install out of the source tree, never loads). Each command
runs with the working directory outside the source tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYVER = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _source_files() -> list[str]:
    """The files a clone would have: tracked plus untracked-but-not-ignored (so a new module counts)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        return [f for f in out.decode().split("\0") if f and (REPO / f).is_file()]
    except (OSError, subprocess.CalledProcessError):  # no git: everything but build outputs
        skip = {".venv", "build", "install", "log", "runs", ".git", "__pycache__"}
        return [
            str(p.relative_to(REPO))
            for p in REPO.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(REPO).parts)
        ]


def _clean_python(root: Path) -> Path:
    """A venv that imports the project's dependencies but not the project (see the module docstring)."""
    venv.create(root, with_pip=False, symlinks=True)
    deps = [p for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages") and Path(p).is_dir()]
    site = root / "lib" / PYVER / "site-packages"
    (site / "project_dependencies.pth").write_text("\n".join(deps) + "\n")
    return root / "bin" / "python"


def _run_together(cmds: list[list[str]], env: dict, cwd: Path, timeout: float = 240) -> list[str]:
    """Commands that do not depend on each other, started together (each pays the interpreter's imports);
    every one must succeed. Their standard outputs, in order."""
    procs = [
        subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for cmd in cmds
    ]
    outs = []
    for cmd, proc in zip(cmds, procs):
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{cmd}\n{out[-3000:]}\n{err[-3000:]}"
        outs.append(out)
    return outs


def _run(cmd: list[str], env: dict, cwd: Path, timeout: float = 240) -> str:
    """One command, which must succeed; its standard output."""
    return _run_together([cmd], env, cwd, timeout)[0]


@pytest.fixture(scope="module")
def installs(tmp_path_factory):
    """Builds the wheel and the colcon install once; returns their paths and a clean environment."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src" / "vla_ros"
    for rel in _source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "COLCON_PREFIX_PATH")}
    env.update(
        HOME=str(tmp),
        COLCON_HOME=str(tmp / "colcon_home"),
        ROS_LOG_DIR=str(tmp / "ros_log"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    # The wheel, as `pip install .` builds it (the build backend in this venv, no download).
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp / "dist"),
            f"{src}/",
        ],
        env,
        tmp,
    )
    wheel = next((tmp / "dist").glob("vla_ros-*.whl"))
    wheel_venv = tmp / "wheel_venv"
    python = _clean_python(wheel_venv)
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        env,
        tmp,
    )
    # The ROS workspace build, as `colcon build` does it in a sourced workspace.
    _run(
        [
            sys.executable,
            "-m",
            "colcon",
            "--log-base",
            str(tmp / "log"),
            "build",
            "--base-paths",
            str(tmp / "src"),
            "--build-base",
            str(tmp / "build"),
            "--install-base",
            str(tmp / "install"),
        ],
        env,
        tmp,
    )
    prefix = tmp / "install" / "vla_ros"
    colcon_env = dict(env, AMENT_PREFIX_PATH=str(prefix), PYTHONPATH=str(prefix / "lib" / PYVER / "site-packages"))
    return {
        "tmp": tmp,
        "wheel": wheel,
        "wheel_venv": wheel_venv,
        "python": python,
        "env": env,
        "colcon_prefix": prefix,
        "colcon_env": colcon_env,
    }


def test_every_package_under_vla_ros_is_in_the_wheel(installs):
    names = zipfile.ZipFile(installs["wheel"]).namelist()
    source_packages = {
        p.parent.relative_to(REPO).as_posix() for p in (REPO / "vla_ros").rglob("*.py") if "__pycache__" not in p.parts
    }
    for package in sorted(source_packages):
        assert f"{package}/__init__.py" in names, f"{package} has Python files but is not installed (no __init__.py?)"
    for data in (
        "share/vla_ros/package.xml",
        "share/vla_ros/launch/sim.launch.xml",
        "share/vla_ros/models/vla_cups/config.json",
        "share/ament_index/resource_index/packages/vla_ros",
        "vla_ros/description/vla_arm.urdf",
    ):
        assert any(n.endswith(data) for n in names), data


def test_cli_verbs_and_nodes_run_from_the_wheel_install(installs):
    bin_dir, env, cwd = installs["wheel_venv"] / "bin", installs["env"], installs["tmp"]
    where = _run(
        [str(installs["python"]), "-c", "import vla_ros, vla_ros.data.dataset; print(vla_ros.__file__)"], env, cwd
    )
    assert where.strip().startswith(str(installs["wheel_venv"])), where  # the install, not the source tree
    # A real (one-episode) collect: the sim, its assets and the bag writer, all from the install; beside it the
    # verbs' help and the nodes' imports.
    out = installs["tmp"] / "demos"
    verbs = ("record", "train", "bag")
    printed = _run_together(
        [
            [str(bin_dir / "vla-ros"), "collect", "--episodes", "1", "--out", str(out)],
            [str(installs["python"]), "-c", "import vla_ros.nodes.policy_node, vla_ros.nodes.sim_node"],
            *([str(bin_dir / "vla-ros"), verb, "--help"] for verb in verbs),
        ],
        env,
        cwd,
    )
    for verb, text in zip(verbs, printed[2:]):
        assert "usage: vla-ros " + verb in text
    assert list(out.glob("*.mcap"))
    assert (bin_dir / "policy_node").is_file()


def test_cli_verbs_and_nodes_run_from_the_colcon_install(installs):
    prefix, env, cwd, python = (
        installs["colcon_prefix"],
        installs["colcon_env"],
        installs["tmp"],
        str(installs["python"]),
    )
    lib = prefix / "lib" / "vla_ros"
    for node in ("sim_node", "policy_node", "safety_filter_node", "controller_node", "scripted_motion_node"):
        assert os.access(lib / node, os.X_OK), node  # what `ros2 run vla_ros <node>` starts
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / "vla_ros").is_file()
    where = _run([python, "-c", "import vla_ros.data.dataset as d; print(d.__file__)"], env, cwd)
    assert where.strip().startswith(str(prefix)), where
    verbs = ("record", "collect", "train", "bag")  # the installed script, run by the clean interpreter
    printed = _run_together(
        [
            [python, "-c", "import vla_ros.nodes.controller_node"],
            *([python, str(lib / "vla-ros"), verb, "--help"] for verb in verbs),
        ],
        env,
        cwd,
    )
    for verb, text in zip(verbs, printed[1:]):
        assert "usage: vla-ros " + verb in text
    # The launch runner finds the package through the ament index and its executables under lib/.
    printed = _run(
        [python, str(lib / "vla-ros"), "launch", "vla_ros", "sim.launch.xml", "policy:=none", "--print"], env, cwd
    )
    assert str(lib / "sim_node") in printed and str(prefix / "share" / "vla_ros" / "config" / "sim.yaml") in printed
