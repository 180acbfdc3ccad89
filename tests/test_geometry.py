"""Signed-distance shapes, grid SDFs, triangle meshes, bodies and surface sampling."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import trimesh

from difftaxel import pose as P
from difftaxel.geometry import (
    Bodies,
    Box,
    Capsule,
    Cylinder,
    GridSDF,
    Plane,
    Planes,
    Sphere,
    TriangleMesh,
    genesis_grid_spec,
    sample_surface_points,
    shape_sdf_world,
)
from difftaxel.testing import assert_jit_matches_eager, assert_vmap_matches_loop, check_grad_fd

RNG = np.random.default_rng(0)


def test_closed_form_values():
    s = Sphere(radius=0.5)
    sd, n = s.sdf_local(jnp.array([[0.0, 0, 2.0], [0.1, 0, 0], [0, 0, 0]]))
    np.testing.assert_allclose(sd, [1.5, -0.4, -0.5])
    np.testing.assert_allclose(n[:2], [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(n[2], [0, 0, 1])  # centre: +z (Genesis: the zero vector)

    b = Box(size=[2.0, 4.0, 6.0])
    pts = jnp.array([[2.0, 0, 0], [0, 0, 0], [2.0, 3.0, 0], [0.5, 1.9, 0], [2.0, 3.0, 4.0]])
    sd, n = b.sdf_local(pts)
    np.testing.assert_allclose(sd, [1.0, -1.0, np.sqrt(2.0), -0.1, np.sqrt(3.0)])
    np.testing.assert_allclose(n[0], [1, 0, 0])
    np.testing.assert_allclose(n[2], [np.sqrt(0.5), np.sqrt(0.5), 0])
    np.testing.assert_allclose(n[3], [0, 1, 0])

    pl = Plane(normal=[0.0, 0.0, 2.0])
    sd, n = pl.sdf_local(jnp.array([[3.0, 1.0, -0.25]]))
    np.testing.assert_allclose(sd, [-0.25])
    np.testing.assert_allclose(n, [[0, 0, 1]])

    c = Capsule(radius=0.5, length=2.0)
    sd, n = c.sdf_local(jnp.array([[0.0, 0, 3.0], [1.0, 0, 0.3], [0, 0.2, 0]]))
    np.testing.assert_allclose(sd, [1.5, 0.5, -0.3])
    np.testing.assert_allclose(n[1], [1, 0, 0])

    cy = Cylinder(radius=1.0, height=2.0)
    sd, n = cy.sdf_local(jnp.array([[2.0, 0, 0], [0, 0, 3.0], [2.0, 0, 2.0], [0.0, 0.5, 0.9]]))
    np.testing.assert_allclose(sd, [1.0, 2.0, np.sqrt(2.0), -0.1])
    np.testing.assert_allclose(n[2], [np.sqrt(0.5), 0, np.sqrt(0.5)])
    np.testing.assert_allclose(n[3], [0, 0, 1])


def test_box_normal_reads_the_kept_distance():
    """``Box.sdf_local_xyz(keep=...)``: the normal reads the distance ``keep`` returns (called
    once), with the values and float64 derivatives of the plain query; outside, the normal is
    the clamped offset over the distance (closed form), on a face and inside the face's."""
    from difftaxel._numerics import compute_once, runtime_one

    b = Box(size=[2.0, 4.0, 6.0])
    pts = np.array(
        [[2.0, 3.0, 4.0], [2.0, 0.5, 0.0], [1.0, 0.0, 0.0], [0.5, 1.9, 0.0], [0.0, 0, 0]]
    )  # beyond a corner, beyond a face, on a face, inside, the centre
    planes = tuple(jnp.asarray(pts[:, i]) for i in range(3))
    seen = []

    def keep(d):
        seen.append(d.shape)
        return compute_once(runtime_one(d), d)

    sd0, n0 = b.sdf_local_xyz(*planes)
    sd1, n1 = b.sdf_local_xyz(*planes, keep=keep)
    assert seen == [(5,)]
    np.testing.assert_array_equal(sd1, sd0)
    np.testing.assert_array_equal(np.stack(n1, -1), np.stack(n0, -1))
    np.testing.assert_allclose(sd1, [np.sqrt(3.0), 1.0, 0.0, -0.1, -1.0], atol=1e-15)
    np.testing.assert_allclose(np.stack(n1, -1)[0], np.ones(3) / np.sqrt(3.0))
    np.testing.assert_array_equal(np.stack(n1, -1)[1:4], [[1, 0, 0], [1, 0, 0], [0, 1, 0]])

    def loss(x, kept):
        sd, n = b.sdf_local_xyz(x[:, 0], x[:, 1], x[:, 2], keep=keep if kept else None)
        return jnp.sum(sd * jnp.arange(1.0, 1.0 + x.shape[0])) + jnp.sum(jnp.stack(n, -1) * x)

    g0 = jax.grad(loss)(jnp.asarray(pts), False)
    g1 = jax.grad(loss)(jnp.asarray(pts), True)
    np.testing.assert_array_equal(g1, g0)
    assert np.all(np.isfinite(g1))
    check_grad_fd(lambda x: loss(x, True), jnp.asarray(pts[[0, 1, 3]]), rtol=1e-6)


