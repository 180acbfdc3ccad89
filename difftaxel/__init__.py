"""difftaxel: differentiable tactile sensor models in JAX.

Public names are listed one by one; submodules (``difftaxel.pose``, ``difftaxel.geometry``,
``difftaxel.layout``, ``difftaxel.sensors``, ``difftaxel.testing``) hold the rest.
"""

from . import geometry, imperfections, layout, pose, rollout, sensors
from .geometry import (
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
from .imperfections import Imperfections
from .layout import (
    gaussian_crosstalk_kernel,
    generate_grid_points_on_plane,
    generate_ring_points_on_sphere,
)
from .rollout import vmap_envs

__version__ = "0.1.0"

__all__ = [
    "Bodies",
    "Box",
    "Capsule",
    "ConvexHull",
    "Cylinder",
    "GridSDF",
    "Imperfections",
    "Plane",
    "Sphere",
    "TriangleMesh",
    "gaussian_crosstalk_kernel",
    "generate_grid_points_on_plane",
    "generate_ring_points_on_sphere",
    "geometry",
    "imperfections",
    "layout",
    "pose",
    "sample_surface_points",
    "sensors",
    "rollout",
    "vmap_envs",
]
