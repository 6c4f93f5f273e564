"""Camera streams by name: the names a model's ``cameras`` lists, and the topics and frames they imply.

A stream named ``n`` publishes ``/n/image_raw`` and ``/n/camera_info`` in the optical frame
``n_optical_frame`` (remap the topics on a robot whose drivers use other names). The first camera of a
model is its main view; the simulation has the two below.
"""

from __future__ import annotations

FRONT = "camera"  # fixed, looking at the table from its far side
WRIST = "wrist_camera"  # on the hand, looking down between the fingers


def image_topic(name: str) -> str:
    return f"/{name}/image_raw"


def info_topic(name: str) -> str:
    return f"/{name}/camera_info"


def optical_frame(name: str) -> str:
    return f"{name}_optical_frame"


def model_cameras(model_dir) -> tuple[str, ...]:
    """The cameras a model folder's ``config.json`` lists (``(FRONT,)`` when it lists none or cannot be read:
    the loader reports that, not this)."""
    import json
    from pathlib import Path

    try:
        cameras = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8")).get("cameras")
    except (OSError, ValueError, AttributeError):
        return (FRONT,)
    return tuple(cameras) if isinstance(cameras, list) and cameras else (FRONT,)


def sim_launch_args(model_dir) -> list[str]:
    """``sim.launch.xml`` arguments the simulation needs for this model: its hand camera when it reads it."""
    return ["wrist_camera:=true"] if WRIST in model_cameras(model_dir) else []
