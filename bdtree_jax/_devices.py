"""How many JAX devices the host's CPU exposes: an explicit choice, never a side effect of import.

Independent chains run in parallel on a CPU only when JAX exposes several CPU devices (one per
core), and JAX reads that number once, when its backends start.  Importing bdtree_jax changes
nothing: ``jax.devices()`` and ``XLA_FLAGS`` stay as they were.  To use several cores, call
:func:`set_cpu_device_count` before the first JAX computation (as ``numpyro.set_host_device_count``)::

    import bdtree_jax as bd
    bd.set_cpu_device_count()        # min(os.cpu_count(), 8) CPU devices; or set_cpu_device_count(4)

or choose it outside Python with the environment variable ``BDTREE_CPU_DEVICES=n``, which importing
bdtree_jax applies (an explicit opt-in; the ``bdtree`` command line sets it for its own process).
``jax.config.update("jax_num_cpu_devices", n)`` and ``XLA_FLAGS=--xla_force_host_platform_device_count=n``
work as JAX documents them.  Only CPU devices are affected; GPUs are used as they are.

Several processes (``jax.distributed``): call ``jax.distributed.initialize`` and choose the CPU
devices per process before the first computation (docs/chains-devices.md).
"""

from __future__ import annotations

import os

__all__ = ["set_cpu_device_count", "apply_cpu_devices_env", "use_cpu_cores_unless_chosen"]

ENV_VAR = "BDTREE_CPU_DEVICES"


def _backends_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # pragma: no cover - a JAX without the private probe
        return False


def _xla_flags_force_count() -> bool:
    return "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")


def set_cpu_device_count(n: int | None = None) -> int:
    """Expose ``n`` CPU devices to JAX (default ``min(os.cpu_count(), 8)``) so chains run in parallel.

    Call it before the first JAX computation of the process.  Returns ``n``.  Raises ``ValueError``
    for ``n < 1`` and ``RuntimeError`` once JAX's backends have started (the count can no longer
    change; restart the process and call this first).  ``XLA_FLAGS``'s
    ``--xla_force_host_platform_device_count``, if set, wins over this (JAX's own rule).
    """
    import jax

    if n is None:
        n = min(os.cpu_count() or 1, 8)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_cpu_device_count: n must be a positive integer; got {n!r}.")
    if _backends_started():
        if jax.config.jax_num_cpu_devices in (n, -1) and len(jax.devices("cpu")) == n:
            return n
        raise RuntimeError(
            "set_cpu_device_count: JAX has already started its backends, so the number of CPU devices "
            f"is fixed at {len(jax.devices('cpu'))}; call bd.set_cpu_device_count({n}) before any JAX "
            f"computation (or set {ENV_VAR}={n} before starting Python).")
    jax.config.update("jax_num_cpu_devices", n)
    return n


def apply_cpu_devices_env() -> int | None:
    """Apply ``BDTREE_CPU_DEVICES`` if the environment sets it (called on import); otherwise do
    nothing.  Returns the number applied, or None.  Left alone, as before, when JAX's backends have
    started or ``XLA_FLAGS`` forces a device count."""
    env = os.environ.get(ENV_VAR)
    if not env:
        return None
    try:
        n = int(env)
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be a positive integer; got {env!r}.") from None
    if _xla_flags_force_count() or _backends_started():
        return None
    return set_cpu_device_count(n)


def use_cpu_cores_unless_chosen() -> int | None:
    """For a process bdtree_jax owns (the ``bdtree`` command): :func:`set_cpu_device_count` with
    its default, unless ``BDTREE_CPU_DEVICES``, ``XLA_FLAGS`` or ``jax_num_cpu_devices`` already
    chose, or JAX has started.  Returns the number set, or None."""
    import jax

    if os.environ.get(ENV_VAR) or _xla_flags_force_count() or jax.config.jax_num_cpu_devices != -1 or _backends_started():
        return None
    return set_cpu_device_count()
