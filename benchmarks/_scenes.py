"""The two contact scenes of ``bench_sensors.py`` and ``genesis_side_by_side.py``, as plain
constants (the Genesis worker imports them without jax)."""

R_SPHERE = 0.01  # the sphere scene's object radius (m)
BOX = (0.004, 0.004, 0.04)  # the box scene's object, a peg standing on its small face (m)
TOP = 0.005  # the pad's top face (m, the pad's link frame: its centre)
#: scene -> (object, probe radius m)
SCENES = {"sphere": ("sphere", 0.002), "box": ("box", 0.003)}
