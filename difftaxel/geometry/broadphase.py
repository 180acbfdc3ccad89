"""The nearest surface at each probe of one sensor link, with a broad phase per link.

A sensor link's probes read only shapes within a **reach** of them (a probe radius, plus its
noise and its smoothing tail): a shape farther than that from every probe changes no reading.
:func:`nearest_surface` finds, per probe, the shape with the smallest signed distance (or the
smallest ``|sd|``, Genesis's raycast rule), in one of two ways:

* **exhaustive**: every shape at every probe (``S x N`` evaluations), then the smallest;
* **broad phase** (per link and environment): each shape is first tested once against each
  ball ``B(c, rho)`` that holds a patch of the link's probes (:func:`kind_lower_bounds`; one
  ball around them all, or one per :func:`grid_patches` patch of a grid); a shape whose
  signed distance is provably larger than ``reach`` over every ball is skipped, and only
  the others are evaluated at the probes, in a ``while_loop`` over the near shapes of each
  kind. The cost is ``S K`` one-point tests (``K`` balls) plus ``N`` evaluations per near
  shape: it follows the shapes near the link, not the shapes in the scene. There is no
  capacity to choose and nothing to overflow; under ``vmap`` the loop runs as many iterations
  as the environment with the most near shapes needs.

Both give the same nearest surface wherever it lies within ``reach``, which is all a reading
depends on; beyond it the broad phase reports ``sd = FAR``. Derivatives (forward and reverse)
are the exhaustive pass's: a ``while_loop`` has no reverse mode, so the broad phase is the
value of a custom JVP whose tangent is the exhaustive pass's (the same winner, selected by a
one-hot mask; a derivative still costs ``S x N`` evaluations).

The skip is exact, not a heuristic: each rule is a proven lower bound of the signed distance
*as implemented* over the ball. An ``L``-Lipschitz SDF is at least ``sd(c) - L rho`` there:
``L = 1`` for the analytic primitives (exact Euclidean distances); for a convex hull the bound
is the plane maximum over a subset of its faces (the 14 most aligned with the faces and corners
of a cube: at most the hull's value everywhere, 1-Lipschitz, and a few planes instead of all);
a continuous ``GridSDF`` takes ``L`` from its node differences. A winding-signed
``TriangleMesh``, closed or not, is "outside" at a gap ``g`` beyond its vertices' bounding
sphere once ``g^2 > area / 2 pi`` (each triangle subtends at most its area over ``g^2``, so the
winding number stays below 1/2), and its distance is then at least ``g``. Shapes with no such
bound (``GridSDF(out_of_grid="genesis")``, whose proxy jumps at the grid's border; a
face-signed ``TriangleMesh``; classes from outside difftaxel) are never skipped.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .. import pose as _pose
from .._numerics import (
    compute_once,
    first_argmax,
    first_argmin,
    loop_bound,
    matmul3,
    running_count,
    runtime_one,
)
from .._numerics import eps as _eps
from .bodies import _query_one, query_kinds, shape_kinds, shape_rows
from .grid import GridSDF
from .mesh import TriangleMesh
from .planes import Planes
from .shapes import Box, Capsule, ConvexHull, Cylinder, Plane, Sphere, sdf_local_xyz

Array = jax.Array

__all__ = ["nearest_surface", "kind_lower_bounds", "grid_patches", "FAR"]

#: ``sd`` (m) reported where no shape lies within reach
FAR = 1e6

_LIPSCHITZ_ONE = (Sphere, Plane, Box, Capsule, Cylinder, ConvexHull)


def _grid_lipschitz(g: GridSDF, dtype) -> Array:
    """A Lipschitz constant of a continuous ``GridSDF``: along an axis the trilinear
    interpolant's slope is a weighted mean of that axis's node differences over the cell, and
    outside the grid the distance to it adds a 1-Lipschitz term."""
    v = g.values.astype(dtype)
    s = g.scale.astype(dtype)
    slopes = [jnp.max(jnp.abs(jnp.diff(v, axis=a))) * s[a] for a in range(3)]
    return jnp.sqrt(sum(q * q for q in slopes)) + 1.0


def _directions() -> np.ndarray:
    """The 14 directions of a cube's faces and corners (unit). Why not its 12 edges too: on
    the Shadow Hand they skipped no more hull visits, and each direction is a plane per probe
    ball, shape and step."""
    d = np.array([(i, j, k) for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)], float)
    d = d[np.sum(d != 0, 1) % 2 == 1]  # one nonzero (a face) or three (a corner)
    return d / np.linalg.norm(d, axis=1, keepdims=True)


_DIRS = _directions()


def _hull_subset(s: ConvexHull, dtype):
    """The faces of ``s`` most aligned with each of 14 directions: their plane maximum is at
    most the hull's (a subset of its faces), 1-Lipschitz, and a few planes instead of all."""
    n = s.normals.astype(dtype)
    k = first_argmax(matmul3(jnp.asarray(_DIRS, dtype), n.T))
    return n[k], s.offsets.astype(dtype)[k]


