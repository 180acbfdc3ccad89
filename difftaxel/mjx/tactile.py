"""MuJoCo's own MJCF ``<tactile>`` sensor, computed inside MJX.

MuJoCo (3.3.5 and later) declares touch as ``<sensor><tactile geom="G" mesh="M"/></sensor>``:
the vertices of mesh ``M``, placed in geom ``G``'s frame, are taxels; each reads, per
taxel ``j``, a penetration depth and two tangential sliding speeds, written channel-major
(``sensordata[adr + c N + j]``, ``c`` = depth, tangent 1, tangent 2). MJX's JAX backend leaves
these values at zero; :func:`tactile_sensordata` fills them from an ``mjx.Data``, and
:func:`tactile_step` / :func:`tactile_rollout` run them inside ``mjx.step``, so code that reads
``d.sensordata`` is unchanged.

The rules are the C engine's (``engine_sensor.c``, ``mjSENS_TACTILE``; checked against the
installed ``mujoco`` 3.17.0, whose readings the tests match to 1e-12):

* **Which geoms are sensed**: the geoms in MuJoCo's contact list touching the sensor geom's
  weld body (``body_weldid``), each once. Here: the pairs MJX can collide (MJX's own pair
  list), gated per step by MJX's contacts (a pair with ``dist <= margin``).
* **Depth**: ``max(0, -sd)`` with ``sd`` MuJoCo's signed distance of the taxel in each sensed
  geom's frame, the largest over the geoms. The distances are MuJoCo's own formulas
  (``engine_collision_sdf.c``): exact for sphere, capsule and the outside of a box; the box's
  inside is a field that turns from radial to the face normals; cylinder; MuJoCo's ellipsoid
  approximation ``k0 (k0 - 1) / k1``; plane ``z``. Mesh geoms are sensed only through an octree
  (``needsdf``); MuJoCo skips meshes without one, and so does this. A mesh *with* an octree is
  refused, or with ``meshes="hull"`` read through its convex hull's exact distance instead of
  MuJoCo's trilinear octree field (the difference is the octree's interpolation error); an SDF
  plugin, a height field or a flex is refused (see :func:`mjcf_tactile`).
* **Tangential channels**: ``sum_g |v_rel . t_k|`` over the geoms that penetrate the taxel,
  ``v_rel`` the sensor body's velocity minus the sensed body's, both at the taxel (MuJoCo
  3.17.0; the C source of mid-2026 took the sensed body's at its geom's centre, which a
  spinning object tells apart), ``t_k`` the mesh's stored per-vertex frame (meshes with three
  vectors per vertex; otherwise these channels stay 0).
* ``cutoff`` clips every value to ``[-cutoff, cutoff]``.

The tangents turn with the sensor geom (``geom_xmat`` times the stored vectors) in MuJoCo
3.17.0; the C source of mid-2026 (GitHub ``a7255075``) rotated them by ``mesh_quat`` only, which
left them fixed in world axes: the installed engine, not that source, is the reference here.

One thing the C engine does looks like a bug. ``mode="mujoco"`` (the default) reproduces it;
``mode="corrected"`` fixes it: the builtin ``plate`` mesh stores its per-vertex frames as
(x, y, z) of its own axes, i.e. (a tangent, the other tangent, the normal) in the (normal, t1,
t2) slots, so the second "tangent" lies along the plate's normal: sliding along the plate's x
reads nothing and pressing in and out reads as slip. The corrected mode rebuilds each taxel's
tangents in the plane orthogonal to its surface normal (from the mesh's faces); on meshes whose
stored frames are already right (``wedge``) it changes nothing but their handedness.

``smoothing`` (m, > 0) replaces the hard parts by smooth ones whose limit is the exact reading:
the contact gate by ``sigmoid((margin - dist) / smoothing)``, ``max(0, -sd)`` by a softplus, the
largest depth over the geoms by a softmax-weighted mean (each geom weighted by its gate, with
"no geom" at depth 0 among them, so a geom out of contact does not dilute it), and the
tangential gate ``sd < 0`` by ``sigmoid(-sd / smoothing)``, so gradients exist before contact.

**Cost.** A reading evaluates either every (sensor, geom) pair MJX could ever collide (the
Shadow Hand with a plate on each of its 21 links: 338 pairs at 49 taxels each), or only the
entries of MJX's contact list (30 there: 15 contacts, two sides), as MuJoCo's C engine reads
only the geoms in contact; ``visit`` picks one, by default the fewer evaluations. Both give the
same readings and derivatives (:mod:`difftaxel.mjx.tactile_visit`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
from mujoco import mjx as _mjx

from .._pytree import pytree_dataclass, static_field
from .mujoco_sdf import SDF_TYPES
from .tactile_visit import (
    VISITS,
    choose_visit,
    combine,
    contacts_pass,
    pairs_pass,
    taxel_frames,
)

Array = jax.Array

__all__ = [
    "MjcfTactile",
    "mjcf_tactile",
    "tactile_sensordata",
    "tactile_step",
    "tactile_rollout",
    "tactile_readings",
    "TactileTaxels",
    "tactile_kinematic",
]

_GT = mujoco.mjtGeom


class _Pairs(NamedTuple):
    """The (sensor, geom) pairs of one geom type: ``sensor [P]``, ``geom [P]`` indices (the
    geoms' sizes and hulls are in :class:`MjcfTactile`'s per-geom tables)."""

    sensor: Array
    geom: Array


@pytree_dataclass
class MjcfTactile:
    """Every ``<tactile>`` sensor of a MuJoCo model, as :func:`mjcf_tactile` reads them.

    Leaves (per sensor ``s``, taxels padded to ``N = max_s N_s``):
      vertices: ``[S, N, 3]`` taxel positions in the sensor geom's frame (m).
      tangents_mujoco: ``[S, N, 2, 3]`` the mesh's stored tangents (geom frame), as MuJoCo
        uses them.
      tangents_local: ``[S, N, 2, 3]`` corrected tangents (geom frame).
      has_frame: ``[S]`` the mesh stores three vectors per vertex (else no tangential data).
      sensor_geom, sensor_weld, sensor_root: ``[S]`` int: the sensor geom, its weld body, that
        body's root (``cvel`` is about the root's ``subtree_com``).
      pairs: one :class:`_Pairs` per sensed geom type (static order ``types``), for
        ``visit="pairs"``.
      geom_body, geom_root, geom_weld: ``[ngeom]`` int tables.
      out_index: ``[D]`` int: where each tactile value goes in ``sensordata``; ``out_source``
        ``[D]``: which entry of the padded ``[S, 3, N]`` readings it is.
      cutoff: ``[D]`` (``inf`` where a sensor has none).
      weld_sensors: ``[nbody, B]`` int: the sensors on each weld body (padded with ``S``).
      geom_type, geom_size, geom_sensed: ``[ngeom]`` MuJoCo's types, half-sizes ``[ngeom, 3]``
        (m), and whether a tactile sensor reads the geom (False for a mesh MuJoCo skips).
      geom_hull: ``[ngeom]`` int: a sensed mesh's row in ``hull_normals [H, F, 3]`` and
        ``hull_offsets [H, F]`` (its convex hull's face planes, geom frame; 0 otherwise).

    Static: ``types`` (geom types of ``pairs``), ``mode``, ``smoothing``, ``visit`` (what a
    reading evaluates: :mod:`difftaxel.mjx.tactile_visit`), ``out_start``: where the tactile
    values start in ``sensordata`` when they are one block in the readings' own order (every
    sensor with as many taxels, one after the other), else -1.
    """

    vertices: Array
    tangents_mujoco: Array
    tangents_local: Array
    has_frame: Array
    sensor_geom: Array
    sensor_weld: Array
    sensor_root: Array
    pairs: tuple
    geom_body: Array
    geom_root: Array
    geom_weld: Array
    out_index: Array
    out_source: Array
    cutoff: Array
    weld_sensors: Array
    geom_type: Array
    geom_size: Array
    geom_sensed: Array
    geom_hull: Array
    hull_normals: Array
    hull_offsets: Array
    types: tuple = static_field(())
    mode: str = static_field("mujoco")
    smoothing: float = static_field(0.0)
    visit: str = static_field("auto")
    out_start: int = static_field(-1)

    def replace(self, **changes) -> MjcfTactile:
        """A copy with ``mode``, ``smoothing`` and / or ``visit`` changed (checked as at
        construction)."""
        bad = set(changes) - {"mode", "smoothing", "visit"}
        if bad:
            raise ValueError(
                f"MjcfTactile.replace: only mode, smoothing and visit change, got {sorted(bad)}"
            )
        if "mode" in changes:
            _check_mode(changes["mode"])
        if "smoothing" in changes:
            changes["smoothing"] = _check_smoothing(changes["smoothing"])
        if "visit" in changes:
            _check_visit(changes["visit"])
        return dataclasses.replace(self, **changes)


def _check_mode(mode):
    if mode not in ("mujoco", "corrected"):
        raise ValueError(f"mode: expected 'mujoco' or 'corrected', got {mode!r}")


def _check_visit(visit):
    if visit not in VISITS:
        raise ValueError(f"visit: expected one of {VISITS}, got {visit!r}")


def _check_smoothing(smoothing) -> float:
    if isinstance(smoothing, jax.core.Tracer):
        raise ValueError("smoothing: a static length (m); it picks the smooth code path")
    s = float(smoothing)
    if not (np.isfinite(s) and s >= 0):
        raise ValueError(f"smoothing: expected a finite length >= 0 (m), got {smoothing!r}")
    return s


def _name(m, obj, i) -> str:
    n = mujoco.mj_id2name(m, obj, int(i))
    return repr(n) if n else f"#{int(i)}"


def _corrected_frames(V, F, stored):
    """Tangents ``[N, 2, 3]`` orthogonal to each vertex's surface normal (area-weighted
    normals of its faces, oriented along the stored vector they align with best; a vertex
    without faces keeps the stored normal); t1 is the stored first tangent projected onto the
    tangent plane (the stored normal where that degenerates), t2 = n x t1."""
    n_v = np.zeros_like(V)
    if len(F):
        a, b, c = V[F[:, 0]], V[F[:, 1]], V[F[:, 2]]
        fn = np.cross(b - a, c - a)
        for k in range(3):  # host-side, once per model
            np.add.at(n_v, F[:, k], fn)
    length = np.linalg.norm(n_v, axis=1, keepdims=True)
    n = np.where(length > 0, n_v / np.where(length > 0, length, 1.0), stored[:, 0])
    align = np.einsum("nkd,nd->nk", stored, n)
    best = np.argmax(np.abs(align), 1)
    n = n * np.sign(align[np.arange(len(n)), best])[:, None]
    t1 = stored[:, 1] - np.sum(stored[:, 1] * n, 1, keepdims=True) * n
    alt = stored[:, 0] - np.sum(stored[:, 0] * n, 1, keepdims=True) * n
    small = np.linalg.norm(t1, axis=1) < 1e-6
    t1 = np.where(small[:, None], alt, t1)
    t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
    return np.stack([t1, np.cross(n, t1)], 1)


def _candidate_pairs(m) -> list[tuple[int, int]]:
    try:
        from mujoco.mjx._src.collision_driver import geom_pairs
    except ImportError as e:  # pragma: no cover - a newer MJX layout
        raise ImportError(f"difftaxel.mjx.tactile needs MJX's geom_pairs ({e})") from None
    return [(int(a), int(b)) for a, b, _ in geom_pairs(m)]


def mjcf_tactile(
    m: mujoco.MjModel,
    *,
    mode: str = "mujoco",
    smoothing: float = 0.0,
    meshes: str = "refuse",
    visit: str = "auto",
):
    """Read every ``<tactile>`` sensor of ``m`` (a ``mujoco.MjModel``) for MJX.

    Args:
      m: the host model, as the user's MJCF compiled it.
      mode: ``"mujoco"`` (the C engine's readings, its quirk included) or ``"corrected"``
        (tangents in each taxel's tangent plane); see the module docstring.
      smoothing: 0 (exact) or a length (m) for the smooth readings (gradients before contact).
      meshes: what to do with a sensed mesh that has an octree SDF (``needsdf``), which MuJoCo
        reads through that octree's trilinear field: ``"refuse"`` (default: an error) or
        ``"hull"``: its convex hull's exact signed distance instead (a documented departure:
        the octree's interpolation error, measured in the tests, is the difference).
      visit: what a reading evaluates: ``"pairs"`` (every pair MJX could collide, then gated),
        ``"contacts"`` (the contact list's entries only) or ``"auto"`` (the fewer evaluations);
        the readings are the same (:mod:`difftaxel.mjx.tactile_visit`).

    Returns an :class:`MjcfTactile`, or None when ``m`` has no tactile sensor.

    Raises ``ValueError`` with one line naming the sensor where difftaxel cannot compute what
    MuJoCo would: a sensed geom that is an SDF plugin, a height field or a mesh with an octree
    (``needsdf``; meshes without one are skipped, as MuJoCo skips them), a model with flexes, or
    a tactile sensor with a delay, an interval or history samples.
    """
    _check_mode(mode)
    _check_visit(visit)
    smoothing = _check_smoothing(smoothing)
    if meshes not in ("refuse", "hull"):
        raise ValueError(f"meshes: expected 'refuse' or 'hull', got {meshes!r}")
    ids = np.flatnonzero(np.asarray(m.sensor_type) == int(mujoco.mjtSensor.mjSENS_TACTILE))
    if ids.size == 0:
        return None
    if int(m.nflex) > 0:
        raise ValueError(
            f"m: the model has {int(m.nflex)} flex(es); difftaxel's <tactile> does not sense "
            "flex contacts"
        )
    pairs = _candidate_pairs(m)
    weld = np.asarray(m.body_weldid)[np.asarray(m.geom_bodyid)]
    S = ids.size
    nverts = [int(m.mesh_vertnum[m.sensor_objid[i]]) for i in ids]
    N = max(nverts)
    verts = np.zeros((S, N, 3))
    t_mj = np.zeros((S, N, 2, 3))
    t_loc = np.zeros((S, N, 2, 3))
    has_frame = np.zeros(S, bool)
    sens_geom = np.zeros(S, np.int32)
    sens_weld = np.zeros(S, np.int32)
    by_type: dict[int, list] = {}
    out_index, out_source, cutoff = [], [], []
    for s, i in enumerate(ids):  # host-side, once per model
        what = f"tactile sensor {_name(m, mujoco.mjtObj.mjOBJ_SENSOR, i)}"
        for attr in ("sensor_delay", "sensor_interval"):
            v = np.asarray(getattr(m, attr, np.zeros(m.nsensor)))[i]
            if np.any(v != 0):
                raise ValueError(f"{what}: {attr[7:]} {v} is not supported (only plain readings)")
        if (
            int(np.asarray(getattr(m, "sensor_history", np.zeros((m.nsensor, 2))))[i].ravel()[0])
            > 0
        ):
            raise ValueError(f"{what}: history samples are not supported (only plain readings)")
        mid, g = int(m.sensor_objid[i]), int(m.sensor_refid[i])
        nv = nverts[s]
        V = np.asarray(m.mesh_vert[m.mesh_vertadr[mid] : m.mesh_vertadr[mid] + nv], float)
        verts[s, :nv] = V
        nn = int(m.mesh_normalnum[mid])
        stored = np.asarray(
            m.mesh_normal[m.mesh_normaladr[mid] : m.mesh_normaladr[mid] + nn], float
        )
        if nn == 3 * nv:
            has_frame[s] = True
            stored = stored.reshape(nv, 3, 3)
            t_mj[s, :nv] = stored[:, 1:]
            F = np.asarray(
                m.mesh_face[m.mesh_faceadr[mid] : m.mesh_faceadr[mid] + m.mesh_facenum[mid]]
            )
            t_loc[s, :nv] = _corrected_frames(V, F, stored)
        sens_geom[s], sens_weld[s] = g, weld[g]
        sensed = set()
        for a, b in pairs:
            if weld[a] == weld[g]:
                sensed.add(b)
            if weld[b] == weld[g]:
                sensed.add(a)
        for o in sorted(sensed):
            t = int(m.geom_type[o])
            gname = f"geom {_name(m, mujoco.mjtObj.mjOBJ_GEOM, o)}"
            if t == int(_GT.mjGEOM_MESH):
                if int(m.mesh_octadr[m.geom_dataid[o]]) == -1:
                    continue  # no octree: MuJoCo skips it
                if meshes == "refuse":
                    raise ValueError(
                        f"{what}: senses {gname}, a mesh with an octree SDF (needsdf), which "
                        "MuJoCo interpolates; pass meshes='hull' for its convex hull's exact "
                        "distance (MuJoCo skips meshes without an octree)"
                    )
            elif t not in SDF_TYPES:
                raise ValueError(
                    f"{what}: senses {gname} of type {_GT(t).name}, which has no signed "
                    "distance here (MuJoCo's C engine raises on it too, or needs a plugin)"
                )
            by_type.setdefault(t, []).append((s, o))
        dim, adr = int(m.sensor_dim[i]), int(m.sensor_adr[i])
        nch = dim // nv
        c = float(m.sensor_cutoff[i])
        for ch in range(nch):
            for j in range(nv):
                out_index.append(adr + ch * nv + j)
                out_source.append((s * 3 + min(ch, 2)) * N + j if ch < 3 else -1)
                cutoff.append(c if c > 0 else np.inf)
    types = tuple(sorted(by_type))
    sizes = np.asarray(m.geom_size, float)
    pair_groups = tuple(
        _Pairs(
            jnp.asarray([s for s, _ in by_type[t]], jnp.int32),
            jnp.asarray([o for _, o in by_type[t]], jnp.int32),
        )
        for t in types  # host-side, a few geom types
    )
    # sensors per weld body, every geom's type, size and (a sensed mesh's) hull
    gtype = np.asarray(m.geom_type)
    sensed = np.isin(gtype, types)
    mesh = int(_GT.mjGEOM_MESH)
    hull_geoms = sorted({o for _, o in by_type.get(mesh, [])})
    sensed &= (gtype != mesh) | np.isin(np.arange(m.ngeom), hull_geoms)
    geom_hull = np.zeros(m.ngeom, np.int32)
    geom_hull[hull_geoms] = np.arange(len(hull_geoms))
    hull_n, hull_o = (
        _hull_planes(m, hull_geoms)
        if hull_geoms
        else (np.zeros((1, 1, 3)), np.full((1, 1), np.inf))
    )
    per_body = np.bincount(sens_weld, minlength=m.nbody)
    weld_sensors = np.full((m.nbody, max(1, int(per_body.max()))), S, np.int32)
    for s in range(S):  # host-side, once per model
        weld_sensors[sens_weld[s], np.sum(sens_weld[:s] == sens_weld[s])] = s
    src = np.asarray(out_source)
    dst = np.asarray(out_index)
    block = bool(
        len(src)
        and np.all(src == np.arange(len(src)))
        and np.all(dst == dst[0] + np.arange(len(dst)))
    )
    keep = src >= 0  # channels past the third (none in MuJoCo 3.17) stay 0
    dt = jnp.result_type(float)
    root = np.asarray(m.body_rootid)
    return MjcfTactile(
        vertices=jnp.asarray(verts, dt),
        tangents_mujoco=jnp.asarray(t_mj, dt),
        tangents_local=jnp.asarray(t_loc, dt),
        has_frame=jnp.asarray(has_frame),
        sensor_geom=jnp.asarray(sens_geom),
        sensor_weld=jnp.asarray(sens_weld),
        sensor_root=jnp.asarray(root[sens_weld], jnp.int32),
        pairs=pair_groups,
        geom_body=jnp.asarray(m.geom_bodyid, jnp.int32),
        geom_root=jnp.asarray(root[np.asarray(m.geom_bodyid)], jnp.int32),
        geom_weld=jnp.asarray(weld, jnp.int32),
        out_index=jnp.asarray(np.asarray(out_index)[keep], jnp.int32),
        out_source=jnp.asarray(src[keep], jnp.int32),
        cutoff=jnp.asarray(np.asarray(cutoff)[keep], dt),
        weld_sensors=jnp.asarray(weld_sensors),
        geom_type=jnp.asarray(gtype, jnp.int32),
        geom_size=jnp.asarray(sizes, dt),
        geom_sensed=jnp.asarray(sensed),
        geom_hull=jnp.asarray(geom_hull),
        hull_normals=jnp.asarray(hull_n, dt),
        hull_offsets=jnp.asarray(hull_o, dt),
        types=types,
        mode=mode,
        smoothing=smoothing,
        visit=visit,
        out_start=int(dst[0]) if block else -1,
    )


def _hull_planes(m, geoms):
    """Face planes of each mesh geom's convex hull (geom frame): ``normals [P, F, 3]``,
    ``offsets [P, F]``, padded to the most faces with planes that never win the max."""
    from ..geometry import ConvexHull

    hulls = []
    for g in geoms:  # host-side, once per model
        mid = int(m.geom_dataid[g])
        v = np.asarray(m.mesh_vert[m.mesh_vertadr[mid] : m.mesh_vertadr[mid] + m.mesh_vertnum[mid]])
        h = ConvexHull.from_points(v)
        hulls.append((np.asarray(h.normals), np.asarray(h.offsets)))
    F = max(len(o) for _, o in hulls)
    nrm = np.zeros((len(hulls), F, 3))
    off = np.full((len(hulls), F), np.inf)
    for i, (n, o) in enumerate(hulls):
        nrm[i, : len(o)], off[i, : len(o)] = n, o
    return jnp.asarray(nrm), jnp.asarray(off)


# ----------------------------------------------------------------------------- readings


def tactile_readings(tac: MjcfTactile, d) -> Array:
    """The tactile values ``[S, 3, N]`` (depth in m, then the two sliding speeds in m/s; padded
    taxels 0) of every sensor in ``tac`` from ``d`` (an ``mjx.Data`` after ``mjx.forward`` or
    ``mjx.step``: its geom poses, ``cvel``, ``subtree_com`` and contacts). ``tac.visit``
    picks what is evaluated (every candidate pair, or the contact list's entries); the
    readings are the same."""
    dtype = d.geom_xpos.dtype
    items = contacts_pass if choose_visit(tac, d) == "contacts" else pairs_pass
    return combine(tac, *items(tac, d, taxel_frames(tac, d)), dtype)


def tactile_sensordata(tac: MjcfTactile | None, d):
    """``d`` with every tactile sensor's values written into ``d.sensordata`` at MuJoCo's
    addresses (channel-major: depth, tangent 1, tangent 2; ``cutoff`` applied). ``tac`` None
    (a model without tactile sensors) returns ``d`` unchanged."""
    if tac is None:
        return d
    r = tactile_readings(tac, d).reshape(-1)
    if tac.out_start >= 0:  # one block: a slice, not a gather and a scatter (why: cheaper)
        vals = jnp.clip(r, -tac.cutoff, tac.cutoff).astype(d.sensordata.dtype)
        return d.replace(
            sensordata=jax.lax.dynamic_update_slice(d.sensordata, vals, (tac.out_start,))
        )
    vals = jnp.clip(r[tac.out_source], -tac.cutoff, tac.cutoff)
    return d.replace(sensordata=d.sensordata.at[tac.out_index].set(vals.astype(d.sensordata.dtype)))


def tactile_step(mx, d, tac: MjcfTactile | None):
    """``mjx.step`` with the tactile sensors filled in (as ``mj_step`` leaves them: the values
    of the state the step started from, computed in its forward pass)."""
    return tactile_sensordata(tac, _mjx.step(mx, d))


def tactile_rollout(mx, d0, tac: MjcfTactile | None, controls):
    """Scan :func:`tactile_step` over ``controls [T, nu]``; returns ``(final data, sensordata
    [T, nsensordata])``. ``jax.vmap`` it over environments."""

    def step(d, u):
        d = tactile_step(mx, d.replace(ctrl=u), tac)
        return d, d.sensordata

    return jax.lax.scan(step, d0, controls)


# ----------------------------------------------------------------------------- difftaxel forces


class TactileTaxels(NamedTuple):
    """A ``<tactile>`` sensor's taxels as a difftaxel force sensor (:func:`tactile_kinematic`).

    Attributes:
      sensor: a :class:`~difftaxel.sensors.KinematicTaxel` whose probes are the mesh's vertices
        in the sensor geom's **body** frame (m), with the imperfection chain it was given.
      scene: the :class:`~difftaxel.mjx.MjxScene` of that body (its own geoms excluded).
      frames: ``[N, 3, 3]`` each taxel's (normal, tangent 1, tangent 2) in the body frame: the
        mesh's stored vectors (``mode="mujoco"``) or the corrected tangents with their normal.
      sensor_index: the sensor's index in the model.
    """

    sensor: object
    scene: object
    frames: np.ndarray
    sensor_index: int


def tactile_kinematic(
    m: mujoco.MjModel, sensor, *, mode: str = "mujoco", mesh: str = "hull", **options
) -> TactileTaxels:
    """The taxels of ``<tactile>`` sensor ``sensor`` (name or index) as difftaxel's
    :class:`~difftaxel.sensors.KinematicTaxel` on the same vertices and frames: from
    depths to forces (N) with the imperfection chain, without touching the model.

    ``options`` are KinematicTaxel's (``probe_radius``, ``normal_stiffness``, ``imperfections``,
    ...); ``mesh`` maps the sensed meshes (:func:`~difftaxel.mjx.scene_from_model`). Run it with
    :func:`~difftaxel.mjx.rollout` (``sensor``, ``scene``); its forces are in the body frame,
    ``np.einsum("nij,...nj->...ni", frames, force)`` takes them into taxel axes (normal,
    tangent 1, tangent 2).
    """
    from ..sensors import KinematicTaxel
    from .scene import scene_from_model

    _check_mode(mode)
    ids = np.flatnonzero(np.asarray(m.sensor_type) == int(mujoco.mjtSensor.mjSENS_TACTILE))
    if isinstance(sensor, str):
        i = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SENSOR, sensor)
    else:
        i = int(sensor)
    if i not in ids:
        raise ValueError(f"sensor: {sensor!r} is not a <tactile> sensor of the model")
    mid, g = int(m.sensor_objid[i]), int(m.sensor_refid[i])
    nv = int(m.mesh_vertnum[mid])
    V = np.asarray(m.mesh_vert[m.mesh_vertadr[mid] : m.mesh_vertadr[mid] + nv], float)
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, np.asarray(m.geom_quat[g], float))
    R = R.reshape(3, 3)
    p_body = V @ R.T + np.asarray(m.geom_pos[g], float)
    nn = int(m.mesh_normalnum[mid])
    stored = np.asarray(m.mesh_normal[m.mesh_normaladr[mid] : m.mesh_normaladr[mid] + nn], float)
    if nn == 3 * nv:
        stored = stored.reshape(nv, 3, 3)
        if mode == "corrected":
            F = np.asarray(
                m.mesh_face[m.mesh_faceadr[mid] : m.mesh_faceadr[mid] + m.mesh_facenum[mid]]
            )
            t = _corrected_frames(V, F, stored)
            stored = np.concatenate([np.cross(t[:, 0], t[:, 1])[:, None], t], 1)
        frames = np.einsum("ij,nkj->nki", R, stored)
    else:
        frames = np.full((nv, 3, 3), np.nan)
    taxel = KinematicTaxel(probe_local_pos=p_body, **options)
    body = int(m.geom_bodyid[g])
    return TactileTaxels(taxel, scene_from_model(m, body, mesh=mesh), frames, i)
