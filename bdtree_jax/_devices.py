"""Expose the host's CPU cores as several JAX devices so independent chains run in parallel.

JAX must be told before its backends initialise.  On import, bdtree_jax asks for
``min(os.cpu_count(), 8)`` CPU devices unless

* the environment variable ``BDTREE_CPU_DEVICES`` is set (an integer; ``1`` turns this off),
* ``XLA_FLAGS`` already contains ``--xla_force_host_platform_device_count``, or
* JAX's backends were already initialised (then the existing devices are used as they are).

It only changes the number of *CPU* devices; GPUs are untouched.  Users who want to decide
themselves call ``jax.config.update("jax_num_cpu_devices", n)`` before importing bdtree_jax, or set
``BDTREE_CPU_DEVICES``.

Several processes (``jax.distributed``): call ``jax.distributed.initialize`` before importing
bdtree_jax (importing it starts JAX's backend, after which ``initialize`` refuses), and choose the
CPU devices per process with ``jax.config.update("jax_num_cpu_devices", n)`` before that; the
policy above then leaves them alone (docs/chains-devices.md).
"""

from __future__ import annotations

import os

__all__ = ["configure_cpu_devices"]


def configure_cpu_devices() -> int | None:
    """Apply the policy above; returns the number requested, or None if left alone."""
    import jax

    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return None
    env = os.environ.get("BDTREE_CPU_DEVICES")
    try:
        n = int(env) if env else min(os.cpu_count() or 1, 8)
    except ValueError:
        raise ValueError(f"BDTREE_CPU_DEVICES must be an integer; got {env!r}.") from None
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            return None
    except (ImportError, AttributeError):
        pass
    try:
        if jax.config.jax_num_cpu_devices != -1 and jax.config.jax_num_cpu_devices != n and env is None:
            return None  # the user configured it already
        jax.config.update("jax_num_cpu_devices", max(1, n))
    except (AttributeError, RuntimeError):
        return None
    return n
