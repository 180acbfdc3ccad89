"""Test configuration: float64 on, implicit rank promotion is an error, shared-data paths."""

from __future__ import annotations

import os
import pathlib

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = pathlib.Path(os.environ.get("DIFFTAXEL_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED


@pytest.fixture(scope="session")
def parity_kit(shared_dir):
    import json

    import numpy as np

    base = shared_dir / "reference" / "genesis-1.4.5"
    if not (base / "parity_kit.npz").exists():
        pytest.skip("parity kit absent")
    meta = json.loads((base / "parity_kit.json").read_text())
    data = dict(np.load(base / "parity_kit.npz"))
    return meta, data


def run_with_cpu_devices(script: str, n: int):
    """Run ``tests/<script>`` in a subprocess with ``n`` simulated CPU devices (the XLA flag
    must precede JAX's import, hence the subprocess); returns the CompletedProcess."""
    import subprocess
    import sys

    env = dict(
        os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu"
    )
    code = pathlib.Path(__file__).with_name(script)
    return subprocess.run(
        [sys.executable, str(code)], capture_output=True, text=True, env=env, timeout=600
    )


#: Tests that run with the slow set (``pytest -m slow``; CI runs both) to keep the default suite
#: under ten minutes on a 2-core CPU: each has a sibling in the default run that exercises the
#: same code (another parametrization, a cheaper scene, or a finite-difference check of the same
#: kernel), and costs 5-22 s, mostly compilation.
SLOW_VARIANTS = {
    "test_mjx_tactile.py::test_the_contact_list_pass_reads_what_every_pair_reads[max_contact_points]",
    "test_skinning.py::test_jit_vmap_and_gradients",
    "test_skin.py::test_pressure_only_skin_recovered_from_3mm_off[shape0]",
    "test_sensors_contact.py::test_gradients_match_finite_differences",
    "test_sensors_contact.py::test_float32_runs_and_matches_float64",
    "test_imperfections.py::test_normal_generators_odd_and_empty_shapes[standard_normal]",
    "test_imperfections.py::test_hardware_draws_are_the_generators_numbers[hash]",
    "test_pair_windows.py::test_windowed_equals_exhaustive_under_vmap[True-2-0.0015-window1]",
    "test_pair_windows.py::test_rows_out_of_order_fall_back",
    "test_pair_windows.py::test_sensor_readings_with_and_without_windows",
    "test_pointcloud.py::test_scene15_elastomer_grid_box_sphere",
    "test_pointcloud.py::test_direct_sum_in_target_chunks_equals_one_pass[1.0]",
    "test_pointcloud.py::test_small_grid_operator_equals_fft[1.0-0.0]",
    "test_pointcloud.py::test_small_grid_operator_equals_fft[0.5-0.02]",
    "test_options.py::test_the_reported_reproductions_now_agree",
    "test_options.py::test_traced_option_of_an_off_stage_is_refused_and_on_stage_is_exact"
    "[ElastomerTaxel-shear_scale-0.5]",
    "test_vmap_envs.py::test_rollout_envs_grad_chunk",
    "test_vmap_envs.py::test_values_and_gradients_equal_plain_vmap[3-8]",
    "test_rawmodel.py::test_falling_counts_with_saturated_tail_fit_to_the_noise_floor_without_conversion",
    "test_rawmodel.py::test_fit_reproduces_held_back_part_within_noise",
    "test_shear.py::test_derivatives_every_argument[one_normal]",
    "test_pairs.py::test_derivatives_every_argument",
    "test_properties.py::test_forward_mode_equals_reverse_mode[elastomer]",
    "test_properties.py::test_forward_mode_equals_reverse_mode[proximity]",
    "test_mjx.py::test_mjx_more_solver_iterations_is_a_clear_error",
    "test_mjx_tactile.py::test_difftaxel_forces_on_the_same_taxels",
    "test_realdata.py::test_mrtk_poses_convert_and_pose_the_rig",
    "test_imperfections.py::test_bits32_is_jax_random_bits_bit_for_bit",
    "test_edges.py::test_probe_at_the_centre_has_a_direction_and_bounded_gradient[capsule]",
    "test_edges.py::test_probe_at_the_centre_has_a_direction_and_bounded_gradient[cylinder]",
    "test_mjx_tactile.py::test_every_primitive_reads_what_mujoco_reads[cylinder]",
    "test_mjx_tactile.py::test_every_primitive_reads_what_mujoco_reads[ellipsoid]",
    "test_notebooks_cli.py::test_notebook_runs[03_system_identification.ipynb]",
    "test_numerics.py::test_affine_planes_value_jvp_and_grad[2-shape1]",
    "test_cli_edges.py::test_ctrl_c_stops_the_demo_and_keeps_the_previous_outputs[fitting]",
    "test_uncertainty.py::test_a_dead_band_at_the_rest_end_is_named_with_the_flag_that_censors_it",
    "test_pair_windows.py::test_window_too_small_falls_back_to_every_probe",
    "test_imperfections.py::test_sharding_8_devices_matches_one",
    "test_mjx.py::test_mjx_measured_fingertip_layout_on_a_geom",
    "test_vmap_envs.py::test_gradient_matches_finite_differences_and_bool_leaves_pass_through",
    "test_pointcloud.py::test_scene14_elastomer_ring_sphere_ground",
    "test_rawmodel.py::test_several_logs_share_the_curve_with_offsets_per_log_and_weights",
    "test_pointcloud.py::test_small_grid_operator_equals_fft[0.5-0.0]",
    "test_options.py::test_traced_option_of_an_off_stage_is_refused_and_on_stage_is_exact"
    "[ProximityTaxel-probe_radius_noise-0.0005]",
    "test_edges.py::test_probe_at_the_centre_has_a_direction_and_bounded_gradient[sphere]",
    "test_imperfections.py::test_crosstalk_stencil_equals_dense_operator[shape3-ksize3]",
    "test_imperfections.py::test_crosstalk_stencil_equals_dense_operator[shape4-ksize4]",
}


@pytest.hookimpl(tryfirst=True)  # before ``-m 'not slow'`` deselects
def pytest_collection_modifyitems(config, items):
    found = set()
    for item in items:
        key = item.nodeid.split("tests/", 1)[-1]
        if key in SLOW_VARIANTS:
            item.add_marker(pytest.mark.slow)
            found.add(key)
    # a renamed test must not silently move back into (or out of) the default run
    if len(items) > 300 and found != SLOW_VARIANTS:  # the whole suite was collected
        missing = sorted(SLOW_VARIANTS - found)
        raise pytest.UsageError(f"conftest.SLOW_VARIANTS: no such tests {missing}")
