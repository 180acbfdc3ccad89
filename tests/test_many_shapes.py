"""Shapes of one kind are batched: the program does not grow with the number of shapes, and a
scene's query equals each shape's own, in the shapes' order, whatever the mix of kinds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from difftaxel.geometry import Bodies, Box, Capsule, Plane, Sphere
from difftaxel.sensors import KinematicTaxel, make_inputs
from difftaxel.testing import program_size


def sphere_scene(n, seed=0):
    rng = np.random.default_rng(seed)
    poses = np.concatenate([rng.normal(size=(n, 3)) * 0.05, np.tile([0, 0, 0, 1.0], (n, 1))], 1)
    poses[0, :3] = [0.004, 0.004, 0.0095]
    return Bodies(tuple(Sphere(radius=0.01 + 1e-3 * (i % 3), body=i) for i in range(n)), poses)


def step_size(n):
    g = np.stack(np.meshgrid(np.arange(5) * 2e-3, np.arange(5) * 2e-3), -1).reshape(-1, 2)
    s = KinematicTaxel(probe_local_pos=np.c_[g, np.zeros(25)], probe_radius=1e-3)
    return program_size(s, make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), sphere_scene(n)))


def test_the_program_does_not_grow_with_the_spheres():
    """KinematicTaxel's step and its gradient: the same number of operations with 12 spheres
    as with 60 (200 spheres compiled in ~1 s and ~2 s on a 2-core CPU, against 11 s and 75 s
    with 50 spheres when every shape was its own code)."""
    assert step_size(12) == step_size(60)


def test_a_mixed_scene_equals_each_shape_alone_in_order():
    rng = np.random.default_rng(1)
    shapes = (
        Sphere(radius=0.01, body=0),
        Box(size=(0.02, 0.03, 0.01), body=1),
        Sphere(
            radius=0.02, body=2, T_body_shape=np.array([0.01, 0, 0, 0, 0, 0.38268343, 0.92387953])
        ),
        Plane(body=0),
        Capsule(radius=0.005, length=0.02, body=2),
        Sphere(radius=0.015, body=1),
    )
    q = rng.normal(size=(3, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    poses = np.concatenate([rng.normal(size=(3, 3)) * 0.01, q], 1)
    pts = rng.normal(size=(40, 3)) * 0.02
    frame = np.r_[0.003, -0.002, 0.001, 0.0, 0.0, np.sin(0.2), np.cos(0.2)]
    mask = np.array([True, False, True])
    whole = Bodies(shapes, poses).query(pts, mask, frame=jnp.asarray(frame))
    for i, s in enumerate(shapes):
        alone = Bodies((s,), poses).query(pts, mask, frame=jnp.asarray(frame))
        np.testing.assert_array_equal(whole.sd[i], alone.sd[0])
        np.testing.assert_array_equal(whole.normal[i], alone.normal[0])
        np.testing.assert_array_equal(whole.mask[i], alone.mask[0])


def test_elastomer_start_boxes_do_not_grow_with_the_spheres():
    """ElastomerTaxel(stale_aabb=True) tests every marker against every shape's start-of-step
    box: one batched evaluation per kind, so 12 and 60 spheres make the same program."""
    from difftaxel.layout import generate_grid_points_on_plane
    from difftaxel.sensors import ElastomerTaxel, TrackedPoints

    grid = generate_grid_points_on_plane((-0.006, -0.006, 0), (0.006, 0.006, 0), (0, 0, 1), 3, 3)
    e = ElastomerTaxel(
        probe_local_pos=grid,
        track_points=TrackedPoints(points=np.zeros((1, 3)), segments=((0, 1),)),
        shear_scale=0.0,
        probe_radius=0.001,
        stale_aabb=True,
    )

    def size(n):
        b = sphere_scene(n)
        inp = make_inputs(
            np.array([0, 0, 0, 0, 0, 0, 1.0]), b, body_poses_start=np.asarray(b.poses)
        )
        return len(jax.make_jaxpr(e.depths)(inp).jaxpr.eqns)

    assert size(12) == size(60)


def test_shape_rows_equal_a_gather_for_every_run_pattern():
    """Rows by static slices of runs (few runs), or one gather (many): always ``x[bodies]``,
    and their reverse mode is the gather's."""
    from difftaxel.geometry.bodies import STATIC_ROWS_MAX, shape_rows

    x = jnp.arange(40.0 * 3).reshape(40, 3)
    many = np.arange(0, 2 * (STATIC_ROWS_MAX + 2), 2)  # more runs than slices are taken for
    for b in ([3], [0, 1, 2, 3], [5, 6, 9, 10, 11, 2], [4, 4, 4], [7, 3, 1], many):
        np.testing.assert_array_equal(shape_rows(x, np.asarray(b)), x[np.asarray(b)])
        g = jax.grad(lambda x, b=b: jnp.sum(shape_rows(x, np.asarray(b)) ** 2))(x)
        np.testing.assert_array_equal(g, jax.grad(lambda x, b=b: jnp.sum(x[np.asarray(b)] ** 2))(x))
