import sys, time, statistics
repo = sys.argv[1]; sys.path.insert(0, repo); sys.path.insert(0, repo + "/benchmarks")
import jax, jax.numpy as jnp, numpy as np, trimesh
import difftaxel as dt; assert dt.__file__.startswith(repo)
from difftaxel.sensors import ProximityTaxel, TrackedPoints, make_inputs
from _common import time_jitted
E, M = 1024, 500
grid = dt.generate_grid_points_on_plane((-0.015, -0.015, 0), (0.015, 0.015, 0), (0, 0, 1), 11, 11)
pts, _ = dt.sample_surface_points(trimesh.creation.icosphere(3, 0.01), M)
s = ProximityTaxel(probe_local_pos=grid, track_points=TrackedPoints(np.concatenate([pts, pts]), ((0, M), (1, M))),
                   probe_radius=0.003, shear_coupling=1.0, max_candidates=160)
b = dt.Bodies((dt.Sphere(radius=0.01), dt.Sphere(radius=0.01)), np.array([[-0.006, 0, 0.0105, 0, 0, 0, 1.0], [0.006, 0, 0.0105, 0, 0, 0, 1.0]]),
              np.array([[0.05, 0, 0, 0, 0, 1.0], [0, 0.02, 0, 1.0, 0, 0]]))
inp = make_inputs(np.array([0, 0, 0, 0, 0, 0, 1.0]), b)
st = s.init_state()
rng = np.random.default_rng(0)
poses = np.tile(b.poses, (E, 1, 1)); poses[:, :, :2] += rng.uniform(-0.002, 0.002, (E, 2, 2)); poses = jnp.asarray(poses, jnp.float32)
def f(poses):
    return jax.vmap(lambda p: s.step(st, inp.replace(bodies=inp.bodies.with_state(p)))[1].measured)(poses)
c, t = time_jitted(f, poses, repeats=7)
over = s.step(st, inp)[0].candidate_overflow
print(repo, f"two bodies: {E*121/t:.3e} probe-steps/s, compile {c:.1f}s, overflow {bool(over)}")
