"""Driver properties: reproducibility, device invariance, checkpoint/resume, one compile."""

import jax
import numpy as np
import pytest

import bdtree_jax as bd
from bdtree_jax import driver
from bdtree_jax.data import make_split_grid
from bdtree_jax.kernels import cgm
from bdtree_jax.likelihoods import DirichletMultinomial
from bdtree_jax.priors import TreePrior, make_tree_data


@pytest.fixture(scope="module")
def problem():
    X, y = bd.datasets.load("iris")
    X, y = X.iloc[::3], y.iloc[::3]
    _, codes = np.unique(y, return_inverse=True)
    lik = DirichletMultinomial(3)
    grid = make_split_grid(X.to_numpy())
    prior = TreePrior(max_depth=4)
    data = make_tree_data(grid.bin(X.to_numpy()), codes, prior, lik)
    algorithm = cgm.cgm(cgm.CGMConfig.from_prior(prior))
    return algorithm, data


def _run(problem, **kw):
    algorithm, data = problem
    args = dict(key=jax.random.key(3), num_chains=4, num_iterations=300, block_size=100)
    args.update(kw)
    return driver.run_chains(algorithm, data, **args)[0]


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)


def _assert_same_draws(a, b):
    """Trees, moves and acceptances bit-identical; float diagnostics equal up to XLA's rounding
    (a per-device program with one chain is compiled differently from one with several)."""
    _assert_same(a["tree"], b["tree"])
    for k in ("move", "accepted", "n_leaves", "depth"):
        np.testing.assert_array_equal(a[k], b[k])
    for k in ("log_lik", "log_prior"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6)


def test_same_seed_same_draws_and_block_size_invariance(problem):
    a = _run(problem)
    _assert_same(a, _run(problem))
    _assert_same(a, _run(problem, block_size=50))  # divides the run (and is the clear_compiled test's program)
    _assert_same(a, _run(problem, block_size=37))  # odd blocks
    # two steps per loop pass (an odd last one alone) is its own program (the cache key holds
    # steps_per_pass) with the same draws, in odd blocks too; its float sums may round differently
    # (XLA fuses the two programs differently; the tests' cheap build without fusion emitters
    # does: tests/conftest.py)
    assert problem[0].steps_per_pass == 1
    before = driver.trace_count()
    _assert_same_draws(a, _run((problem[0]._replace(steps_per_pass=2), problem[1]), block_size=37))
    assert driver.trace_count() == before + 1
    assert a["accepted"].mean() > 0.01
    different = _run(problem, key=jax.random.key(4))
    assert not np.array_equal(a["log_lik"], different["log_lik"])


@pytest.mark.slow
def test_draws_do_not_depend_on_devices_or_chain_count(problem):
    assert len(jax.devices()) >= 2, "conftest asks for 4 CPU devices"
    sharded = _run(problem, num_chains=4)
    single = _run(problem, num_chains=4, devices=jax.devices()[:1])
    _assert_same_draws(sharded, single)
    # chain c is the same chain whether 2 or 4 chains run
    two = _run(problem, num_chains=2)
    _assert_same_draws(jax.tree.map(lambda x: x[:2], sharded), two)


@pytest.mark.slow
def test_vectorized_chains_give_the_same_trees(problem):
    """Batched chains, with the incremental kernel and with the branch-free full re-scoring one
    (the default on GPUs), follow the same chains as the sequential default."""
    seq = _run(problem)
    vec = _run(problem, chain_method="vmap")
    _assert_same_draws(seq, vec)
    _, data = problem
    full = cgm.cgm(cgm.CGMConfig.from_prior(TreePrior(max_depth=4), incremental=False))
    _assert_same_draws(seq, _run((full, data), chain_method="vmap"))


def test_checkpoint_resume_equals_uninterrupted(problem, tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    full = _run(problem)
    calls = {"n": 0}
    original = driver._write_checkpoint

    def interrupt_after_two(*args, **kw):
        original(*args, **kw)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(driver, "_write_checkpoint", interrupt_after_two)
    with pytest.raises(KeyboardInterrupt):
        _run(problem, checkpoint=path)
    monkeypatch.setattr(driver, "_write_checkpoint", original)
    resumed = _run(problem, checkpoint=path)
    _assert_same(full, resumed)


def test_run_length_does_not_recompile(problem):
    _run(problem, num_iterations=150)
    before = driver.trace_count()
    _run(problem, num_iterations=1000)
    _run(problem, num_iterations=250)
    assert driver.trace_count() == before


def test_clear_compiled_releases_programs_and_recompiles_the_same_chain(problem):
    """After ``clear_compiled`` the next run compiles its block program again (one new trace)
    and gives the same draws; without it, a repeated run compiles nothing."""
    a = _run(problem, num_iterations=50, block_size=50)
    before = driver.trace_count()
    _run(problem, num_iterations=50, block_size=50)
    assert driver.trace_count() == before
    bd.clear_compiled()
    b = _run(problem, num_iterations=50, block_size=50)
    assert driver.trace_count() == before + 1
    _assert_same(a, b)


@pytest.mark.parametrize("block_size", [0, 2.5, "500", True])
def test_bad_block_size_raises_before_compiling(block_size):
    X, y = bd.datasets.load("iris")
    before = driver.trace_count()
    with pytest.raises(ValueError, match="block_size must be an integer >= 1"):
        bd.sample(X, y, num_warmup=10, num_samples=10, block_size=block_size)
    assert driver.trace_count() == before
