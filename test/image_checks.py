"""Image assertions shared by the sim core and sim node tests."""

import numpy as np

CHANNEL = {"red": 0, "green": 1, "blue": 2}


def assert_cups_visible(img: np.ndarray, sim, cups: dict, camera: str = "camera") -> None:
    """Each cup's colour dominates a 7x7 patch around the pixel its centre projects to (in ``camera``)."""
    img = img.astype(int)
    for color, pos in cups.items():
        u, v = np.round(sim.project(np.asarray(pos, dtype=float)[None], camera)[0]).astype(int)
        patch = img[v - 3 : v + 4, u - 3 : u + 4]
        c = CHANNEL[color]
        others = [i for i in range(3) if i != c]
        dominant = patch[..., c] > patch[..., others].max(axis=-1) + 40
        assert dominant.mean() > 0.8, f"{color} cup not visible at pixel ({u}, {v})"
