import sys, os
repo = sys.argv[1]; chunk = int(sys.argv[2]); cap = int(sys.argv[3]) if len(sys.argv) > 3 else 80
sys.path.insert(0, repo); sys.path.insert(0, repo + "/benchmarks")
import difftaxel; assert difftaxel.__file__.startswith(repo), difftaxel.__file__
import bench_proximity as bp
from _common import time_jitted
f, poses = bp.scene(1024, 11, 500, chunk, cap if cap > 0 else None)
c, t = time_jitted(f, poses, repeats=7)
print(f"{repo} chunk={chunk} cap={cap} {1024*121/t:.3e} probe-steps/s compile {c:.1f}s")