def test_world_pose_and_shape_offset():
    s = Sphere(radius=0.1, T_body_shape=[0.0, 0, 0.5, 0, 0, 0, 1])
    q = P.quat_from_axis_angle(jnp.array([1.0, 0, 0]), np.pi / 2)
    T_wb = P.make_pose(jnp.array([1.0, 0, 0]), q)  # shape centre at (1, -0.5, 0)
    sd, n = shape_sdf_world(s, T_wb, jnp.array([[1.0, -0.5, 1.0]]))
    np.testing.assert_allclose(sd, [0.9], atol=1e-14)
    np.testing.assert_allclose(n, [[0, 0, 1]], atol=1e-14)


SHAPES = {
    "sphere": (Sphere(radius=0.3), lambda: trimesh.creation.icosphere(5, 0.3), 2e-3),
    "box": (Box(size=[0.4, 0.6, 0.2]), lambda: trimesh.creation.box([0.4, 0.6, 0.2]), 1e-12),
    "capsule": (
        Capsule(radius=0.2, length=0.4),
        lambda: trimesh.creation.capsule(0.4, 0.2, count=[64, 64]),
        2e-3,
    ),
    "cylinder": (
        Cylinder(radius=0.25, height=0.5),
        lambda: trimesh.creation.cylinder(0.25, 0.5, sections=256),
        1e-4,
    ),
}


@pytest.mark.parametrize("kind", list(SHAPES))
def test_shape_against_tessellated_mesh(kind):
    shape, make_mesh, tol = SHAPES[kind]
    mesh = make_mesh()
    tm = TriangleMesh.from_trimesh(mesh)
    pts = jnp.asarray(RNG.uniform(-0.6, 0.6, (200, 3)))
    sd_a, n_a = shape.sdf_local(pts)
    sd_m, n_m = tm.sdf_local(pts)
    np.testing.assert_allclose(sd_m, sd_a, atol=tol)
    # away from the medial axis the normals agree too
    cos = np.sum(np.asarray(n_a) * np.asarray(n_m), -1)
    assert np.median(cos) > 0.999
    # trimesh's own (positive-inside) signed distance agrees with our winding sign
    ref = -trimesh.proximity.signed_distance(mesh, np.asarray(pts))
    np.testing.assert_allclose(sd_m, ref, atol=1e-7)


@pytest.mark.parametrize("kind", list(SHAPES) + ["plane"])
def test_normal_is_normalized_gradient(kind):
    shape = Plane(normal=[0.2, -0.3, 1.0]) if kind == "plane" else SHAPES[kind][0]
    pts = jnp.asarray(RNG.uniform(-0.6, 0.6, (64, 3)))
    g = jax.vmap(jax.grad(lambda p: shape.sdf_local(p)[0]))(pts)
    _, n = shape.sdf_local(pts)
    np.testing.assert_allclose(n, g / np.linalg.norm(g, axis=-1, keepdims=True), atol=1e-10)