def kind_lower_bounds(treedef, leaves, T_b: Array, frame: Array, c, rho: Array) -> Array:
    """Lower bounds ``[G, K]`` (m) of the signed distances of ``G`` shapes of one kind over
    ``K`` balls ``B(c_k, rho_k)``.

    Args:
      treedef, leaves: the kind (:func:`~difftaxel.geometry.bodies.shape_kinds`): its tree
        structure and leaves stacked ``[G, ...]``.
      T_b: ``[G, 7]`` world poses of the owning bodies (position m, quaternion x, y, z, w).
      frame: ``T_world_F [7]``, the pose of the balls' frame F.
      c: the balls' centres, three ``[K]`` coordinates (m, frame F); ``rho``: ``[K]`` radii (m).

    Returns ``-inf`` for a kind with no proven bound (never skipped); see the module docstring.
    """
    return jnp.stack(_bound_columns(treedef, leaves, T_b, frame, c, rho), 1)


def _bound_columns(treedef, leaves, T_b: Array, frame: Array, c, rho: Array) -> list:
    """:func:`kind_lower_bounds` as ``K`` columns ``[G]``, one per ball."""
    dtype = rho.dtype
    K = rho.shape[0]
    G = T_b.shape[0]
    proto = jax.tree.unflatten(treedef, [lv[0] for lv in leaves])
    cw = _pose.apply(frame.astype(dtype), jnp.stack(c, -1))  # [K, 3] world
    if isinstance(proto, GridSDF):
        exact = proto.out_of_grid == "continuous"
    elif isinstance(proto, TriangleMesh):
        exact = proto.sign == "winding"
    else:
        exact = type(proto) in _LIPSCHITZ_ONE
    if not exact:
        return [jnp.full((G,), -jnp.inf, dtype)] * K
    if type(proto) in _LIPSCHITZ_ONE:
        return _primitive_bounds(treedef, leaves, T_b, cw, rho)

    def one(leaf, T):
        s = jax.tree.unflatten(treedef, leaf)
        T_ws = _pose.compose(T, s.T_body_shape.astype(dtype))  # world pose of the shape
        R = _pose.quat_to_matrix(T_ws[3:])
        p = matmul3(cw - T_ws[None, :3], R)  # [K, 3] the centres in the shape frame
        if isinstance(s, TriangleMesh):
            t = s.triangles[: s.n_faces].astype(dtype)  # [F, 3, 3]
            tri = t.reshape(-1, 3)
            mid = 0.5 * (jnp.min(tri, 0) + jnp.max(tri, 0))
            r = jnp.sqrt(jnp.max(jnp.sum((tri - mid[None]) ** 2, -1)))
            e1, e2 = t[:, 1] - t[:, 0], t[:, 2] - t[:, 0]
            area = 0.5 * jnp.sum(jnp.sqrt(jnp.sum(jnp.cross(e1, e2) ** 2, -1)))
            gap = jnp.sqrt(jnp.sum((p - mid[None]) ** 2, -1)) - rho - r
            # the winding sum is at most area / gap^2 in magnitude: "outside" below 2 pi
            outside = gap * gap > area / (2 * jnp.pi) * (1 + 1e-6)
            return jnp.where((gap > 0) & outside, gap, -jnp.inf)
        sd, _ = sdf_local_xyz(s, p[:, 0], p[:, 1], p[:, 2])  # a continuous GridSDF
        return sd - _grid_lipschitz(s, dtype) * rho

    lb = jax.vmap(one)(leaves, T_b)  # [G, K]
    return [lb[:, k] for k in range(K)]


