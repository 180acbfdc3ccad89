"""Tactile sensors following the functional contract (``init_state`` / ``step``).

Each sensor is an option pytree (:class:`ProbeSensor`) with its own state type:

=====================  =====================  ============================================
sensor                 state                  reading (per branch)
=====================  =====================  ============================================
ContactDepthProbe      ProbeState             depth ``[*layout]`` (m)
ContactProbe           ContactProbeState      contact flag ``[*layout]``
KinematicTaxel         ProbeState             force, torque ``[*layout, 3]`` (N, N*m)
ProximityTaxel         ProximityState         force, torque ``[*layout, 3]`` (N, N*m)
ElastomerTaxel         ElastomerState         marker displacement ``[*layout, 3]`` (m)
=====================  =====================  ============================================
"""

from .base import ProbeSensor, Reading, Sensor, SensorInputs, TaxelReading, make_inputs
from .contact import ContactDepthProbe, ContactProbe, ContactProbeState, KinematicTaxel, ProbeState
from .elastomer import ElastomerState, ElastomerTaxel
from .proximity import ProximityState, ProximityTaxel
from .tracked import PointCloudSensor, TrackedPoints

__all__ = [
    "ContactDepthProbe",
    "ContactProbe",
    "ContactProbeState",
    "ElastomerState",
    "ElastomerTaxel",
    "KinematicTaxel",
    "PointCloudSensor",
    "ProbeSensor",
    "ProbeState",
    "ProximityState",
    "ProximityTaxel",
    "Reading",
    "Sensor",
    "SensorInputs",
    "TaxelReading",
    "TrackedPoints",
    "make_inputs",
]
