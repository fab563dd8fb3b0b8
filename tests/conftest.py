"""Test configuration: CPU only, several virtual CPU devices for the sharding tests."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("BDTREE_CPU_DEVICES", "4")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import jax  # noqa: E402
import pytest  # noqa: E402

import bdtree_jax  # noqa: E402,F401  (configures the CPU devices before JAX initialises)
from helpers import TOY_X, TOY_Y_CLASS, TOY_Y_REG  # noqa: E402
from helpers import toy_problem as toy_problem_factory  # noqa: E402


@pytest.fixture
def key(request):
    """A PRNG key derived from the test id (stable across runs, distinct across tests)."""
    return jax.random.key(abs(hash(request.node.nodeid)) % (2**31))


@pytest.fixture(scope="session")
def toy_data():
    """The toy data ``(X (6, 2), y_class (6,), y_reg (6,))`` of :mod:`helpers` (read-only arrays)."""
    return TOY_X, TOY_Y_CLASS, TOY_Y_REG


@pytest.fixture(scope="session")
def toy_problem():
    """The toy-problem factory :func:`helpers.toy_problem`: ``toy_problem(task, max_depth,
    min_leaf_size, split_prior, valid_cuts, *, prior, X, boxes)`` -> :class:`helpers.ToyProblem`
    (``data``, ``grid``, ``prior``, ``likelihood``; the enumerated ``trees``, ``exact`` posterior
    and ``log_z``)."""
    return toy_problem_factory


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop every compiled program after each test module.  XLA's CPU executables each hold
    memory mappings, and the suite compiles hundreds of distinct programs: kept alive in one
    process they pass the kernel's ``vm.max_map_count`` (65,530 here) and the next compilation
    crashes (a segfault inside XLA).  Clearing between modules keeps the count per module."""
    yield
    import gc

    from bdtree_jax import driver as sampling

    sampling.clear_compiled()
    gc.collect()