def _primitive_bounds(treedef, leaves, T_b, cw, rho) -> list:
    """:func:`kind_lower_bounds` of 1-Lipschitz primitives and convex hulls, ``K`` columns
    ``[G]`` on coordinate planes: each ball's centre ``cw[k]`` (world) taken into each shape's
    frame by one affine map per shape (its world pose, composed and stored once: every ball
    reads all twelve entries, which XLA's CPU fusion would otherwise recompute in each).
    Why columns: an elementwise ``[G, K]`` array under ``vmap`` (``[E, G, K]``, a few shapes
    by a few balls) compiled to loops many times slower per element on the CPU than ``K``
    arrays ``[E, G]``; and under ``vmap`` each stacked pose product is its own small
    operation, so no ``[..., 4]`` or ``[..., 3, 3]`` intermediate is stacked."""
    dtype = rho.dtype
    s = jax.tree.unflatten(treedef, leaves)  # leaves stacked [G, ...]
    R, t = _world_maps(T_b, s.T_body_shape.astype(dtype))
    hull = isinstance(jax.tree.unflatten(treedef, [lv[0] for lv in leaves]), ConvexHull)
    if hull:
        n, off = jax.vmap(lambda leaf: _hull_subset(jax.tree.unflatten(treedef, leaf), dtype))(
            leaves
        )  # [G, D, 3], [G, D]
    cols = []
    for k in range(rho.shape[0]):  # a few balls, static
        d = tuple(cw[k, i] - t[i] for i in range(3))  # [G]
        p = tuple(R[0][i] * d[0] + R[1][i] * d[1] + R[2][i] * d[2] for i in range(3))  # R^T d
        if hull:
            planes = [
                p[0] * n[:, j, 0] + p[1] * n[:, j, 1] + p[2] * n[:, j, 2] - off[:, j]
                for j in range(n.shape[1])
            ]
            sd = _max_planes(planes)
        else:
            sd = jax.vmap(
                lambda leaf, x, y, z: sdf_local_xyz(jax.tree.unflatten(treedef, leaf), x, y, z)[0]
            )(leaves, *p)
        cols.append(sd - rho[k])
    return cols


def _world_maps(T_b: Array, T_bs: Array):
    """World rotations ``R`` (rows of three ``[G]`` planes: ``R[i][j]``) and positions ``t``
    (three ``[G]``) of ``G`` shapes from their bodies' world poses ``T_b [G, 7]`` and their
    own in their bodies ``T_bs [G, 7]``, stored once (:func:`compute_once`)."""
    qb = tuple(T_b[:, 3 + i] for i in range(4))
    q = _pose.quat_mul_planes(qb, tuple(T_bs[:, 3 + i] for i in range(4)))
    r = _pose.quat_rotate_planes(qb, tuple(T_bs[:, i] for i in range(3)))
    t = tuple(T_b[:, i] + r[i] for i in range(3))
    R = tuple(e for row in _pose.quat_to_matrix_planes(q) for e in row)
    out = compute_once(runtime_one(T_b[:, 0]), *R, *t)
    return (out[0:3], out[3:6], out[6:9]), out[9:]


def _max_planes(terms):
    """The elementwise maximum of a few arrays of one shape, as a tree of ``jnp.maximum``.
    Why: XLA's CPU backend sends a max over a short trailing axis to a library reduction
    that costs more than the elementwise maxima fused with the terms' products."""
    while len(terms) > 1:
        pairs = [jnp.maximum(a, b) for a, b in zip(terms[::2], terms[1::2])]
        terms = pairs + terms[len(pairs) * 2 :]
    return terms[0]


