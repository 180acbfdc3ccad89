"""Signed-distance geometry: analytic shapes, grid SDFs, triangle meshes, bodies, sampling."""

from .bodies import Bodies, ShapeQuery, point_velocity
from .grid import GridSDF, genesis_grid_spec
from .mesh import TriangleMesh, closest_point_on_triangle
from .planes import Planes
from .sampling import farthest_point_sampling, sample_surface_points
from .shapes import Box, Capsule, ConvexHull, Cylinder, Plane, Shape, Sphere, shape_sdf_world

__all__ = [
    "Bodies",
    "Box",
    "Capsule",
    "ConvexHull",
    "Cylinder",
    "GridSDF",
    "Plane",
    "Planes",
    "Shape",
    "ShapeQuery",
    "Sphere",
    "TriangleMesh",
    "closest_point_on_triangle",
    "farthest_point_sampling",
    "genesis_grid_spec",
    "point_velocity",
    "sample_surface_points",
    "shape_sdf_world",
]
