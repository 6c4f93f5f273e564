"""Test-wide settings: DDS on loopback in its own domain, headless rendering, offline models, and nothing
written into the working tree (Hypothesis' storage and Python's bytecode caches go to temporary folders)
or left behind in the system's temporary folder."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

# Never let discovery leave this machine (ROS_LOCALHOST_ONLY for Humble); own domain unless CI set one.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
os.environ.setdefault("ROS_DOMAIN_ID", "61")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["PYTHONUNBUFFERED"] = "1"

# Bytecode caches outside the tree, for this process and the node processes the tests start (`make test`
# sets the same before pytest starts, so even this file's cache lands there). Per user, kept between runs.
_PYCACHE = Path(tempfile.gettempdir()) / f"vla_ros-pycache-{os.getuid()}"
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(_PYCACHE))
sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]

# Temporary files of this run and of the processes it starts (the launch runner's generated parameter
# files, which `--print` keeps on purpose so the printed commands work) go to one folder removed at the end;
# pytest's own tmp_path folders stay where pytest keeps them (its last three runs, for a look after a failure).
os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
_TMP_DIR = tempfile.mkdtemp(prefix="vla_ros-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = _TMP_DIR
# Convex hulls of collision meshes are cached on disk (vla_ros.safety.robot.mesh_hull): not in ~/.cache.
os.environ.setdefault("VLA_ROS_HULL_CACHE", str(Path(_TMP_DIR) / "hulls"))

# Hypothesis keeps an example database and a cache of constants under ./.hypothesis by default: send its
# storage to a temporary folder (read when first used, so before any test runs) and keep no database.
# Property tests are derandomized, so a run is reproducible and a failure shows its example in the report.
_HYPOTHESIS_DIR = None
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    _HYPOTHESIS_DIR = os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = tempfile.mkdtemp(prefix="vla_ros-hypothesis-")

from hypothesis import settings  # noqa: E402 - after the storage directory is set

settings.register_profile("vla_ros", database=None, derandomize=True)
settings.load_profile("vla_ros")


def pytest_sessionfinish(session, exitstatus):
    if _HYPOTHESIS_DIR:
        shutil.rmtree(_HYPOTHESIS_DIR, ignore_errors=True)
    shutil.rmtree(_TMP_DIR, ignore_errors=True)