@pytest.mark.parametrize("kind", list(SHAPES))
def test_gradients_point_params_pose(kind):
    shape = SHAPES[kind][0]
    p = jnp.array([0.31, -0.27, 0.22])
    T = jnp.asarray(np.r_[0.05, -0.02, 0.01, P.quat_from_axis_angle(jnp.array([0.0, 1, 0]), 0.4)])

    def f(args):
        sh, T_, pp = args
        sd, n = shape_sdf_world(sh, T_, pp)
        return sd + 0.3 * jnp.sum(n * jnp.array([1.0, 2.0, 3.0]))

    check_grad_fd(f, (shape, T, p), rtol=1e-5)


def test_triangle_mesh_face_sign_and_bad_input():
    mesh = trimesh.creation.box([1.0, 1.0, 1.0])
    tm = TriangleMesh.from_trimesh(mesh, sign="face")
    sd, _ = tm.sdf_local(jnp.array([[0.0, 0, 0.4], [0, 0, 0.6]]))
    np.testing.assert_allclose(sd, [-0.1, 0.1], atol=1e-14)
    open_mesh = trimesh.Trimesh(mesh.vertices, mesh.faces[:-1])
    with pytest.raises(ValueError, match="faces: the mesh is not watertight"):
        TriangleMesh.from_trimesh(open_mesh)
    with pytest.raises(ValueError, match="TriangleMesh.triangles"):
        TriangleMesh(triangles=np.zeros((3, 3)))


def test_triangle_mesh_chunking_large():
    mesh = trimesh.creation.icosphere(5, 0.3)  # 10240 faces
    assert len(mesh.faces) > 10000
    tm = TriangleMesh.from_trimesh(mesh, point_chunk=128, face_chunk=512)
    pts = jnp.asarray(RNG.uniform(-0.5, 0.5, (300, 3)))
    sd, _ = jax.jit(tm.sdf_local)(pts)
    np.testing.assert_allclose(sd, np.linalg.norm(pts, axis=-1) - 0.3, atol=2e-3)


def test_grid_from_box_within_half_cell():
    box = Box(size=[0.04, 0.04, 0.01])
    g = GridSDF.from_shape(box)
    assert g.values.shape == (32, 32, 32)
    cell = 1.0 / np.asarray(g.scale)
    lo, hi = g.aabb_local()
    pts = jnp.asarray(RNG.uniform(lo, hi, (500, 3)))  # inside the grid box
    sd_g, _ = g.sdf_local(pts)
    sd_a, _ = box.sdf_local(pts)
    assert np.max(np.abs(np.asarray(sd_g) - np.asarray(sd_a))) <= 0.5 * cell.max()
    # genesis out-of-grid proxy: larger than any in-grid value, continuous rule: Lipschitz
    gg = GridSDF.from_shape(box, out_of_grid="genesis")
    far = jnp.array([[1.0, 0, 0]])
    assert float(gg.sdf_local(far)[0][0]) > float(jnp.max(gg.values))
    np.testing.assert_allclose(g.sdf_local(far)[0], box.sdf_local(far)[0], rtol=1e-2)


def test_grid_genesis_spec_primitive():
    n, cell, origin = genesis_grid_spec([-0.02, -0.02, -0.005], [0.02, 0.02, 0.005], primitive=True)
    np.testing.assert_array_equal(n, [32, 32, 32])
    G = np.array([0.04, 0.04, 0.01]) + 0.2 * 0.04
    np.testing.assert_allclose(cell, G / 31 + 2.220446049250313e-16)


def test_grid_from_real_mesh(shared_dir):
    path = shared_dir / "data" / "meshes" / "ycb" / "YcbTennisBall_collision_vhacd.obj"
    if not path.exists():
        pytest.skip("YCB mesh absent")
    mesh = trimesh.load(path, force="mesh")
    if not mesh.is_watertight:
        mesh = mesh.convex_hull
    g = GridSDF.from_trimesh(mesh, cell_size=0.004)
    tm = TriangleMesh.from_trimesh(mesh)
    lo, hi = mesh.bounds
    pts = jnp.asarray(RNG.uniform(lo, hi, (300, 3)))
    err = np.abs(np.asarray(g.sdf_local(pts)[0]) - np.asarray(tm.sdf_local(pts)[0]))
    assert err.max() <= 0.5 * (1.0 / np.asarray(g.scale)).max()


