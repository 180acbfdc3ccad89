"""Side-by-side comparison of this working tree against another commit, benchmark by benchmark.

Checks ``REV`` out into a temporary git worktree and runs each named benchmark script of both
trees in alternating processes (old, new, new, old, ...), so the shared machine's drift hits both
alike. Each benchmark's last output line is its JSON summary; every numeric entry is reported
as the median over rounds per tree and the ratio new / old.

Usage: python benchmarks/ab_compare.py REV [--rounds 3] [--bench kinematic imperfections ...]
       [--new-scripts]  (this tree's scripts against both libraries)
Last line: {"rev": ..., "rounds": ..., "results": {bench: {key: [old, new, ratio]}}}
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARGS = {
    "sensors": ["--rounds", "5"],
    "kinematic": ["--rounds", "5"],
    "imperfections": ["--repeats", "7"],
    "proximity": ["--headline", "--repeats", "5"],
    "elastomer": ["--repeats", "5"],
    "geometry": ["--repeats", "5"],
    "skinning": [],
}


def run(tree: pathlib.Path, bench: str, scripts: pathlib.Path | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    script = (scripts or tree) / "benchmarks" / f"bench_{bench}.py"
    cmd = [sys.executable, str(script), *ARGS.get(bench, [])]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def flatten(d, prefix=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix, float(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bench", nargs="+", default=["kinematic", "imperfections", "proximity"])
    ap.add_argument(
        "--new-scripts",
        action="store_true",
        help="run this tree's benchmark scripts against both libraries (a benchmark REV lacks)",
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = pathlib.Path(tmp) / "old"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(old), a.rev], cwd=ROOT, check=True
        )
        try:
            results = {}
            for bench in a.bench:
                samples = {"old": [], "new": []}
                for r in range(a.rounds):
                    order = ("old", "new") if r % 2 == 0 else ("new", "old")
                    for side in order:
                        tree = old if side == "old" else ROOT
                        res = run(tree, bench, ROOT if a.new_scripts else None)
                        samples[side].append(dict(flatten(res)))
                        print(f"{bench} round {r} {side} done", flush=True)
                table = {}
                for key in samples["new"][0]:
                    if all(key in s for s in samples["old"]) and "machine" not in key:
                        o = statistics.median(s[key] for s in samples["old"])
                        n = statistics.median(s[key] for s in samples["new"])
                        table[key] = [o, n, n / o if o else None]
                results[bench] = table
                for k, (o, n, q) in table.items():
                    print(
                        f"  {bench:14s} {k:60s} old {o:10.4g} new {n:10.4g} new/old {q if q is None else round(q, 3)}"
                    )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False
            )
    print(json.dumps({"rev": a.rev, "rounds": a.rounds, "results": results}))


if __name__ == "__main__":
    main()
