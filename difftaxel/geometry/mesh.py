"""Exact signed distance to a triangle mesh, chunked so memory stays bounded.

The unsigned distance is the distance to the closest point over all triangles (Ericson,
*Real-Time Collision Detection*, 5.1.5). The sign comes from one of two rules:

* ``sign="winding"`` (default, robust): the generalised winding number (Jacobson et al. 2013,
  solid angles by Van Oosterom & Strackee 1983) is > 1/2 inside. Correct for any watertight
  mesh, also near sharp or concave edges. Requires a watertight mesh (checked at build).
* ``sign="face"``: Genesis's "raycast" semantics: the sign of ``(p - closest) . n_f`` of the
  nearest triangle's face normal ``n_f`` only (Genesis 1.4.5). Wrong near some
  sharp/concave features, exactly like the peer.

The normal is ``sign * (p - closest) / |p - closest|`` away from the surface and the nearest
face's normal on it. Evaluation scans over chunks of faces and maps over chunks of points, so
peak memory is ``O(point_chunk * face_chunk)`` independent of the mesh size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._numerics import cross, dot, first_argmin, safe_norm, safe_normalize
from .._pytree import pytree_dataclass, static_field
from .._validate import check_pose
from .shapes import Shape, _identity_pose

Array = jax.Array

__all__ = ["TriangleMesh", "closest_point_on_triangle"]


def closest_point_on_triangle(p: Array, a: Array, b: Array, c: Array) -> Array:
    """Closest point ``[..., 3]`` to ``p`` on triangles ``(a, b, c)`` (all ``[..., 3]``, broadcast).

    Ericson's Voronoi-region method, written branch-free with ``where`` (same region order and
    tie-breaking as the reference code: vertex A, B, edge AB, vertex C, edge AC, edge BC, face).
    """
    ab, ac, ap = b - a, c - a, p - a
    d1, d2 = dot(ab, ap), dot(ac, ap)
    bp = p - b
    d3, d4 = dot(ab, bp), dot(ac, bp)
    cp = p - c
    d5, d6 = dot(ab, cp), dot(ac, cp)
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4

    def sdiv(n, d):
        ok = d != 0
        return jnp.where(ok, n / jnp.where(ok, d, 1.0), 0.0)

    # face interior
    denom = va + vb + vc
    v = sdiv(vb, denom)
    w = sdiv(vc, denom)
    res = a + ab * v[..., None] + ac * w[..., None]
    # edge BC
    e_bc = ((va <= 0) & ((d4 - d3) >= 0) & ((d5 - d6) >= 0))[..., None]
    w_bc = sdiv(d4 - d3, (d4 - d3) + (d5 - d6))
    res = jnp.where(e_bc, b + (c - b) * w_bc[..., None], res)
    # edge AC
    e_ac = ((vb <= 0) & (d2 >= 0) & (d6 <= 0))[..., None]
    w_ac = sdiv(d2, d2 - d6)
    res = jnp.where(e_ac, a + ac * w_ac[..., None], res)
    # vertex C
    res = jnp.where(((d6 >= 0) & (d5 <= d6))[..., None], c, res)
    # edge AB
    e_ab = ((vc <= 0) & (d1 >= 0) & (d3 <= 0))[..., None]
    v_ab = sdiv(d1, d1 - d3)
    res = jnp.where(e_ab, a + ab * v_ab[..., None], res)
    # vertex B
    res = jnp.where(((d3 >= 0) & (d4 <= d3))[..., None], b, res)
    # vertex A
    res = jnp.where(((d1 <= 0) & (d2 <= 0))[..., None], a, res)
    return res


def _solid_angle(p: Array, a: Array, b: Array, c: Array) -> Array:
    """Signed solid angle of triangle (a, b, c) seen from p (Van Oosterom & Strackee)."""
    ra, rb, rc = a - p, b - p, c - p
    la, lb, lc = safe_norm(ra), safe_norm(rb), safe_norm(rc)
    num = dot(ra, cross(rb, rc))
    den = la * lb * lc + dot(ra, rb) * lc + dot(ra, rc) * lb + dot(rb, rc) * la
    return 2.0 * jnp.arctan2(num, den)


@pytree_dataclass
class TriangleMesh(Shape):
    """A closed triangle mesh as a signed-distance shape.

    Attributes:
      triangles: ``[F, 3, 3]`` corner positions (m) in the shape frame, counter-clockwise seen
        from outside (outward face normals). A differentiable leaf.
      T_body_shape: ``[7]`` pose of the shape on its body (x, y, z, qx, qy, qz, qw).
      body: index of the owning body (static).
      sign: ``"winding"`` (robust, default) or ``"face"`` (Genesis raycast semantics). Static.
      point_chunk, face_chunk: chunk sizes bounding peak memory (static).

    Build it with :meth:`from_trimesh` or :meth:`from_arrays`; the face array is padded to a
    multiple of ``face_chunk`` with degenerate triangles far away (they contribute neither
    distance nor winding number).
    """

    triangles: Array
    T_body_shape: Array = None
    body: int = static_field(0)
    sign: str = static_field("winding")
    point_chunk: int = static_field(512)
    face_chunk: int = static_field(256)
    n_faces: int = static_field(0)

    def __post_init__(self):
        tri = np.asarray(self.triangles, dtype=float)
        if tri.ndim != 3 or tri.shape[1:] != (3, 3):
            raise ValueError(f"TriangleMesh.triangles: expected shape (F, 3, 3), got {tri.shape}")
        if tri.shape[0] == 0:
            raise ValueError("TriangleMesh.triangles: expected at least one face, got 0")
        if self.sign not in ("winding", "face"):
            raise ValueError(f"TriangleMesh.sign: expected 'winding' or 'face', got {self.sign!r}")
        T = _identity_pose() if self.T_body_shape is None else np.asarray(self.T_body_shape)
        check_pose(T, "TriangleMesh.T_body_shape")
        nf = tri.shape[0]
        fc = int(self.face_chunk)
        pad = (-nf) % fc
        if pad:
            far = np.full((pad, 3, 3), 1e6 + np.abs(tri).max())
            tri = np.concatenate([tri, far], axis=0)
        dt = jnp.result_type(float)
        object.__setattr__(self, "triangles", jnp.asarray(tri, dtype=dt))
        object.__setattr__(self, "T_body_shape", jnp.asarray(T, dtype=dt))
        object.__setattr__(self, "n_faces", nf)

    @classmethod
    def from_arrays(cls, vertices, faces, *, require_watertight: bool | None = None, **kw):
        """Build from ``vertices [V, 3]`` (m) and integer ``faces [F, 3]`` (outward winding).

        With ``sign="winding"`` the mesh must be watertight (every edge shared by exactly two
        faces with opposite orientation); a ``ValueError`` names ``faces`` otherwise.
        """
        v = np.asarray(vertices, dtype=float)
        f = np.asarray(faces)
        if v.ndim != 2 or v.shape[1] != 3:
            raise ValueError(f"vertices: expected shape (V, 3), got {v.shape}")
        if f.ndim != 2 or f.shape[1] != 3 or not np.issubdtype(f.dtype, np.integer):
            raise ValueError(f"faces: expected an integer array of shape (F, 3), got {f.shape}")
        if f.size and (f.min() < 0 or f.max() >= len(v)):
            raise ValueError(f"faces: indices must be in [0, {len(v)}), got [{f.min()}, {f.max()}]")
        need = (
            kw.get("sign", "winding") == "winding"
            if require_watertight is None
            else (require_watertight)
        )
        if need and not _is_watertight(f):
            raise ValueError(
                "faces: the mesh is not watertight (an edge is not shared by exactly two "
                "consistently oriented faces); a signed distance needs a closed surface. "
                "Repair it or use sign='face'."
            )
        return cls(triangles=v[f], **kw)

    @classmethod
    def from_trimesh(cls, mesh, **kw):
        """Build from a ``trimesh.Trimesh`` (its vertices in m, faces outward)."""
        return cls.from_arrays(np.asarray(mesh.vertices), np.asarray(mesh.faces), **kw)

    def aabb_local(self):
        """``(lo [3], hi [3])`` (m, shape frame) of the real faces (not the padding); traceable."""
        tri = jnp.asarray(self.triangles)[: self.n_faces].reshape(-1, 3)
        return tri.min(0), tri.max(0)

    # -------------------------------------------------------------------------- evaluation

    def _query_chunk(self, p: Array):
        """Scan face chunks for points ``p [P, 3]``: best squared distance, closest, face normal, winding."""
        tri = self.triangles.astype(p.dtype)
        fc = self.face_chunk
        chunks = tri.reshape(-1, fc, 3, 3)
        P = p.shape[0]
        init = (
            jnp.full((P,), jnp.inf, p.dtype),
            jnp.zeros((P, 3), p.dtype),
            jnp.zeros((P, 3), p.dtype),
            jnp.zeros((P,), p.dtype),
        )

        def body(carry, t):
            best_d2, best_c, best_n, wind = carry
            a, b, c = t[None, :, 0], t[None, :, 1], t[None, :, 2]
            pp = p[:, None, :]
            cp = closest_point_on_triangle(pp, a, b, c)
            d = pp - cp
            d2 = jnp.sum(d * d, -1)  # [P, fc]
            k = first_argmin(d2)
            d2k = jnp.take_along_axis(d2, k[:, None], 1)[:, 0]
            ck = jnp.take_along_axis(cp, k[:, None, None], 1)[:, 0]
            nf = safe_normalize(cross(t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]))
            nk = nf[k]
            better = d2k < best_d2  # strict: first minimum wins, as Genesis
            best_d2 = jnp.where(better, d2k, best_d2)
            best_c = jnp.where(better[:, None], ck, best_c)
            best_n = jnp.where(better[:, None], nk, best_n)
            if self.sign == "winding":
                wind = wind + jnp.sum(_solid_angle(pp, a, b, c), axis=1)
            return (best_d2, best_c, best_n, wind), None

        (best_d2, best_c, best_n, wind), _ = jax.lax.scan(body, init, chunks)
        return best_c, best_n, wind

    def sdf_local(self, p: Array) -> tuple[Array, Array]:
        """Signed distance ``[...]`` (m) and outward normal ``[..., 3]`` at ``p [..., 3]`` (shape frame)."""
        shape = p.shape[:-1]
        flat = p.reshape(-1, 3)
        n = flat.shape[0]
        pc = min(self.point_chunk, max(n, 1))
        pad = (-n) % pc
        flat_p = jnp.concatenate([flat, jnp.zeros((pad, 3), p.dtype)], 0) if pad else flat

        def one(pts):
            c, nf, wind = self._query_chunk(pts)
            diff = pts - c
            dist = safe_norm(diff)
            if self.sign == "winding":
                inside = wind > 2.0 * jnp.pi  # winding number > 1/2
            else:
                inside = dot(diff, nf) < 0.0
            sgn = jnp.where(inside, -1.0, 1.0).astype(pts.dtype)
            scale = jnp.max(jnp.abs(self.triangles[: self.n_faces])).astype(pts.dtype)
            on_surface = dist <= 10.0 * jnp.finfo(pts.dtype).eps * scale
            normal = jnp.where(on_surface[:, None], nf, sgn[:, None] * safe_normalize(diff))
            return sgn * dist, normal

        sd, normal = jax.lax.map(one, flat_p.reshape(-1, pc, 3))
        sd = sd.reshape(-1)[:n].reshape(shape)
        normal = normal.reshape(-1, 3)[:n].reshape(shape + (3,))
        return sd, normal


def _is_watertight(faces: np.ndarray) -> bool:
    """Every directed edge appears once and its reverse once (closed, consistently oriented)."""
    f = np.asarray(faces)
    e = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]], axis=0)
    if len(e) == 0:
        return False
    key = e[:, 0].astype(np.int64) * (int(f.max()) + 1) + e[:, 1]
    rkey = e[:, 1].astype(np.int64) * (int(f.max()) + 1) + e[:, 0]
    uniq, counts = np.unique(key, return_counts=True)
    if np.any(counts != 1):
        return False
    return bool(np.all(np.isin(rkey, uniq)))
