"""difftaxel: differentiable tactile sensor models in JAX.

Public names are listed one by one; submodules (``difftaxel.pose``, ``difftaxel.geometry``,
``difftaxel.layout``, ``difftaxel.sensors``, ``difftaxel.testing``) hold the rest.

The names below are imported on first use (PEP 562), so ``import difftaxel`` itself is light:
the ``difftaxel`` command installs its Ctrl-C handling before JAX is imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

#: public name -> the submodule that defines it
_FROM = {
    "Bodies": "geometry",
    "Box": "geometry",
    "Capsule": "geometry",
    "ConvexHull": "geometry",
    "Cylinder": "geometry",
    "GridSDF": "geometry",
    "Plane": "geometry",
    "Sphere": "geometry",
    "TriangleMesh": "geometry",
    "sample_surface_points": "geometry",
    "Imperfections": "imperfections",
    "gaussian_crosstalk_kernel": "layout",
    "generate_grid_points_on_plane": "layout",
    "generate_ring_points_on_sphere": "layout",
    "vmap_envs": "rollout",
}
_SUBMODULES = ("geometry", "imperfections", "layout", "pose", "rollout", "sensors")

__all__ = sorted([*_FROM, *_SUBMODULES])


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _FROM:
        value = getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'difftaxel' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from . import geometry, imperfections, layout, pose, rollout, sensors  # noqa: F401
    from .geometry import (  # noqa: F401
        Bodies,
        Box,
        Capsule,
        ConvexHull,
        Cylinder,
        GridSDF,
        Plane,
        Sphere,
        TriangleMesh,
        sample_surface_points,
    )
    from .imperfections import Imperfections  # noqa: F401
    from .layout import (  # noqa: F401
        gaussian_crosstalk_kernel,
        generate_grid_points_on_plane,
        generate_ring_points_on_sphere,
    )
    from .rollout import vmap_envs  # noqa: F401
