"""Tactile sensors following the functional contract (``init_state`` / ``step``)."""

from .base import Reading, SensorInputs, TaxelReading, make_inputs
from .contact import ContactDepthProbe, ContactProbe, KinematicTaxel, ProbeState

__all__ = [
    "ContactDepthProbe",
    "ContactProbe",
    "KinematicTaxel",
    "ProbeState",
    "Reading",
    "SensorInputs",
    "TaxelReading",
    "make_inputs",
]