def _probe_balls(x, y, z, groups):
    """Centres (the means, three ``[K]``) and radii ``[K]`` of balls holding the probes, one
    per group of probe indices (``None``: one group, every probe); no derivative (the skip
    only decides which shapes to evaluate)."""
    x, y, z = (jax.lax.stop_gradient(q) for q in (x, y, z))
    cs, rs = [], []
    for g in groups or (None,):
        q = (x, y, z) if g is None else tuple(a[np.asarray(g)] for a in (x, y, z))
        c = tuple(jnp.mean(a)[None] for a in q)
        d2 = (q[0] - c[0]) ** 2 + (q[1] - c[1]) ** 2 + (q[2] - c[2]) ** 2
        cs.append(c)
        rs.append(jnp.sqrt(jnp.max(d2))[None])
    return tuple(jnp.concatenate([c[i] for c in cs]) for i in range(3)), jnp.concatenate(rs)


def grid_patches(layout: tuple) -> tuple | None:
    """Static groups of probe indices for the broad phase's balls: a grid layout ``(ny, nx)``
    (row-major probes) cut in 2 x 2 patches; ``None`` (one ball) for any other layout.
    Why patches: a link's probes cover its surface, so one ball around them all also holds
    the neighbouring links' shapes at its joints, and each such shape costs a visit of every
    probe; a few smaller balls skip those visits for a few more one-point tests."""
    if len(layout) != 2 or min(layout) < 2:
        return None
    ny, nx = (int(n) for n in layout)
    idx = np.arange(ny * nx).reshape(ny, nx)
    rows, cols = np.array_split(np.arange(ny), 2), np.array_split(np.arange(nx), 2)
    return tuple(tuple(int(i) for i in idx[np.ix_(r, c)].reshape(-1)) for r in rows for c in cols)


def _key(mode: str, sd: Array) -> Array:
    return jnp.abs(sd) if mode == "raycast" else sd


def _dense(spec, mode, groups, leaves, poses, shape_on, T_fw, x, y, z, reach):
    """Every shape at every probe, the smallest key (first shape on ties) selected by a
    one-hot mask (so a derivative flows through the winner only)."""
    del groups, reach
    kinds = [(idx, td, lv, bd) for (idx, td, bd), lv in zip(spec, leaves, strict=True)]
    sd, n = query_kinds(kinds, poses, T_fw, x, y, z)  # [S, N]
    on = shape_on[:, None]
    sd = jnp.where(on, sd, jnp.asarray(FAR, sd.dtype))
    k = first_argmin(jnp.where(on, _key(mode, sd), jnp.inf), axis=0)
    onehot = jnp.arange(sd.shape[0])[:, None] == k[None]

    def pick(a):
        return jnp.sum(jnp.where(onehot, a, jnp.zeros((), a.dtype)), axis=0)

    return pick(sd), tuple(pick(a) for a in n), k.astype(jnp.int32)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _sparse(spec, mode, groups, leaves, poses, shape_on, T_fw, x, y, z, reach):
    dtype = x.dtype
    N = x.shape[0]
    S = int(sum(len(idx) for idx, _, _ in spec))
    c, rho = _probe_balls(x, y, z, groups)
    frame = _pose.inverse(T_fw)
    # the key is not carried but read from the sd (in "sdf" mode it is the sd): one array
    # fewer written per visit
    best = (
        jnp.full((N,), jnp.inf, dtype),  # sd (inf: no shape yet)
        (jnp.zeros((N,), dtype),) * 3,  # normal
        jnp.full((N,), S, jnp.int32),  # shape index (S: none)
    )
    for (idx, treedef, bodies), lv in zip(spec, leaves, strict=True):  # a few kinds, static
        T_b = shape_rows(poses, bodies).astype(dtype)
        # a shape is near if it may come within reach of any ball
        lb = functools.reduce(jnp.minimum, _bound_columns(treedef, lv, T_b, frame, c, rho))
        near = shape_on[np.asarray(idx)] & (lb <= reach)
        cum = running_count(near)
        count = cum[-1]
        gidx = jnp.asarray(np.asarray(idx), jnp.int32)

        def visit(j, best, lv=lv, T_b=T_b, gidx=gidx, cum=cum, count=count, treedef=treedef):
            """Merge the ``j``-th near shape of the kind (past the count: masked, no merge)."""
            # the j-th near shape: the first whose running count passes j (no scatter)
            s = jnp.minimum(jnp.sum((cum <= j).astype(jnp.int32)), cum.shape[0] - 1)
            sd, n = _query_one(treedef, [a[s] for a in lv], T_b[s], T_fw, x, y, z)
            bsd, bn, bi = best
            key, bk, g = _key(mode, sd), _key(mode, bsd), gidx[s]
            better = ((key < bk) | ((key == bk) & (g < bi))) & (j < count)
            return (
                jnp.where(better, sd, bsd),
                tuple(jnp.where(better, a, b) for a, b in zip(n, bn, strict=True)),
                jnp.where(better, g, bi),
            )

        # every environment runs the batch's largest count; past its own, a visit is masked
        bound = loop_bound(count)
        _, best = jax.lax.while_loop(
            lambda carry, bound=bound: carry[0] < bound,
            lambda carry, visit=visit: (carry[0] + 1, visit(carry[0], carry[1])),
            (jnp.zeros((), jnp.int32), best),
        )
    sd, n, k = best
    none = k == S
    return jnp.where(none, jnp.asarray(FAR, dtype), sd), n, jnp.where(none, 0, k)


