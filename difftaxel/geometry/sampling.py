"""Deterministic surface point clouds (Genesis's sampler: area-weighted candidates + FPS)."""

from __future__ import annotations

import numpy as np

__all__ = ["sample_surface_points", "farthest_point_sampling"]


def farthest_point_sampling(points: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Indices ``[n]`` of a greedy farthest-point subset of ``points [M, 3]`` (host, numpy).

    The first index is drawn uniformly with ``numpy.random.default_rng(seed)``; each next point
    maximises the distance to the chosen set (first maximum on ties). Deterministic.
    """
    pts = np.asarray(points, dtype=float)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"points: expected shape (M, 3), got {pts.shape}")
    if not isinstance(n, (int, np.integer)) or n < 1 or n > len(pts):
        raise ValueError(f"n: expected an int in [1, {len(pts)}], got {n!r}")
    rng = np.random.default_rng(seed)
    idx = np.empty(n, dtype=np.int64)
    idx[0] = rng.integers(len(pts))
    d2 = np.sum((pts - pts[idx[0]]) ** 2, axis=1)
    for i in range(1, n):  # host-side preprocessing loop (not traced)
        idx[i] = int(np.argmax(d2))
        d2 = np.minimum(d2, np.sum((pts - pts[idx[i]]) ** 2, axis=1))
    return idx


def sample_surface_points(mesh, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``n`` well-spread points on a ``trimesh.Trimesh`` surface, in the mesh frame.

    Genesis 1.4.5's procedure: ``max(256, 4 n)`` area-weighted
    candidates from ``trimesh.sample.sample_surface(mesh, ., seed=seed)``, then farthest-point
    sampling seeded with ``seed``. Normals are the face normals of the sampled faces.

    Returns:
      ``positions [n, 3]`` (m) and unit ``normals [n, 3]``, float64 numpy arrays.
    """
    import trimesh

    if not isinstance(mesh, trimesh.Trimesh):
        raise TypeError(f"mesh: expected a trimesh.Trimesh, got {type(mesh).__name__}")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n: expected a positive int, got {n!r}")
    if mesh.area <= 0:
        raise ValueError("mesh: expected a surface with positive area")
    cand, face_idx = trimesh.sample.sample_surface(mesh, max(256, 4 * n), seed=seed)
    sel = farthest_point_sampling(np.asarray(cand), n, seed=seed)
    normals = np.asarray(mesh.face_normals)[np.asarray(face_idx)[sel]]
    return np.asarray(cand)[sel].astype(float), normals.astype(float)
