"""Tactile sensors following the functional contract (``init_state`` / ``step``)."""

from .base import Reading, SensorInputs, TaxelReading, make_inputs
from .contact import ContactDepthProbe, ContactProbe, KinematicTaxel, ProbeState
from .pointcloud import ElastomerTaxel, PointCloudState, ProximityTaxel, TrackedPoints

__all__ = [
    "ContactDepthProbe",
    "ContactProbe",
    "ElastomerTaxel",
    "PointCloudState",
    "ProximityTaxel",
    "TrackedPoints",
    "KinematicTaxel",
    "ProbeState",
    "Reading",
    "SensorInputs",
    "TaxelReading",
    "make_inputs",
]