@_sparse.defjvp
def _sparse_jvp(spec, mode, groups, primals, tangents):
    return jax.jvp(lambda *a: _dense(spec, mode, groups, *a), primals, tangents)


def nearest_surface(
    bodies,
    points: Planes,
    frame: Array,
    *,
    shape_on: Array,
    reach: Array,
    mode: str = "sdf",
    broad_phase: bool = True,
    groups: tuple | None = None,
):
    """The nearest surface at each probe: the shape of smallest signed distance (``mode="sdf"``)
    or of smallest ``|sd|`` (``"raycast"``), first shape on ties.

    Args:
      bodies: :class:`~difftaxel.geometry.Bodies` (shapes, poses ``[B, 7]``).
      points: the probes, :class:`~difftaxel.geometry.Planes` of ``[N]`` (m, frame F).
      frame: ``T_world_frame [7]`` of F (position m, quaternion x, y, z, w).
      shape_on: ``[S]`` bool, shapes that count (body mask, filters).
      reach: ``[]`` m; a shape whose distance exceeds it at every probe may be skipped.
      mode: ``"sdf"`` or ``"raycast"``.
      broad_phase: skip shapes provably beyond ``reach`` (module docstring) or evaluate all.
      groups: static groups of probe indices (e.g. :func:`grid_patches`), each bounded by its
        own ball in the broad phase (a shape is skipped only if beyond ``reach`` of every
        ball); ``None``: one ball around every probe. Only the speed depends on them: every
        probe must be in a group.

    Returns:
      ``(sd [N], normal, shape [N] int32)``: signed distance (m), outward unit normal (three
      ``[N]`` planes, frame F) and index of the winning shape. Where the winner is beyond
      ``reach`` the broad phase may report another shape or ``sd = FAR``; within it both ways
      agree. Shapes that do not count never win (with none counting: ``sd = FAR``).
    """
    x, y, z = points
    dtype = x.dtype
    kinds = shape_kinds(bodies.shapes)
    spec = tuple(
        (tuple(int(i) for i in idx), td, tuple(int(b) for b in bd)) for idx, td, _, bd in kinds
    )
    leaves = [lv for _, _, lv, _ in kinds]
    T_fw = _pose.inverse(frame.astype(dtype))
    poses = bodies.poses.astype(dtype)
    reach = jnp.asarray(reach, dtype)
    # rounding of the distances themselves: a relative margin on the scene's scale
    scale = jnp.max(jnp.abs(frame[:3])).astype(dtype) + jnp.max(
        jnp.stack([jnp.max(jnp.abs(q)) for q in (x, y, z)])
    )
    reach = reach * (1.0 + 1e-6) + 256 * _eps(dtype) * (scale + reach + 1.0)
    N = x.shape[0]
    if groups is not None:
        groups = tuple(tuple(int(i) for i in g) for g in groups)
        seen = sorted(i for g in groups for i in g)
        if not all(groups) or seen != list(range(N)):
            raise ValueError(f"groups: every probe 0..{N - 1} once, in non-empty groups")
    fn = _sparse if broad_phase else (lambda *a: _dense(*a))
    on = jnp.asarray(shape_on, bool)
    return fn(spec, mode, groups, leaves, poses, on, T_fw, x, y, z, reach)
