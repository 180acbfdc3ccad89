"""The README's Python examples run as written."""

from __future__ import annotations

import pathlib
import re

import jax.numpy as jnp
import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow  # 10-35 s; CI runs it with the slow cases
def test_readme_python_blocks_run():
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python examples"
    ns: dict = {}
    for b in blocks:
        exec(compile(b, "README.md", "exec"), ns)  # noqa: S102
    f = np.asarray(ns["reading"].ground_truth.force)
    assert f.shape == (11, 11, 3) and np.abs(f).max() > 0
    g = ns["jax"].grad(ns["loss"])(jnp.asarray(0.009))
    assert np.isfinite(g) and g != 0
    assert np.median(ns["position_error"]) < 1e-4 and np.median(ns["normal_error_deg"]) < 1.0


def test_readme_quick_start_commands():
    text = README.read_text()
    qs = text.split("## Quick start", 1)[1].split("##", 1)[0]
    cmds = re.findall(r"```bash\n(.*?)```", qs, flags=re.S)[0].strip().splitlines()
    assert len(cmds) == 2
    assert cmds[0].startswith('python -m pip install -e ".[dev]" && difftaxel demo')
    assert cmds[1].split("#")[0].strip() == "pytest"
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -e ".[dev]"' in ci and "\npytest" in ci
