"""Where the package keeps what it can compute again (convex hulls, instruction checks): the user's cache."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(name: str, env: str) -> Path:
    """``$<env>`` where set, else ``$XDG_CACHE_HOME/vla_ros/<name>`` (``~/.cache/vla_ros/<name>``); safe to delete."""
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vla_ros" / name
