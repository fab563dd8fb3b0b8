"""Test configuration: CPU only, several virtual CPU devices for the sharding tests."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("BDTREE_CPU_DEVICES", "4")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import bdtree_jax  # noqa: E402,F401  (configures the CPU devices before JAX initialises)


@pytest.fixture
def key(request):
    """A PRNG key derived from the test id (stable across runs, distinct across tests)."""
    return jax.random.key(abs(hash(request.node.nodeid)) % (2**31))


@pytest.fixture(scope="session")
def toy_data():
    """6 rows, 2 features: small enough to enumerate every tree of depth <= 2."""
    X = np.array([[1, 5], [2, 3], [3, 6], [4, 1], [5, 2], [6, 4]], float)
    y_class = np.array([0, 0, 1, 1, 0, 1])
    y_reg = np.array([0.1, -0.3, 1.2, 1.0, 0.2, 1.4])
    return X, y_class, y_reg
