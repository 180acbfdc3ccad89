"""ElastomerTaxel dilation: FFT path vs direct sum on n x n grids, side by side.

Both paths evaluate the same sensor (compressibility 1, no shear) on the same indentation
field, vmapped over E environments. The direct sum is O(N^2) in memory and time per
environment, so E shrinks with the grid (same E for both paths of a size); the figure compared
is the time per environment-step and the ratio direct / FFT.

Usage: python benchmarks/bench_elastomer.py [--sizes 11 32 64]
Last line: {"fft_over_direct": {"11": ..., "32": ..., "64": ...}, ...}  (speed-up of FFT)
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _common import emit, time_jitted  # noqa: E402

import difftaxel as dt  # noqa: E402
from difftaxel.sensors import ElastomerTaxel, TrackedPoints  # noqa: E402

ENVS = {11: 1024, 32: 64, 64: 8}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[11, 32, 64])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    track = TrackedPoints(points=np.zeros((1, 3)), segments=((0, 1),))
    speed, per_env = {}, {}
    rng = np.random.default_rng(0)
    for n in a.sizes:
        E = ENVS.get(n, 8)
        half = 0.0015 * (n - 1)
        grid = dt.generate_grid_points_on_plane((-half, -half, 0), (half, half, 0), (0, 0, 1), n, n)
        kw = dict(track_points=track, probe_radius=0.001, lambda_d=5e4, shear_scale=0.0)
        fft = ElastomerTaxel(probe_local_pos=grid, **kw)
        direct = ElastomerTaxel(probe_local_pos=grid.reshape(-1, 3), **kw).replace(
            dilation_reg=float(fft.dilation_length())
        )
        # a spherical indentation cap per environment, random centres
        c = rng.uniform(-half / 2, half / 2, (E, 2))
        r2 = ((grid.reshape(-1, 3)[None, :, :2] - c[:, None]) ** 2).sum(-1)
        H = jnp.asarray(np.maximum(0.0, 0.001 - r2 / 0.02), jnp.float32)
        times = {}
        for name, s in (("fft", fft), ("direct", direct)):
            f = jax.vmap(s.dilation)
            comp, t = time_jitted(f, H, repeats=a.repeats)
            times[name] = t / E
            print(
                f"n={n:3d} E={E:5d} {name:6s} {t / E * 1e6:10.2f} us/env-step  compile {comp:.2f} s"
            )
        speed[str(n)] = times["direct"] / times["fft"]
        per_env[str(n)] = times
    print("FFT speed-up over direct:", {k: f"{v:.1f}x" for k, v in speed.items()})
    emit(
        {
            "fft_over_direct": speed,
            "seconds_per_env_step": per_env,
            "envs_per_size": {str(n): ENVS.get(n, 8) for n in a.sizes},
            "dtype": "float32",
        }
    )


if __name__ == "__main__":
    main()