def test_grid_gradient_and_jit():
    g = GridSDF.from_shape(Sphere(radius=0.02))
    p = jnp.array([0.011, -0.004, 0.007])
    check_grad_fd(lambda q: g.sdf_local(q)[0], p, rtol=1e-5)
    assert_jit_matches_eager(g.sdf_local, jnp.asarray(RNG.uniform(-0.05, 0.05, (20, 3))))


def test_bodies_query_and_velocity():
    shapes = (
        Sphere(radius=0.1, body=0),
        Box(size=[1.0, 1.0, 0.2], body=1),
        Plane(body=2, T_body_shape=[0, 0, -1.0, 0, 0, 0, 1]),
    )
    poses = np.array([[0, 0, 1.0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 1.0]])
    twists = np.array([[1.0, 0, 0, 0, 0, 2.0], [0] * 6, [0] * 6])
    b = Bodies(shapes, poses, twists)
    pts = jnp.array([[0.0, 0, 1.15], [0.0, 0, 0.0], [5.0, 0, -1.5]])
    sd, n, body = b.signed_distance(pts)
    np.testing.assert_allclose(sd, [0.05, -0.1, -0.5])
    np.testing.assert_array_equal(body, [0, 1, 2])
    v = b.velocity_at(jnp.array([0, 0]), jnp.array([[0.0, 0, 1.0], [1.0, 0, 1.0]]))
    np.testing.assert_allclose(v, [[1, 0, 0], [1, 2, 0]])
    sd_m, _, _ = b.signed_distance(pts, body_mask=jnp.array([False, True, True]))
    np.testing.assert_allclose(sd_m[0], 1.15 - 0.1)

    def f(poses):
        return b.with_state(poses).signed_distance(pts)[0]

    assert_vmap_matches_loop(f, (jnp.stack([b.poses, b.poses.at[:, 2].add(0.1)]),))


