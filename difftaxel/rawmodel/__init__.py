"""Raw-reading model of a real glove or skin: per-taxel ADC counts -> newtons, fitted to real logs.

The model, per taxel::

    x_k = smooth_relu(s (c_{k+d} - c0), w) / c_ref           (counts; s = +1 or -1)
    F_k = F_ref x_k^p                                          (static curve, N)
    xi_k = a xi_{k-1} + (F_k - F_{k-1}),  a = exp(-dt / tau)   (one Maxwell element)
    y_k = F_k + h xi_k                                         (predicted force, N)

* ``s`` is the **sign** of the response: counts rise with force (+1, a piezoresistive divider
  on the high side) or fall with it (-1). It is detected from the data (rank correlation) or
  declared; a declaration the data contradicts is an error, and data with no monotone response
  is an error, never a silently wrong fit.
* ``c0`` is the **offset** (raw units), one per log when several logs are fitted together (the
  same element under different covers or re-seated: the curve is shared, the rest level is
  not); ``F_ref > 0`` is the force ``c_ref`` past the offset; ``p > 0`` the exponent; ``w``
  the curve's rounding at the offset. A fit takes ``c_ref`` from its data (the span of the raw
  values past the offset, which keeps gain and exponent decorrelated) and ``w = 0.02 c_ref``:
  nothing assumes ADC counts, and a log in volts fits as the same log in counts (offsets and
  their standard deviations in the raw units, everything else identical).
* ``d`` is an optional **channel delay** in samples (signed, fractional; linear
  interpolation, clamped at the ends): a delay between the ADC and the load cell is fitted as
  such instead of being absorbed by the hysteresis.
* ``h``, ``tau``: hysteresis strength and time constant (s, or samples without ``dt``). ``tau``
  is bounded below by one sample: a shorter time constant only mimics a delay.
* **Saturation**: samples whose counts sit on the ADC's floor or ceiling carry no force
  information beyond a bound. Their levels are detected (or declared) and the samples are
  *censored* (they cost only when the prediction is on the wrong side of the bound) or masked.

:func:`fit_raw_model` fits all of this per taxel with optional per-sample weights, and reports
sandwich (autocorrelation-consistent) standard deviations next to the Gauss-Newton ones: on real
logs the residuals are not white, and Gauss-Newton is then over-confident. Both are invariant
to the parameters' units; a parameter the data does not determine has an infinite standard
deviation and is named in ``RawFit.undetermined``. A dead band at the rest end (many samples on
one value while the force moves) is reported in ``RawFit.warnings``.

Logs: plain text with two columns ``raw force`` or three ``time raw force`` (time in s;
``#`` comments; optional header line ``# dt = 0.01``), or NPZ with ``raw [T]`` or ``[T, N]``,
``force`` (same shape) and optionally ``dt`` or ``time [T]``. Without any time information the
log is in **sample units** (``dt = None``): ``tau`` is then in samples.
"""

from .fit import RawFit, dead_band_warnings, fit_raw_model
from .logs import RawLog, Saturation, detect_saturation, detect_sign, load_raw_log
from .model import raw_to_force
from .params import RawParams, load_raw_params, predict, save_raw_params
from .triaxial import TriaxialFit, TriaxialModel, fit_triaxial
from .triaxial_params import load_triaxial, predict_triaxial, save_triaxial
from .vector import VectorLog, WrenchLog, coarse_lag, load_vector_log, load_wrench_log, wrench_at

__all__ = [
    "VectorLog",
    "WrenchLog",
    "load_vector_log",
    "load_wrench_log",
    "coarse_lag",
    "wrench_at",
    "TriaxialFit",
    "TriaxialModel",
    "fit_triaxial",
    "predict_triaxial",
    "save_triaxial",
    "load_triaxial",
    "RawLog",
    "RawFit",
    "RawParams",
    "dead_band_warnings",
    "Saturation",
    "load_raw_log",
    "raw_to_force",
    "detect_sign",
    "detect_saturation",
    "fit_raw_model",
    "predict",
    "save_raw_params",
    "load_raw_params",
]
