"""Trilinear grid signed-distance fields (Genesis's construction and lookup).

A grid stores signed distances ``values [nx, ny, nz]`` (m) at nodes, optionally the node
gradients ``grads [nx, ny, nz, 3]`` (unit vectors, shape frame), and the affine map from the
shape frame to grid coordinates ``s = p * scale + offset`` (integer ``s`` = node index).

Lookup (Genesis 1.4.5): base index ``b = min(floor(s), n - 2)``, trilinear weights
of the 8 corners. Normal: the trilinear interpolation of the stored node gradients, normalised
(as Genesis), or the normalised gradient of the interpolant when no node gradients are stored.

What it reproduces of Genesis: the grid's placement and node count, node values (for a box,
to 3e-14 of Genesis's), the trilinear lookup and the interpolated node-gradient normal. Not
reproduced: node gradients where several surfaces are equally near (a box's medial planes, 280
of 32,768 nodes of a 32^3 box grid): :meth:`GridSDF.from_shape` takes the analytic shape's
normal there (ties to the lowest axis), Genesis breaks the tie its own way, so normals, and
KinematicTaxel's forces, differ in the cells next to those planes (up to 67 % of the largest
force in a measured box scene). Depths (ContactDepthProbe, ElastomerTaxel) are not affected.

Outside the grid two rules:

* ``out_of_grid="continuous"`` (default): the query is clamped to the grid box and the distance
  from the query to the clamped point is added: continuous, 1-Lipschitz, a valid upper bound
  of the true distance when the grid box encloses the surface. Normal: the direction from the
  clamped point to the query.
* ``out_of_grid="genesis"``: Genesis's proxy ``|(s - c) * cell| + max(values)`` whenever some
  ``s_k <= 0`` or ``s_k >= n_k - 1`` (boundary included), with normal ``normalise((s - c) * cell)``;
  discontinuous at the grid boundary, for parity only.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._numerics import lead, safe_norm, safe_normalize
from .._pytree import pytree_dataclass, static_field
from .._validate import check_pose
from .shapes import Shape, _identity_pose

Array = jax.Array

__all__ = ["GridSDF", "genesis_grid_spec"]


def genesis_grid_spec(
    lo,
    hi,
    cell_size: float = 0.005,
    min_res: int = 32,
    max_res: int = 128,
    primitive: bool = False,
    eps: float = 2.220446049250313e-16,
):
    """Node count and placement of Genesis's SDF grid for a mesh with bounding box ``[lo, hi]``.

    Grid size ``G = e + 0.2 max(e)`` (10 % margin of the largest extent on each side), cell
    ``eps + clip(cell_size, G/(max_res - 1), G/max(min_res - 1, 2))``, ``n = ceil(G/cell) + 1``
    nodes per axis, centred on the box centre. Primitives force ``max_res = 32`` (so exactly
    32 nodes per axis).

    Returns:
      ``(n [3] int, cell [3], origin [3])``: node ``i`` along axis k sits at
      ``origin_k + i * cell_k`` (m, shape frame).
    """
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    e = hi - lo
    if np.any(e < 0):
        raise ValueError(f"hi: expected hi >= lo componentwise, got lo={lo}, hi={hi}")
    if primitive:
        max_res = 32
    G = e + 0.2 * np.max(e)
    lower = G / (max_res - 1)
    upper = G / max(min_res - 1, 2)
    cell = eps + np.clip(cell_size, lower, upper)
    n = np.array([math.ceil(g / c) + 1 for g, c in zip(G, cell, strict=False)], dtype=int)
    Gp = (n - 1) * cell
    m = 0.5 * (lo + hi)
    origin = m - 0.5 * Gp
    return n, cell, origin


@pytree_dataclass
class GridSDF(Shape):
    """Signed distances on a regular grid, trilinearly interpolated.

    Attributes:
      values: ``[nx, ny, nz]`` node signed distances (m), negative inside.
      scale: ``[3]`` grid coordinates per metre (``1 / cell``).
      offset: ``[3]`` grid coordinate of the shape-frame origin (``s = p * scale + offset``).
      grads: ``[nx, ny, nz, 3]`` node gradients (shape frame) or ``None`` (autodiff of the
        interpolant is then used for normals).
      T_body_shape: ``[7]`` pose on the owning body.
      body: owning body index (static).
      out_of_grid: ``"continuous"`` (default) or ``"genesis"`` (static).
      bounds: the gridded shape's own box ``((lo x, y, z), (hi x, y, z))`` (m, shape frame;
        static), recorded by :meth:`from_shape` and :meth:`from_trimesh`; :meth:`aabb_local`
        reports it (Genesis's geom AABB is the shape's, not its grid's, which extends by a
        margin). ``None``: the grid's extent.

    Build with :meth:`from_arrays`, :meth:`from_shape` (sampled analytic shape; 32 nodes per axis
    like Genesis's primitives) or :meth:`from_trimesh` (Genesis's construction).
    """

    values: Array
    scale: Array
    offset: Array
    grads: Array | None = None
    T_body_shape: Array = None
    body: int = static_field(0)
    out_of_grid: str = static_field("continuous")
    bounds: tuple | None = static_field(None)

    def __post_init__(self):
        if self.bounds is not None:
            b = np.asarray(self.bounds, dtype=float)
            if b.shape != (2, 3) or not np.all(np.isfinite(b)) or np.any(b[0] > b[1]):
                raise ValueError(f"GridSDF.bounds: expected ((lo x3), (hi x3)), lo <= hi, got {b}")
            object.__setattr__(self, "bounds", tuple(tuple(float(x) for x in r) for r in b))
        v = np.asarray(self.values, dtype=float)
        if v.ndim != 3 or min(v.shape) < 2:
            raise ValueError(
                f"GridSDF.values: expected shape (nx, ny, nz) with every n >= 2, got {v.shape}"
            )
        if not np.all(np.isfinite(v)):
            raise ValueError("GridSDF.values: expected finite values")
        sc = np.broadcast_to(np.asarray(self.scale, dtype=float), (3,))
        if np.any(sc <= 0) or not np.all(np.isfinite(sc)):
            raise ValueError(f"GridSDF.scale: expected 3 positive values (1/cell), got {sc}")
        off = np.broadcast_to(np.asarray(self.offset, dtype=float), (3,))
        if self.grads is not None:
            g = np.asarray(self.grads, dtype=float)
            if g.shape != v.shape + (3,):
                raise ValueError(f"GridSDF.grads: expected shape {v.shape + (3,)}, got {g.shape}")
        if self.out_of_grid not in ("continuous", "genesis"):
            raise ValueError(
                f"GridSDF.out_of_grid: expected 'continuous' or 'genesis', got {self.out_of_grid!r}"
            )
        T = _identity_pose() if self.T_body_shape is None else np.asarray(self.T_body_shape)
        check_pose(T, "GridSDF.T_body_shape")
        dt = jnp.result_type(float)
        object.__setattr__(self, "values", jnp.asarray(v, dt))
        object.__setattr__(self, "scale", jnp.asarray(sc, dt))
        object.__setattr__(self, "offset", jnp.asarray(off, dt))
        if self.grads is not None:
            object.__setattr__(self, "grads", jnp.asarray(self.grads, dt))
        object.__setattr__(self, "T_body_shape", jnp.asarray(T, dt))

    # ------------------------------------------------------------------------ builders

    @classmethod
    def from_arrays(cls, values, origin, cell, grads=None, **kw):
        """Grid whose node ``i`` along axis k sits at ``origin_k + i * cell_k`` (m, shape frame)."""
        cell = np.broadcast_to(np.asarray(cell, dtype=float), (3,))
        if np.any(cell <= 0):
            raise ValueError(f"cell: expected positive cell sizes, got {cell}")
        origin = np.broadcast_to(np.asarray(origin, dtype=float), (3,))
        return cls(values=values, scale=1.0 / cell, offset=-origin / cell, grads=grads, **kw)

    @classmethod
    def from_shape(cls, shape, n: int = 32, margin: float = 0.1, **kw):
        """Sample an analytic shape's SDF and normals on Genesis's primitive grid (``n`` = 32).

        The grid covers the shape's box plus ``margin`` x its largest extent on each side;
        ``T_body_shape`` and ``body`` default to the shape's.
        """
        lo, hi = shape.aabb_local()
        if not np.all(np.isfinite(lo)) or not np.all(np.isfinite(hi)):
            raise ValueError("shape: an unbounded shape (Plane) cannot be gridded")
        nn, cell, origin = genesis_grid_spec(lo, hi, primitive=True, eps=0.0)
        if margin != 0.1 or n != 32:
            e = np.asarray(hi) - np.asarray(lo)
            G = e + 2 * margin * np.max(e)
            cell = G / (n - 1)
            nn = np.full(3, n)
            origin = 0.5 * (np.asarray(lo) + np.asarray(hi)) - 0.5 * G
        axes = [origin[k] + cell[k] * np.arange(nn[k]) for k in range(3)]
        nodes = np.stack(np.meshgrid(*axes, indexing="ij"), -1)
        sd, nrm = shape.sdf_local(jnp.asarray(nodes, jnp.result_type(float)))
        kw.setdefault("T_body_shape", np.asarray(shape.T_body_shape))
        kw.setdefault("body", shape.body)
        kw.setdefault("bounds", (tuple(np.asarray(lo, float)), tuple(np.asarray(hi, float))))
        return cls.from_arrays(np.asarray(sd), origin, cell, grads=np.asarray(nrm), **kw)

    @classmethod
    def from_trimesh(
        cls,
        mesh,
        cell_size: float = 0.005,
        min_res: int = 32,
        max_res: int = 128,
        primitive: bool = False,
        **kw,
    ):
        """Genesis's grid for a watertight ``trimesh.Trimesh``: node values are exact signed
        distances (:class:`TriangleMesh`, winding-number sign), node gradients
        ``sign * (node - closest) / |node - closest|``.
        """
        from .mesh import TriangleMesh

        tm = TriangleMesh.from_trimesh(mesh)
        lo, hi = np.asarray(mesh.bounds[0]), np.asarray(mesh.bounds[1])
        nn, cell, origin = genesis_grid_spec(lo, hi, cell_size, min_res, max_res, primitive)
        axes = [origin[k] + cell[k] * np.arange(nn[k]) for k in range(3)]
        nodes = np.stack(np.meshgrid(*axes, indexing="ij"), -1)
        sd, nrm = tm.sdf_local(jnp.asarray(nodes, jnp.result_type(float)))
        kw.setdefault("bounds", (tuple(lo.astype(float)), tuple(hi.astype(float))))
        return cls.from_arrays(np.asarray(sd), origin, cell, grads=np.asarray(nrm), **kw)

    # ------------------------------------------------------------------------ evaluation

    @property
    def shape_n(self):
        return self.values.shape

    def aabb_local(self):
        """``(lo [3], hi [3])`` (m, shape frame): ``bounds`` if recorded, else the grid's
        extent; traceable."""
        if self.bounds is not None:
            return jnp.asarray(self.bounds[0]), jnp.asarray(self.bounds[1])
        n = jnp.asarray(self.values.shape) - 1  # static; scale and offset may be traced
        sc, off = jnp.asarray(self.scale), jnp.asarray(self.offset)
        return (0 - off) / sc, (n - off) / sc

    def _interp(self, field: Array, s: Array) -> Array:
        """Trilinear interpolation of ``field [nx, ny, nz, ...]`` at grid coordinates ``s [..., 3]``."""
        n = lead(jnp.array(self.values.shape), s.ndim)
        b = jnp.clip(jnp.floor(s).astype(jnp.int32), 0, n - 2)
        f = s - b
        out = 0.0
        for ox in (0, 1):
            wx = f[..., 0] if ox else 1.0 - f[..., 0]
            for oy in (0, 1):
                wy = f[..., 1] if oy else 1.0 - f[..., 1]
                for oz in (0, 1):
                    wz = f[..., 2] if oz else 1.0 - f[..., 2]
                    val = field[b[..., 0] + ox, b[..., 1] + oy, b[..., 2] + oz]
                    w = wx * wy * wz
                    out = out + (w[..., None] * val if val.ndim > w.ndim else w * val)
        return out

    def sdf_local(self, p: Array) -> tuple[Array, Array]:
        """Signed distance ``[...]`` (m) and unit normal ``[..., 3]`` at ``p [..., 3]`` (shape frame)."""
        dtype = p.dtype
        values = self.values.astype(dtype)
        scale = lead(self.scale.astype(dtype), p.ndim)
        offset = lead(self.offset.astype(dtype), p.ndim)
        nmax = lead(jnp.array(self.values.shape, dtype) - 1.0, p.ndim)
        cell = 1.0 / scale
        s = p * scale + offset

        if self.out_of_grid == "genesis":
            outside = jnp.any((s >= nmax) | (s <= 0.0), axis=-1)
            s_in = jnp.clip(s, 0.0, nmax)
            centre_off = (s - 0.5 * nmax) * cell
            proxy = safe_norm(centre_off) + jnp.max(values)
            val_in = self._interp(values, s_in)
            if self.grads is None:

                def f_in(q):
                    return jnp.sum(self._interp(values, jnp.clip(q * scale + offset, 0.0, nmax)))

                g_in = jax.grad(f_in)(p)
            else:
                g_in = self._interp(self.grads.astype(dtype), s_in)
            n_in = safe_normalize(g_in)
            sd = jnp.where(outside, proxy, val_in)
            normal = jnp.where(outside[..., None], safe_normalize(centre_off), n_in)
            return sd, normal

        s_c = jnp.clip(s, 0.0, nmax)
        out_vec = (s - s_c) * cell
        out_d = safe_norm(out_vec)
        val_in = self._interp(values, s_c)
        if self.grads is None:

            def f(q):
                return jnp.sum(self._interp(values, jnp.clip(q * scale + offset, 0.0, nmax)))

            g_in = jax.grad(f)(p)
        else:
            g_in = self._interp(self.grads.astype(dtype), s_c)
        outside = (out_d > 0)[..., None]
        normal = jnp.where(outside, safe_normalize(out_vec), safe_normalize(g_in))
        return val_in + out_d, normal
