"""Fitted raw-model parameters: what a fit keeps (:class:`RawParams`), how it predicts a new
log's forces with the right time units and offset (:func:`predict`), and the file it is saved
in (:func:`save_raw_params`, :func:`load_raw_params`)."""

from __future__ import annotations

import json
import os
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .logs import RawLog, Saturation
from .model import REF_COUNTS, SOFTNESS, raw_to_force

__all__ = ["RawParams", "predict", "save_raw_params", "load_raw_params"]


class RawParams(NamedTuple):
    """Fitted raw-model parameters as saved (:func:`load_raw_params`): ``params`` (``[N]``
    each, ``offset`` ``[N]`` or ``[L, N]``), ``sign [N]``, ``dt`` (s, the fitted logs' sample
    period; None: they were in samples), ``saturation``, ``scale`` (``ref_counts``,
    ``softness``: raw units, ``[N]``)."""

    params: dict
    sign: np.ndarray
    dt: float | None
    saturation: Saturation
    scale: dict


def predict(model, log: RawLog, log_index: int | None = None) -> np.ndarray:
    """Forces ``[T, N]`` (N) predicted from ``log.raw`` by a fit (:class:`RawFit` or saved
    :class:`RawParams`).

    Time units: the model's ``hysteresis_tau`` is in seconds when it was fitted on timed logs
    (``model.dt``), in samples otherwise. A timed model applies to a timed log at the log's own
    rate (its delay, in samples, converted by the ratio of the rates), and to a log without
    time at the model's ``dt``; a model fitted in samples applies only to logs without time
    (its samples' period is unknown): otherwise ``ValueError``.

    Offsets: a fit of ``L`` logs has one offset per log; ``log_index`` says whose offset to use
    (required when ``L > 1``, a ``ValueError`` otherwise).
    """
    model = getattr(model, "model", model)  # a RawFit carries its RawParams
    params, sign = model.params, model.sign
    off = jnp.asarray(params["offset"])
    if off.ndim == 2:
        if log_index is None:
            raise ValueError(
                f"log_index: the parameters hold {off.shape[0]} offsets (one per fitted log); "
                f"say whose offset applies (0..{off.shape[0] - 1})"
            )
        if not 0 <= log_index < off.shape[0]:
            raise ValueError(f"log_index: expected 0..{off.shape[0] - 1}, got {log_index}")
        off = off[log_index]
    if np.shape(log.raw)[1:] != tuple(off.shape):
        raise ValueError(
            f"raw: the log has {np.shape(log.raw)[1:]} taxels, the parameters {off.shape}"
        )
    p = {**{k: jnp.asarray(v) for k, v in params.items()}, "offset": off}
    dt = log.dt
    if model.dt is None and log.dt is not None:
        raise ValueError(
            f"dt: the parameters were fitted in samples (hysteresis_tau in samples at an unknown "
            f"rate), the log is timed (dt = {log.dt:g} s); refit on timed logs, or apply them "
            "to logs without time"
        )
    if model.dt is not None:
        dt = model.dt if log.dt is None else log.dt
        if "delay" in p:
            p["delay"] = p["delay"] * (model.dt / dt)  # samples at the fit's rate -> the log's
    p.update({k: jnp.asarray(v) for k, v in model.scale.items()})
    return np.asarray(raw_to_force(p, jnp.asarray(log.raw, float), dt, jnp.asarray(sign)))


def save_raw_params(path, f) -> None:
    """Write a fit's (:class:`~difftaxel.rawmodel.RawFit`) parameters (JSON, atomically: an existing file is replaced whole or kept),
    with what :func:`predict` needs to apply them to another log: the fitted logs' sample
    period ``dt`` (time units), the raw scale, and one offset per fitted log."""
    from .._files import atomic_write

    doc = {
        "format": "difftaxel.rawmodel",
        "version": 1,
        "units": {
            "offset": "raw units (counts or volts)",
            "force_at_ref": "N",
            "hysteresis_tau": "samples" if f.dt is None else "s",
            "delay": "samples (at dt)",
            "ref_counts": "raw units",
            "softness": "raw units",
        },
        "dt": f.dt,
        "softness": np.asarray(f.scale["softness"]).tolist(),
        "ref_counts": np.asarray(f.scale["ref_counts"]).tolist(),
        "sign": np.asarray(f.sign).tolist(),
        "saturation": {
            "lo": [None if np.isnan(v) else float(v) for v in f.saturation.lo],
            "hi": [None if np.isnan(v) else float(v) for v in f.saturation.hi],
        },
        "params": {k: np.asarray(v).tolist() for k, v in f.params.items()},
        "std": {
            k: [x if np.isfinite(x) else None for x in np.asarray(v, float).ravel().tolist()]
            for k, v in f.std.items()
        },
        "undetermined": list(f.undetermined),
    }
    text = json.dumps(doc, indent=1, allow_nan=False)
    atomic_write(path, lambda fh: fh.write(text), "w")


def load_raw_params(path) -> RawParams:
    """Read :func:`save_raw_params`'s file as :class:`RawParams`. Errors name the file."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{p}: is a folder, expected a parameter file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: not a raw-model parameter file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "difftaxel.rawmodel":
        raise ValueError(f"{p}: not a raw-model parameter file (format 'difftaxel.rawmodel')")
    try:
        params = {k: np.asarray(v, float) for k, v in doc["params"].items()}
        sign = np.asarray(doc["sign"], float)
        sat = Saturation(
            *(
                np.asarray([np.nan if v is None else v for v in doc["saturation"][k]], float)
                for k in ("lo", "hi")
            )
        )
        N = sign.shape[0]
        scale = {
            k: np.broadcast_to(np.asarray(doc.get(k, d), float), (N,)).copy()
            for k, d in (("ref_counts", REF_COUNTS), ("softness", SOFTNESS))
        }
        dt = doc.get("dt")
        dt = None if dt is None else float(dt)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{p}: malformed parameter file ({e})") from None
    missing = {"offset", "force_at_ref", "exponent", "hysteresis_strength", "hysteresis_tau"} - set(
        params
    )
    if missing:
        raise ValueError(f"{p}: parameters lack {sorted(missing)}")
    if dt is not None and not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"{p}: dt: expected the fitted logs' sample period (s) > 0, got {dt}")
    bad = [k for k, v in params.items() if not np.all(np.isfinite(v))]
    if bad or not np.all(np.isfinite(sign)) or not all(np.all(v > 0) for v in scale.values()):
        raise ValueError(f"{p}: non-finite or non-positive values in {bad or 'sign / scale'}")
    return RawParams(params, sign, dt, sat, scale)