def test_bad_input_messages():
    with pytest.raises(ValueError, match="Sphere.radius"):
        Sphere(radius=-0.1)
    with pytest.raises(ValueError, match="Box.size"):
        Box(size=[0.1, -0.1, 0.1])
    with pytest.raises(ValueError, match=r"Box.size: expected shape \(\.\.\., 3\)"):
        Box(size=[0.1, 0.1])
    with pytest.raises(ValueError, match="Plane.normal: expected a non-zero"):
        Plane(normal=[0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="Capsule.radius"):
        Capsule(radius=0.0)
    with pytest.raises(ValueError, match="Cylinder.height"):
        Cylinder(height=-1.0)
    with pytest.raises(ValueError, match="Sphere.T_body_shape.*unit quaternion"):
        Sphere(T_body_shape=[0, 0, 0, 0, 0, 0, 2.0])
    with pytest.raises(ValueError, match="Bodies.shapes\\[0\\].body"):
        Bodies((Sphere(body=3),), np.array([[0, 0, 0, 0, 0, 0, 1.0]]))
    with pytest.raises(ValueError, match="Bodies.poses"):
        Bodies((Sphere(),), np.zeros((1, 6)))
    with pytest.raises(ValueError, match="Bodies.twists"):
        Bodies((Sphere(),), np.array([[0, 0, 0, 0, 0, 0, 1.0]]), np.zeros((1, 5)))
    with pytest.raises(ValueError, match="GridSDF.values"):
        GridSDF(values=np.zeros((1, 3, 3)), scale=1.0, offset=0.0)


def test_gradient_pytree_is_not_validated():
    # a gradient of a Sphere is a Sphere of gradients; negative entries must not raise
    g = jax.grad(lambda s: s.sdf_local(jnp.array([0.0, 0, 1.0]))[0])(Sphere(radius=0.5))
    assert float(g.radius) == -1.0


def test_sampling_deterministic_and_on_surface():
    mesh = trimesh.creation.icosphere(3, 0.05)
    p1, n1 = sample_surface_points(mesh, 100)
    p2, _ = sample_surface_points(mesh, 100)
    np.testing.assert_array_equal(p1, p2)
    assert p1.shape == (100, 3) and n1.shape == (100, 3)
    np.testing.assert_allclose(np.linalg.norm(p1, axis=-1), 0.05, atol=2e-3)
    # well spread: min pairwise distance far above random sampling's
    d = np.linalg.norm(p1[:, None] - p1[None], axis=-1) + np.eye(100)
    assert d.min() > 0.005
    with pytest.raises(ValueError, match="n: expected a positive int"):
        sample_surface_points(mesh, 0)


def _unit(v):
    v = jnp.asarray(v, float)
    return v / jnp.linalg.norm(v)


def test_query_in_frame_planes_match_world_query():
    """The planar query in a frame (the sensors' path) equals the world query rotated into
    the frame, for every analytic shape and for a grid SDF (which answers through its stacked
    sdf_local)."""
    grid = GridSDF.from_shape(Sphere(radius=0.05), n=12)
    shapes = (
        Sphere(radius=0.05, body=0),
        Box(size=[0.1, 0.06, 0.04], body=1),
        Capsule(radius=0.02, length=0.05, body=0, T_body_shape=[0.1, 0, 0, 0, 0, 0, 1]),
        Cylinder(radius=0.03, height=0.05, body=1, T_body_shape=[0, 0.1, 0, 0, 0, 0, 1]),
        Plane(normal=[0, 0.6, 0.8], body=2),
        grid,
    )
    q1 = P.quat_from_axis_angle(_unit([0.3, -0.5, 0.8]), 0.7)
    q2 = P.quat_from_axis_angle(_unit([1.0, 0.2, 0.0]), -1.1)
    poses = jnp.array([[0.01, 0.02, 0.0, *q1], [0.0, -0.03, 0.02, *q2], [0, 0, -0.2, 0, 0, 0, 1]])
    b = Bodies(shapes, poses)
    T_wf = jnp.array([0.02, -0.01, 0.03, *P.quat_from_axis_angle(_unit([0, 1.0, 1]), 0.4)])
    pts = jnp.asarray(RNG.uniform(-0.12, 0.12, (64, 3)))
    q = b.query(Planes.from_array(pts), frame=T_wf)
    sd, n, mask = q.sd, q.normal, q.mask
    assert isinstance(n, Planes)
    ref = b.query(P.apply(T_wf[None], pts))
    np.testing.assert_allclose(sd, ref.sd, atol=1e-12)
    n_ref = P.inverse_rotate(T_wf[None, None], ref.normal)
    np.testing.assert_allclose(jnp.stack(n, -1), n_ref, atol=1e-9)
    assert mask.shape == sd.shape == (len(shapes), 64)
    # the stacked public form is the same query
    qs = b.query(pts, frame=T_wf)
    np.testing.assert_allclose(qs.normal, jnp.stack(n, -1), atol=0)


def test_box_normal_ties_inside_go_to_lowest_axis():
    # at the centre every face is equally near: argmax's rule picks x; on the x = y diagonal x
    box = Box(size=[0.2, 0.2, 0.4])
    sd, n = box.sdf_local(jnp.array([[0.0, 0, 0], [0.05, 0.05, 0.0], [0, -0.05, 0.15]]))
    np.testing.assert_allclose(sd, [-0.1, -0.05, -0.05])
    np.testing.assert_allclose(n, [[1.0, 0, 0], [1, 0, 0], [0, -1, 0]])


def test_query_in_frame_gradients_match_fd():
    """Planar query gradients w.r.t. the frame pose, the body poses and the points, for
    a sphere (queried on the frame's axes, no rotation) and a rotated box (through
    affine_planes), against float64 central differences."""
    shapes = (Sphere(radius=0.05, body=0, T_body_shape=[0.01, 0, 0.02, 0, 0, 0, 1]),
              Box(size=[0.1, 0.06, 0.04], body=1))  # fmt: skip
    q1 = P.quat_from_axis_angle(_unit([0.3, -0.5, 0.8]), 0.7)
    q2 = P.quat_from_axis_angle(_unit([1.0, 0.2, 0.0]), -1.1)
    poses = jnp.array([[0.01, 0.02, 0.0, *q1], [0.0, -0.03, 0.02, *q2]])
    T_wf = jnp.array([0.02, -0.01, 0.03, *P.quat_from_axis_angle(_unit([0, 1.0, 1]), 0.4)])
    pts = jnp.asarray(RNG.uniform(-0.08, 0.08, (5, 3)))
    w = jnp.asarray(RNG.normal(size=(4, 2, 5)))

    b0 = Bodies(shapes, poses)

    def loss(p):
        b = b0.with_state(p["poses"])
        q = b.query(Planes(*p["pts"].T), frame=p["T"])
        sd, n = q.sd, q.normal
        return jnp.sum(w * jnp.stack([sd, *n]))

    check_grad_fd(loss, {"poses": poses, "T": T_wf, "pts": pts}, n_directions=6, jit=True)


def test_convex_hull_of_a_box_matches_the_box_inside_and_on_faces():
    from difftaxel.geometry import Box, ConvexHull

    h = np.array([0.01, 0.02, 0.03])
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)]) * h
    hull = ConvexHull.from_points(corners)
    assert hull.normals.shape == (6, 3)
    box = Box(size=2 * h)
    rng = np.random.default_rng(0)
    inside = rng.uniform(-1, 1, (200, 3)) * h
    face = np.array([[0.0, 0.0, 0.03], [0.01, 0.001, 0.0], [0.2, 0.0, 0.0]])  # + one far out
    for p in (inside, face[:2]):
        sd_h, n_h = hull.sdf_local(jnp.asarray(p))
        sd_b, n_b = box.sdf_local(jnp.asarray(p))
        np.testing.assert_allclose(sd_h, sd_b, atol=1e-12)
        np.testing.assert_allclose(n_h, n_b, atol=1e-12)
    # in front of a face, the distance is exact
    sd_far, _ = hull.sdf_local(jnp.asarray(face[2:]))
    assert float(sd_far[0]) == pytest.approx(0.19)
    lo, hi = hull.aabb_local()
    np.testing.assert_allclose(hi, h)
    g = jax.grad(lambda x: hull.sdf_local(x)[0])(jnp.array([0.001, 0.002, 0.025]))
    np.testing.assert_allclose(g, [0, 0, 1.0])
    with pytest.raises(ValueError, match="flat|no 3-d"):
        ConvexHull.from_points(np.c_[rng.uniform(size=(6, 2)), np.zeros(6)])
    with pytest.raises(ValueError, match="points: expected"):
        ConvexHull.from_points(np.zeros((3, 3)))


