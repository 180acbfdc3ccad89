"""Using a fitted three-axis raw model: forces from a new session's raw log
(:func:`predict_triaxial`, the model inverted sample by sample) and the file a fit is saved in
(:func:`save_triaxial`, :func:`load_triaxial`)."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from .triaxial import TriaxialModel, _decay, _monomials, tare_offset
from .vector import VectorLog, checked_vector_log

__all__ = ["predict_triaxial", "save_triaxial", "load_triaxial"]

FORMAT = "difftaxel.triaxial"


def _inverse_step(W, spec_degree, has_creep):
    """One sample of the model's inverse: Newton on ``W psi(u) = r`` for ``u``."""
    N3 = W.shape[0]

    def psi(u, m_prev, u_prev, a):
        m = a * m_prev + (u - u_prev) if has_creep else None
        cols = [u, _monomials(u.reshape(-1, 3), spec_degree).reshape(-1)]
        return jnp.concatenate(cols + ([m] if has_creep else []))

    def step(carry, inp):
        m_prev, u_prev = carry
        r, a = inp
        lin = W[:, :N3] + (W[:, -N3:] if has_creep else 0.0)
        u = jnp.linalg.solve(lin, r - (W[:, -N3:] @ (a * m_prev - u_prev) if has_creep else 0.0))

        def resid(v):
            return W @ psi(v, m_prev, u_prev, a) - r

        for _ in range(4):  # damped Newton from the linear solution: a step never raises |g|
            g = resid(u)
            d = jnp.linalg.solve(jax.jacfwd(resid)(u), g)
            d = jnp.where(jnp.all(jnp.isfinite(d)), d, 0.0)
            cands = jnp.stack([u - t * d for t in (1.0, 0.5, 0.25, 0.0)])
            cost = jnp.sum(jax.vmap(resid)(cands) ** 2, -1)
            u = cands[jnp.argmin(cost)]
        m = a * m_prev + (u - u_prev) if has_creep else m_prev
        return (m, u), u

    return step


def predict_triaxial(model, log: VectorLog, offset=None) -> np.ndarray:
    """Forces ``[T, N, 3]`` (N, taxel axes) of a session from its raw log, by inverting the model
    sample by sample (Newton's method from the linear solution, one ``lax.scan``).

    ``model``: a :class:`TriaxialModel` or :class:`TriaxialFit`. ``offset [N, 3]``: the
    session's no-load raw values; default its tare (the median of its first ``model.tare``
    seconds, which must be at rest).
    """
    model = getattr(model, "model", model)
    log = checked_vector_log(log)
    N = model.n_taxels
    if log.n_taxels != N:
        raise ValueError(f"{log.name}: {log.n_taxels} taxels, the model has {N}")
    off = tare_offset(log, model.tare) if offset is None else np.asarray(offset, float)
    if off.shape != (N, 3):
        raise ValueError(f"offset: expected [{N}, 3], got {off.shape}")
    T = log.raw.shape[0]
    r = jnp.asarray((log.raw - off[None]).reshape(T, -1))
    a = jnp.asarray(_decay(log.time, model.tau) if model.tau is not None else np.zeros(T))
    step = _inverse_step(jnp.asarray(model.weights), model.degree, model.tau is not None)
    z = jnp.zeros(3 * N, r.dtype)
    u = jax.jit(lambda r, a: jax.lax.scan(step, (z, z), (r, a))[1])(r, a)
    return np.asarray(u).reshape(T, N, 3) * model.scale.reshape(N, 3)


def save_triaxial(path, fit) -> None:
    """Write a fit's model (JSON: weights, degree, tau s, scale N, positions m, rotations, tare
    s, coupling) atomically; the file reads back with :func:`load_triaxial`."""
    from .._files import atomic_write, check_output

    m = getattr(fit, "model", fit)
    out = check_output(path, "path")
    doc = {
        "format": FORMAT,
        "version": 1,
        "weights": np.asarray(m.weights).tolist(),
        "degree": int(m.degree),
        "tau": None if m.tau is None else float(m.tau),
        "scale": np.asarray(m.scale).tolist(),
        "positions": np.asarray(m.positions).tolist(),
        "rotations": np.asarray(m.rotations).tolist(),
        "tare": float(m.tare),
        "coupling": np.asarray(m.coupling).tolist(),
    }
    load_triaxial_dict(doc, out)  # what is written must read back
    text = json.dumps(doc)
    atomic_write(out, lambda fh: fh.write(text), "w")


def load_triaxial(path) -> TriaxialModel:
    """Read a model written by :func:`save_triaxial`; errors name the file."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise ValueError(f"{p}: no such file")
    try:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: not a three-axis model file ({e})") from None
    return load_triaxial_dict(doc, p)


def load_triaxial_dict(doc, name: str) -> TriaxialModel:
    """The model in a saved document, checked (shapes, finite values); errors name ``name``."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{name}: not a three-axis model file (format {FORMAT!r} expected)")
    try:
        W = np.asarray(doc["weights"], float)
        pos = np.asarray(doc["positions"], float)
        rot = np.asarray(doc["rotations"], float)
        scale = np.asarray(doc["scale"], float)
        coupling = np.asarray(doc["coupling"], bool)
        deg, tau, tare = int(doc["degree"]), doc["tau"], float(doc["tare"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{name}: malformed three-axis model ({e})") from None
    N = pos.shape[0] if pos.ndim == 2 else -1
    ok = (
        pos.shape == (N, 3)
        and rot.shape == (N, 3, 3)
        and scale.shape == (3 * N,)
        and coupling.shape == (N, N)
        and W.ndim == 2
        and W.shape[0] == 3 * N
        and 1 <= deg <= 3
        and (tau is None or (np.isfinite(tau) and tau > 0))
        and np.isfinite(tare)
        and tare > 0
        and all(np.all(np.isfinite(a)) for a in (W, pos, rot, scale))
    )
    if not ok:
        raise ValueError(f"{name}: inconsistent three-axis model (shapes or values)")
    return TriaxialModel(
        W, deg, None if tau is None else float(tau), scale, pos, rot, tare, coupling
    )
