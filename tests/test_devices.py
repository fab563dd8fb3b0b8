"""Importing bdtree_jax has no effect on JAX; the CPU device count is an explicit choice."""

import os
import subprocess
import sys
import textwrap

import pytest

import bdtree_jax as bd


def _run(code: str, **env_extra) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("BDTREE_CPU_DEVICES", "XLA_FLAGS")}
    env.update(JAX_PLATFORMS="cpu", **env_extra)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_leaves_jax_devices_and_xla_flags_as_they_were():
    code = """
        import os, jax
        from jax._src import xla_bridge
        flags = os.environ.get("XLA_FLAGS")
        import bdtree_jax, bdtree_jax.cli, bdtree_jax.numpyro
        assert not xla_bridge.backends_are_initialized(), "import started JAX's backends"
        assert os.environ.get("XLA_FLAGS") == flags
        assert jax.config.jax_num_cpu_devices == -1
        print(len(jax.devices()))
    """
    assert _run(code) == "1"
    assert _run(code, XLA_FLAGS="--xla_cpu_enable_fast_math=false") == "1"


def test_set_cpu_device_count_before_and_after_jax_starts():
    code = """
        import jax, jax.numpy as jnp
        import bdtree_jax as bd
        assert bd.set_cpu_device_count(3) == 3
        jnp.zeros(2).block_until_ready()
        assert len(jax.devices()) == 3
        assert bd.set_cpu_device_count(3) == 3        # the same count again is fine
        try:
            bd.set_cpu_device_count(2)
        except RuntimeError as e:
            assert "set_cpu_device_count(2) before any JAX computation" in str(e), e
        else:
            raise AssertionError("no error once JAX started")
        print("ok")
    """
    assert _run(code) == "ok"


def test_environment_variable_is_an_explicit_opt_in():
    code = "import jax, bdtree_jax; print(len(jax.devices()))"
    assert _run(code, BDTREE_CPU_DEVICES="3") == "3"
    assert _run(code, BDTREE_CPU_DEVICES="3", XLA_FLAGS="--xla_force_host_platform_device_count=2") == "2"


@pytest.mark.parametrize("n", [0, -1, 2.0, True, "4"])
def test_bad_count_is_a_clear_error(n):
    with pytest.raises(ValueError, match="set_cpu_device_count: n must be a positive integer"):
        bd.set_cpu_device_count(n)
