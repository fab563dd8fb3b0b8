"""Test configuration: CPU only, several virtual CPU devices for the sharding tests, and a fast
compile loop.

Compilation is most of the suite's time, so by default the tests

* keep compiled programs on disk (JAX's persistent compilation cache) in
  ``$BDTREE_TEST_CACHE`` (default ``~/.cache/bdtree_jax-tests``), one folder per jax/jaxlib
  version, shared by every job and worker of that version; ``BDTREE_TEST_CACHE=off`` turns it off,
  and a test or module marked ``pytest.mark.no_compile_cache`` compiles afresh;
* ask XLA for its cheapest optimisation (``jax_disable_most_optimizations``: backend level 0, no
  expensive LLVM passes; programs compile several times faster and the small test programs run no
  slower), except in tests marked ``xla_optimized``: long sampling runs, 1.5-7.5x faster optimised
  (benchmarks/results/slow_tests_compile.md), which pays for their compile (the flag is read at each
  compile, so it can change per test); ``BDTREE_TEST_XLA=cheap`` compiles every test cheaply, marked
  or not (to measure which tests the mark pays for: ``benchmarks/compile_profile.py``);
  ``BDTREE_TEST_XLA=level0`` asks for ``--xla_backend_optimization_level=0`` in every test instead;
  ``BDTREE_TEST_XLA=default`` keeps XLA's default flags in every test (the optimised build is tested
  in CI by the ``xla_optimized`` tests, most of the slow job); a bit-identity test whose two
  programs batch exact integer counts differently is marked ``xla_optimized`` too, since the cheap
  build can round their float sums differently (~1e-6 on jax 0.7: ``tests/test_thin.py``);
* in those same cheap-compile runs, turn off XLA's CPU fusion emitters for the whole process
  (``--xla_cpu_use_fusion_emitters=false`` in ``XLA_FLAGS``, where this jaxlib knows the flag): its
  older emitters compile the tests' programs with 15-25 % less CPU time;
* free compiled programs only when the process's memory mappings near the kernel's limit;
* give up on a collective among the virtual CPU devices after 5 minutes (XLA's default: 30), where
  this jaxlib knows the flag.
"""

import os
import zlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("BDTREE_CPU_DEVICES", "4")
_XLA_MODE = os.environ.get("BDTREE_TEST_XLA", "fast")
_CHEAP_XLA = (_XLA_MODE != "default"
              and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""))
if _CHEAP_XLA and _XLA_MODE == "level0":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
    _CHEAP_XLA = False
_NO_FUSION_EMITTERS = "--xla_cpu_use_fusion_emitters=false"


def _xla_accepts(flag: str) -> bool:
    """Whether this jaxlib's XLA knows ``flag`` (an unknown XLA flag aborts the process, so it is
    tried in a child process first)."""
    import subprocess
    import sys

    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip(), JAX_PLATFORMS="cpu")
    probe = "import jax; jax.jit(lambda x: x + 1)(1.0).block_until_ready()"
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0


def _add_xla_flag(flag: str) -> None:
    """Append ``flag`` (``--name=value``) to ``XLA_FLAGS`` unless ``XLA_FLAGS`` already names it or
    this jaxlib does not know it (:func:`_xla_accepts`)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if flag.lstrip("-").split("=")[0] not in flags and _xla_accepts(flag):
        os.environ["XLA_FLAGS"] = f"{flags} {flag}".strip()


# probed once, in pytest's main process: the xdist workers inherit its environment (the flags are
# then named there, so the workers probe nothing)
if _CHEAP_XLA:
    _add_xla_flag(_NO_FUSION_EMITTERS)
# a collective among the virtual CPU devices that some device never joins fails the test after
# 5 minutes, not XLA's 30 (a stuck row-sharded run must not eat the CI job's time limit)
_add_xla_flag("--xla_cpu_collective_timeout_seconds=300")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import jax  # noqa: E402
import pytest  # noqa: E402

import bdtree_jax  # noqa: E402,F401  (applies BDTREE_CPU_DEVICES before JAX initialises)
from helpers import TOY_X, TOY_Y_CLASS, TOY_Y_REG  # noqa: E402
from helpers import toy_problem as toy_problem_factory  # noqa: E402


def _compilation_cache_dir() -> str | None:
    root = os.environ.get("BDTREE_TEST_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "bdtree_jax-tests"))
    if root.lower() in ("off", "0", "none", ""):
        return None
    import jaxlib

    return os.path.join(root, f"jax-{jax.__version__}-jaxlib-{jaxlib.__version__}")


if _CHEAP_XLA:
    jax.config.update("jax_disable_most_optimizations", True)


def _switched_while_marked(request, marker: str, applies: bool, option: str, value: bool):
    """Fixture body: the boolean JAX option ``option`` is ``value`` during a test marked ``marker``
    (where ``applies``) and ``not value`` again after it."""
    if not applies or request.node.get_closest_marker(marker) is None:
        yield
        return
    jax.config.update(option, value)
    try:
        yield
    finally:
        jax.config.update(option, not value)


@pytest.fixture(autouse=True)
def _optimised_xla(request):
    """A test marked ``xla_optimized`` (long sampling runs, where optimised code pays) compiles with
    XLA's default optimisation even in the cheap-compile jobs."""
    yield from _switched_while_marked(request, "xla_optimized", _CHEAP_XLA and _XLA_MODE != "cheap",
                                      "jax_disable_most_optimizations", False)


_CACHE_DIR = _compilation_cache_dir()
if _CACHE_DIR is not None:
    jax.config.update("jax_compilation_cache_dir", _CACHE_DIR)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.05)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_configure(config):
    config.addinivalue_line("markers", "xla_optimized: compile with XLA's default optimisation (long runs)")
    config.addinivalue_line("markers", "no_compile_cache: compile afresh, not from the persistent cache (memory tests)")


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: one worker per core, at most 4 and one per 5 GB of memory (each worker holds its
    own compiled programs)."""
    try:
        memory_gb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gb = 8
    return max(1, min(os.cpu_count() or 1, 4, int(memory_gb // 5)))


@pytest.fixture
def key(request):
    """A PRNG key derived from the test id (stable across runs, distinct across tests)."""
    return jax.random.key(zlib.crc32(request.node.nodeid.encode()) % (2**31))


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


@pytest.fixture(autouse=True)
def _compile_cache_opt_out(request):
    """A test (or module) marked ``no_compile_cache`` compiles without the persistent cache (the
    library's own switch, which also works once this process has used the cache)."""
    if _CACHE_DIR is None or request.node.get_closest_marker("no_compile_cache") is None:
        yield
        return
    from bdtree_jax.driver import outside_compilation_cache

    with outside_compilation_cache():
        yield


def _memory_maps_near_limit(fraction: float = 0.5) -> bool:
    """Whether this process holds more than ``fraction`` of ``vm.max_map_count`` memory mappings
    (True where that cannot be read: then clear, to be safe)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open("/proc/self/maps", "rb") as f:
            maps = sum(1 for _ in f)
    except (OSError, ValueError):
        return True
    return maps > fraction * limit


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop every compiled program after a test module when the process's memory mappings near
    the limit.  XLA's CPU executables each hold memory mappings, and the suite compiles hundreds
    of distinct programs: kept alive in one process they pass the kernel's ``vm.max_map_count``
    (65,530 here) and the next compilation crashes (a segfault inside XLA).  Clearing only then
    keeps the programs later modules share (recompiling them module after module cost ~5 % of the
    suite)."""
    yield
    if not _memory_maps_near_limit():
        return
    import gc

    from bdtree_jax import driver as sampling

    sampling.clear_compiled()
    gc.collect()
