"""Run by test_distributed.py (two processes on localhost): each process loads half of the
environments; the loss, its gradient and a short fit over the global batch are written by
process 0 to the file named in argv[4]."""

import json
import sys

import jax

jax.config.update("jax_enable_x64", True)
from difftaxel.distributed import gather, global_envs, initialize  # noqa: E402

port, n, pid, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if n > 1:
    initialize(f"localhost:{port}", n, pid)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from difftaxel.calibrate import fit  # noqa: E402
from tests.test_distributed import distributed_problem  # noqa: E402

z_all, target_all, loss = distributed_problem()
E = z_all.shape[0]
mine = slice(pid * E // n, (pid + 1) * E // n)
data = global_envs({"z": z_all[mine], "target": target_all[mine]})
k0 = jnp.asarray(1500.0)
value, grad = jax.jit(jax.value_and_grad(lambda k, d: loss(k, d)))(k0, data)
r = fit(
    lambda p, _, d: loss(p["k"], d),
    {"k": k0},
    steps=5,
    learning_rate=0.05,
    transforms={"k": "log"},
    data=data,
)
res = gather({"value": value, "grad": grad, "k": r.params["k"]})
if jax.process_index() == 0:
    with open(out, "w") as fh:
        json.dump({k: float(np.asarray(v).reshape(-1)[0]) for k, v in res.items()}, fh)