def test_query_in_frame_stores_each_plane_once_per_environment():
    """Under ``vmap`` over environments (shared probe planes, a pose per environment), the
    planar query of a box keeps its stored-once planes (local coordinates, distance and local
    normals) as divisions by ones batched per environment. Ones made from the shared probe
    planes alone are a broadcast row, which XLA rewrites into a product that its CPU fusion
    copies into every reader (the box's SDF then ran once per normal component)."""
    E, N = 5, 7
    b = Bodies((Box(size=[0.1, 0.06, 0.04]),), jnp.array([[0.0, 0, 0, 0, 0, 0, 1]]))
    pts = Planes.from_array(jnp.asarray(RNG.uniform(-0.1, 0.1, (N, 3)), jnp.float32))
    poses = jnp.tile(jnp.array([0.0, 0, 0, 0, 0, 0, 1], jnp.float32), (E, 1))
    poses = poses.at[:, 2].set(jnp.linspace(-0.03, 0.03, E))  # inside, on and outside faces

    def sd_and_normal(T):
        q = b.query(pts, frame=T)
        return q.sd, tuple(q.normal)

    hlo = jax.jit(jax.vmap(sd_and_normal)).lower(poses).compile().as_text()
    # the divisions whose result has one value per (environment, probe)
    per_env = [
        ln for ln in hlo.splitlines() if " divide(" in ln and f"[{E},1,{N}]" in ln.split("=")[1]
    ]
    assert len(per_env) >= 7, "\n".join(per_env)  # 3 coordinates, the distance, 3 normals
    # the same values as the query of each environment alone
    got = jax.jit(jax.vmap(sd_and_normal))(poses)
    one = jax.jit(sd_and_normal)
    for e in range(E):
        sd, n = one(poses[e])
        np.testing.assert_allclose(got[0][e], sd, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(np.stack(got[1], -1)[e], np.stack(n, -1), rtol=1e-6, atol=1e-6)
