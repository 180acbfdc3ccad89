"""Taxel skins on a rigid link: layouts, readings, excitation design and layout calibration.

A robot skin patch (a forearm, a palm, a gripper pad) is a set of taxels fixed to one rigid
link. Its layout is what published skins give: a **position** ``[N, 3]`` (m) and an outward
unit **normal** ``[N, 3]`` per taxel, in the link frame; a **tangent** (the taxel's +X axis) only
where the skin reports shear along it. When no tangent is given the rule is Genesis's
:func:`~difftaxel.layout.orthogonals` (``t0`` of the normal), and during calibration a taxel's
tangent follows its normal by the smallest rotation (it is the initial tangent projected onto
the plane of the current normal).

Readings are :class:`~difftaxel.sensors.KinematicTaxel` forces in **taxel axes** (+z the
outward normal, +x the tangent): ``F_taxel = R_taxel^T R_world_link^T F_world``. A
**channel mask** selects what a skin actually reports: ``"xyz"`` (three-axis force),
``"normal"`` (normal force or pressure only, how capacitive and piezoresistive skins report;
a pressure is a normal force over a per-taxel area, absorbed by a per-taxel gain) or any bool
mask ``[3]`` / ``[N, 3]``.

:func:`calibrate_layout` fits positions and normals (and optionally gains) to recorded readings:
first-order stages with decreasing contact smoothing (a taxel out of contact has no gradient
otherwise), then a per-taxel Levenberg-Marquardt polish. Taxel ``i``'s readings depend on its
own parameters only, so the Jacobian is ``[N, T*C, 5]`` blocks, got by five forward-mode
products whatever ``N``. From the same blocks it reports, per taxel, whether it was excited,
whether its five parameters are identifiable from the masked readings, and their standard
deviations; a taxel that is not identified keeps its initial values (and is reported) rather
than moving to a worse answer. A held-out set of frames checks the fit.

:func:`press_plan` designs the excitation: a spherical indenter pressed at every taxel's
nominal site, at several depths, centred and offset along both tangents, so the contact
direction at each taxel varies by tens of degrees. With normal readings only, the depth profile
fixes the position and the varying direction fixes the normal. A plan designed from a nominal
layout misses taxels far from their nominal sites: :func:`next_presses` plans presses where a
fit left taxels unidentified (at their reading-weighted contact centre, or a searched disc
when nothing touched them), and :func:`calibrate_adaptively` runs plan -> record -> fit until a
target identified fraction or a press budget. :mod:`difftaxel.skin.standins` builds synthetic
skins with known answers.
"""

from .adaptive import AdaptiveFit, calibrate_adaptively, concat_scenes, next_presses, press_scene
from .fit import LayoutFit, calibrate_layout
from .layout import (
    LinkLayout,
    LinkScene,
    SkinnedScene,
    channel_mask,
    layout_errors,
    link_readings,
    press_plan,
    taxel_frames,
)

__all__ = [
    "LinkLayout",
    "LinkScene",
    "SkinnedScene",
    "channel_mask",
    "taxel_frames",
    "link_readings",
    "press_plan",
    "LayoutFit",
    "calibrate_layout",
    "layout_errors",
    "AdaptiveFit",
    "calibrate_adaptively",
    "next_presses",
    "press_scene",
    "concat_scenes",
]
