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


@pytest.fixture(scope="session")
def toy_problem(toy_data):
    """``make(task, max_depth, min_leaf_size=1, split_prior="uniform", valid_cuts="data")`` -> dict with the toy
    problem's ``data`` (TreeData), ``grid``, every tree of the prior's support as ``trees``
    (``(string, log_prior, log_lik)`` from :func:`bdtree_jax.exact.enumerate_trees`), the exact
    posterior ``exact`` ({string: probability}) and ``log_z`` (log evidence)."""
    from scipy.special import logsumexp

    from bdtree_jax.data import make_split_grid, make_tree_data
    from bdtree_jax.exact import enumerate_trees
    from bdtree_jax.likelihoods import DirichletMultinomial, NormalMeanShift
    from bdtree_jax.priors import TreePrior

    X, y_class, y_reg = toy_data

    def make(task, max_depth, min_leaf_size=1, split_prior="uniform", valid_cuts="data"):
        prior = TreePrior(max_depth=max_depth, alpha=0.95, beta=1.0, min_leaf_size=min_leaf_size,
                          split_prior=split_prior, valid_cuts=valid_cuts)
        if task == "classification":
            lik, y = DirichletMultinomial(2, 1.0), y_class
        else:
            lik, y = NormalMeanShift(nu=3.0, lam=0.1, a=1 / 3, mu_bar=float(np.mean(y_reg))), y_reg
        trees = enumerate_trees(X, lik.point_stats(y), prior, lik)
        log_post = np.array([lp + ll for _, lp, ll in trees])
        log_z = float(logsumexp(log_post))
        exact = {s: float(np.exp(v - log_z)) for (s, _, _), v in zip(trees, log_post)}
        grid = make_split_grid(X)
        data = make_tree_data(grid.bin(X), y, prior, lik, grid=grid)
        return dict(data=data, grid=grid, trees=trees, exact=exact, log_z=log_z)

    return make


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
