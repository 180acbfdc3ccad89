import sys, time, statistics
repo = sys.argv[1]; chunk = int(sys.argv[2])
sys.path.insert(0, repo); sys.path.insert(0, repo + "/benchmarks")
import jax, jax.numpy as jnp
import difftaxel; assert difftaxel.__file__.startswith(repo)
import bench_proximity as bp
f, poses = bp.scene(1024, 11, 500, chunk, 80)
def loss(p):
    r = f(p)[0]
    return jnp.sum(r.force) + jnp.sum(r.torque)
g = jax.jit(jax.value_and_grad(loss)); fw = jax.jit(f)
jax.block_until_ready(g(poses)); jax.block_until_ready(fw(poses))
tg, tf = [], []
for _ in range(7):
    t0 = time.perf_counter(); jax.block_until_ready(fw(poses)); tf.append(time.perf_counter() - t0)
    t0 = time.perf_counter(); jax.block_until_ready(g(poses)); tg.append(time.perf_counter() - t0)
print(repo, f"forward {statistics.median(tf)*1e3:.1f} ms grad {statistics.median(tg)*1e3:.1f} ms")
