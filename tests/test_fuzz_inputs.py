"""Fuzzing of the public entry points with malformed inputs.

A seeded generator builds malformed calls of :func:`bdtree_jax.sample` and of the four estimators
(bad shapes, dtypes, NaN/inf patterns, extreme scales, wrong option types) from one or two
mutations of a small valid call.  Every call must either

* raise a ``ValueError`` or ``TypeError`` before JAX compiles anything (a backend compilation is
  detected through :mod:`jax.monitoring`), within :data:`TIME_LIMIT` seconds, or
* for a case that may be valid (every mutation of it may be accepted), reach compilation (the
  input was accepted; the call is stopped there, so that the default run compiles nothing) or
  finish.

Anything else (another exception type, a compilation before the error, an invalid case accepted, a
hang) fails with the case printed.  The slow sweep runs more cases and runs every accepted case to
the end.
"""

from __future__ import annotations

import contextlib
import signal
import time
import warnings
from typing import Callable, NamedTuple

import jax
import numpy as np
import pandas as pd
import pytest

from helpers import jax_listener

import bdtree_jax as bd

#: Seconds a case may take before it counts as a hang.
TIME_LIMIT = 20
#: The event JAX records once per backend compilation.
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
N = 12  # rows of the valid base call
TREE_PRIOR_OPTIONS = ("max_depth", "alpha", "beta", "min_leaf_size", "split_prior", "valid_cuts", "structure")
SINGLE_TREE_METHODS = ("cgm", "hmc-df", "hmc-dfi", "pcfg", "smc", "pg", "wu")
TARGETS = ("sample-classification", "sample-regression", "BayesianTreeClassifier", "BayesianTreeRegressor",
           "BARTRegressor", "BARTClassifier")


class Case(NamedTuple):
    """One call: ``target`` with data ``X``, ``y`` and keyword options ``options``; ``may_pass``
    when every mutation may be a valid input; ``label`` names the mutations."""

    target: str
    method: str | None
    X: object
    y: object
    options: dict
    may_pass: bool
    label: str

    def __repr__(self) -> str:
        def show(v):
            text = repr(v)
            return text if len(text) < 200 else text[:200] + "..."
        return (f"Case({self.label}; target={self.target}, method={self.method}, "
                f"X={show(self.X)}, y={show(self.y)}, options={show(self.options)})")


class _ReachedCompile(BaseException):
    """Raised from the compilation listener: the input was accepted (a BaseException so that no
    ``except Exception`` of the library swallows it)."""


class _TimedOut(BaseException):
    pass


# --- the mutations --------------------------------------------------------------------------------
# A mutation is ``(label, may_pass, apply)``; ``apply(rng, X, y, options, target)`` returns the new
# ``(X, y, options)`` or None when it does not apply to the target.

def _set(**values):
    return lambda rng, X, y, o, t: (X, y, {**o, **values})


def _only(targets, fn):
    def apply(rng, X, y, o, t):
        return fn(rng, X, y, o, t) if any(t.startswith(p) for p in targets) else None
    return apply


def _with_nan(X, where):
    X = np.array(X, float)
    X[where] = np.nan
    return X


def _data_mutations():
    def x(fn):
        return lambda rng, X, y, o, t: (fn(rng, np.asarray(X)), y, o)

    def yv(fn):
        return lambda rng, X, y, o, t: (X, fn(rng, np.asarray(y)), o)

    reg = ("sample-regression", "BayesianTreeRegressor", "BARTRegressor")
    cls = ("sample-classification", "BayesianTreeClassifier", "BARTClassifier")
    return [
        # shapes
        ("X 1-D", False, x(lambda r, X: X[:, 0])),
        ("X 3-D", False, x(lambda r, X: X[:, :, None])),
        ("X scalar", False, x(lambda r, X: np.float64(1.0))),
        ("X empty rows", False, x(lambda r, X: X[:0])),
        ("X 0 columns", False, x(lambda r, X: X[:, :0])),
        ("X None", False, x(lambda r, X: None)),
        ("X ragged list", False, x(lambda r, X: [list(row[: 1 + i % 3]) for i, row in enumerate(X)])),
        ("X one row", False, x(lambda r, X: X[:1])),
        ("y shorter", False, yv(lambda r, y: y[:-1])),
        ("y longer", False, yv(lambda r, y: np.concatenate([y, y[:3]]))),
        ("y 2-D two columns", False, yv(lambda r, y: np.stack([y, y], 1))),
        ("y 2-D column", True, yv(lambda r, y: y[:, None])),
        ("y scalar", False, yv(lambda r, y: y[0])),
        ("y ragged list", False, yv(lambda r, y: [[v] * (1 + i % 2) for i, v in enumerate(y)])),
        ("y None", False, yv(lambda r, y: None)),
        ("y empty", False, yv(lambda r, y: y[:0])),
        # dtypes
        ("X complex", False, x(lambda r, X: X + 1j)),
        ("X object mixed", False, x(lambda r, X: np.where(r.random(X.shape) < 0.3, "a", X.astype(object)))),
        ("X numeric strings", True, x(lambda r, X: X.astype(str))),  # parsed as numbers
        ("X text", False, x(lambda r, X: np.array([[f"v{v:.2f}" for v in row] for row in X]))),
        ("X bool", True, x(lambda r, X: X > 0)),
        ("X float16", True, x(lambda r, X: X.astype(np.float16))),
        ("X float32", True, x(lambda r, X: X.astype(np.float32))),
        ("X datetime64", False, x(lambda r, X: (np.abs(X) * 1e6).astype("datetime64[s]"))),
        ("X timedelta64", False, x(lambda r, X: (np.abs(X) * 1e6).astype("timedelta64[s]"))),
        ("X int8", True, x(lambda r, X: (X * 10).astype(np.int8))),
        ("X uint64", True, x(lambda r, X: (np.abs(X) * 10).astype(np.uint64))),
        ("X dict", False, x(lambda r, X: {"a": X[:, 0]})),
        ("X string", False, x(lambda r, X: "X")),
        ("X DataFrame object mixed column", True,
         x(lambda r, X: pd.DataFrame({"a": X[:, 0], "b": [1, "x", 2.5, None] * (len(X) // 4) + [1] * (len(X) % 4)}))),
        ("X DataFrame datetime column", False,
         x(lambda r, X: pd.DataFrame({"a": X[:, 0], "t": pd.date_range("2020-01-01", periods=len(X))}))),
        ("X DataFrame complex column", False, x(lambda r, X: pd.DataFrame({"a": X[:, 0], "c": X[:, 1] + 1j}))),
        ("X DataFrame 70 levels", False,
         x(lambda r, X: pd.DataFrame({"a": np.resize(X[:, 0], 70), "c": [f"l{i}" for i in range(70)]}))),
        ("X DataFrame duplicate names", True, x(lambda r, X: pd.DataFrame(X, columns=["a"] * X.shape[1]))),
        ("X DataFrame int names", True, x(lambda r, X: pd.DataFrame(X, columns=list(range(X.shape[1]))))),
        ("y complex", False, yv(lambda r, y: y + 1j)),
        ("y object mixed", False, yv(lambda r, y: np.array([1, "a", 2.0, None] * (len(y) // 4), dtype=object))),
        ("y datetime64 (regression)", False, _only(reg, yv(lambda r, y: (np.abs(y) * 1e6).astype("datetime64[s]")))),
        ("y datetime64 labels", True, _only(cls, yv(lambda r, y: (np.abs(y) * 1e6).astype("datetime64[s]")))),
        ("y timedelta64 (regression)", False, _only(reg, yv(lambda r, y: (y * 1e6).astype("timedelta64[s]")))),
        ("y bool", True, yv(lambda r, y: y > np.median(y))),
        ("y float16", True, yv(lambda r, y: y.astype(np.float16))),
        ("y dict", False, yv(lambda r, y: {"y": y})),
        ("y numeric strings (regression)", True, _only(reg, yv(lambda r, y: y.astype(str)))),
        ("y ints beyond float range", False, yv(lambda r, y: [int(v * 1e10) * 10**400 for v in y])),
        ("y text (regression)", False, _only(reg, yv(lambda r, y: np.array(["a", "b"] * (len(y) // 2))))),
        ("y strings (classification)", True, _only(cls, yv(lambda r, y: np.array(["a", "b"] * (len(y) // 2))))),
        ("y one class", True, _only(cls, yv(lambda r, y: np.zeros_like(y)))),
        ("y many classes", True, _only(cls, yv(lambda r, y: np.arange(len(y))))),
        # NaN / inf
        ("inf in X", False, x(lambda r, X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X))),
        ("-inf in X", False, x(lambda r, X: np.where(np.arange(X.size).reshape(X.shape) == 7, -np.inf, X))),
        ("NaN in X", True, x(lambda r, X: _with_nan(X, (3, 1)))),
        ("all-NaN column", True, x(lambda r, X: _with_nan(X, (slice(None), 0)))),
        ("all-NaN row", True, x(lambda r, X: _with_nan(X, (2, slice(None))))),
        ("all-NaN X", True, x(lambda r, X: _with_nan(X, (slice(None), slice(None))))),
        ("None in X list", True, x(lambda r, X: [[None if (i, j) == (1, 1) else v for j, v in enumerate(row)]
                                                 for i, row in enumerate(X.tolist())])),
        ("NaN in y", False, yv(lambda r, y: np.where(np.arange(len(y)) == 4, np.nan, y.astype(float)))),
        ("inf in y", False, yv(lambda r, y: np.where(np.arange(len(y)) == 4, np.inf, y.astype(float)))),
        ("None in y", False, yv(lambda r, y: [None] + list(y[1:]))),
        ("all-NaN y", False, yv(lambda r, y: np.full(len(y), np.nan))),
        # extreme scales
        ("X 1e300", True, x(lambda r, X: X * 1e300)),
        ("X 1e-300", True, x(lambda r, X: X * 1e-300)),
        ("X +-1.7e308", True, x(lambda r, X: np.where(X > 0, 1.7e308, -1.7e308))),
        ("X huge ints", True, x(lambda r, X: (X * 1e17).astype(np.int64))),
        ("X Python big ints", True, x(lambda r, X: [[int(v * 1e30) * 10**10 for v in row] for row in X])),
        ("X ints beyond float range", False, x(lambda r, X: [[int(v * 1e10) * 10**400 for v in row] for row in X])),
        ("X constant", True, x(lambda r, X: np.ones_like(X))),
        ("y 1e300 (regression)", True, _only(reg, yv(lambda r, y: y * 1e300))),
        ("y 1e-300 (regression)", True, _only(reg, yv(lambda r, y: y * 1e-300))),
        ("y 1e308 (regression)", True, _only(reg, yv(lambda r, y: np.where(y > 0, 1e308, -1e308)))),
        ("y constant (regression)", True, _only(reg, yv(lambda r, y: np.ones_like(y)))),
        ("y huge ints (regression)", True, _only(reg, yv(lambda r, y: (y * 1e18).astype(np.int64)))),
    ]


def _prior_option(apply):
    """``apply`` of a tree-prior option for ``bd.sample``: the option goes to ``bd.TreePrior``."""
    def to_prior(rng, X, y, o, t):
        X, y, new = apply(rng, X, y, o, t)
        moved = {k: new.pop(k) for k in list(new) if k in TREE_PRIOR_OPTIONS}
        return X, y, {**new, "prior_options": {**new.get("prior_options", {}), **moved}}
    return to_prior


def _option_mutations():
    bad = lambda name, *values: [(f"{name}={v!r}", False, _set(**{name: v})) for v in values]  # noqa: E731
    ok = lambda name, *values: [(f"{name}={v!r}", True, _set(**{name: v})) for v in values]  # noqa: E731
    run = (bad("num_samples", -5, 1.5, "10", None, np.nan)
           + bad("num_warmup", -1, 0.5, "1", None)
           + bad("num_chains", 0, -1, 1.5, "2", None)
           + bad("seed", "a", 1.5, None, 2**70, -(2**70))
           + ok("seed", -1, np.int64(3), 2**40)
           + bad("thin", 0, -1, 1.5, "2")
           + bad("data_shards", 0, 1.5, "2", 5)
           + bad("categorical_features", ["nope"], [5], [-1], "all", 3, [True], [0.5], 1.5)
           + ok("categorical_features", None, [], [0], [True, False, False])
           + bad("missing", "zzz", None, 1, "")
           + bad("checkpoint", 123, ["a"], 1.5))
    tree = (bad("max_depth", "3", 2.5, -1, 0, None, True, np.nan, 15, 30)
            + bad("alpha", 2, -0.1, "0.9", np.nan, np.inf, None, 0)
            + bad("beta", -1, "1", np.inf, np.nan, None)
            + bad("min_leaf_size", 0, -1, 1.5, "1", 10**6)
            + bad("split_prior", "nope", 1, None)
            + bad("valid_cuts", "nope", 1)
            + bad("structure", "nope", None)
            + bad("block_size", 0, -1, 1.5, "5")
            + bad("chain_method", "nope", 1)
            + bad("tempering", "yes", 3))
    bart = (bad("num_trees", 0, -1, 1.5, "200", None)
            + bad("tree_sampler", "nope", None, 1)
            + bad("max_depth", 15, 30, "3", 0, 2.5)
            + bad("alpha", 1, 0, "0.9", np.nan)
            + bad("beta", -1, np.inf)
            + bad("k", 0, -1, "2", np.inf, None)
            + bad("num_particles", 0, -1, "10")
            + bad("leaf_dtype", "float64", None, 32)
            + bad("max_cuts", 0, -1, 1.5, "255")
            + bad("split_prior", "nope")
            + bad("valid_cuts", "nope", None))
    reg_leaf = bad("nu", -1, 0, "1", np.nan) + bad("lam", -1, "1", np.inf) + bad("a", 0, -2, "x")
    per_target = {
        "sample": run + [(label, ok, _prior_option(fn)) for label, ok, fn in tree]
        + bad("method", "nope", 3, "", "CGM") + bad("task", "nope", None, 1)
        + bad("prior", "TreePrior", {"max_depth": 3}) + bad("likelihood", "dirichlet", 3)
        + bad("bogus_keyword", 1) + [("prior max_depth=\"3\"", False, _set(prior_options={"max_depth": "3"})),
                                     ("prior alpha=2", False, _set(prior_options={"alpha": 2})),
                                     ("prior beta=-1", False, _set(prior_options={"beta": -1}))],
        "sample-classification": bad("likelihood", {"concentration": -1}, {"concentration": "1"}, {"nu": 3.0},
                                     {"concentration": np.nan}),
        "sample-regression": bad("likelihood", {"nu": -1}, {"lam": "1"}, {"concentration": 1.0}, {"a": np.inf}),
        "BayesianTree": run + tree + bad("method", "nope", 3, "") + bad("bogus_keyword", 1),
        "BayesianTreeClassifier": bad("concentration", 0, -1, "1", np.nan) + ok("concentration", None),
        "BayesianTreeRegressor": reg_leaf,
        "BART": run + bart + [m for m in bad("bogus_keyword", 1)],
        "BARTRegressor": reg_leaf[:4] + bad("q", 0, 1, 1.5, "0.9"),
        "BARTClassifier": bad("offset", np.inf, "0", np.nan),
    }
    return per_target


#: Mutations that are valid for some methods: max_depth=None is PCFG's (deprecated) unbounded.
VALID_FOR = {"max_depth=None": ("pcfg",)}
DATA_MUTATIONS = _data_mutations()
OPTION_MUTATIONS = _option_mutations()


def _base(rng, target):
    """A small valid call of ``target``: ``(X (N, 3), y (N,), options)``."""
    X = rng.normal(size=(N, 3))
    y = (X[:, 0] > 0).astype(int) if "lassif" in target else X[:, 0] + rng.normal(scale=0.1, size=N)
    if "lassif" in target:  # both classes present
        y[:2] = (0, 1)
    run = dict(num_warmup=1, num_samples=1, num_chains=1, progress=False)
    if target.startswith("sample"):
        return X, y, {**run, "prior_options": {"max_depth": 2}}
    if target.startswith("BayesianTree"):
        return X, y, {**run, "max_depth": 2}
    return X, y, {**run, "num_trees": 2, "max_depth": 2}


def _option_pool(target):
    return [m for key, muts in OPTION_MUTATIONS.items() if target.startswith(key) for m in muts]



def make_cases(n_cases: int, seed: int) -> list[Case]:
    """``n_cases`` malformed calls (deterministic for a seed): the target, a method for the
    single-tree targets, and one or two mutations (a data one or an option one each)."""
    rng = np.random.default_rng(seed)
    cases = []
    while len(cases) < n_cases:
        target = TARGETS[rng.integers(len(TARGETS))]
        method = str(rng.choice(SINGLE_TREE_METHODS)) if not target.startswith("BART") else None
        X, y, options = _base(rng, target)
        labels, may_pass = [], True
        for second in range(1 + int(rng.random() < 0.3)):
            # a second data mutation could undo the first: a second mutation is an option's
            pool = DATA_MUTATIONS if rng.random() < 0.5 and not second else _option_pool(target)
            label, ok, apply = pool[rng.integers(len(pool))]
            if any(label.partition("=")[0] == done.partition("=")[0] for done in labels):
                continue  # the same option twice: the second would undo the first
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # casts of NaN and overflows are the point
                    new = apply(rng, X, y, options, target)
            except (ValueError, TypeError, IndexError, AttributeError, OverflowError):  # not after the first one
                new = None
            if new is None:
                continue
            X, y, options = new
            labels.append(label)
            may_pass &= ok or method in VALID_FOR.get(label, ())
        if labels:
            cases.append(Case(target, method, X, y, options, may_pass, " + ".join(labels)))
    return cases


# --- running one case -----------------------------------------------------------------------------

def _call(case: Case) -> Callable[[], object]:
    """The call of ``case`` (building the prior or estimator inside it, as a user would)."""
    options = dict(case.options)

    def run():
        if case.target.startswith("sample"):
            prior_options = options.pop("prior_options", None)
            if prior_options is not None and "prior" not in options:
                options["prior"] = bd.TreePrior(**prior_options)
            options.setdefault("method", case.method)
            options.setdefault("task", case.target.partition("-")[2])
            return bd.sample(case.X, case.y, **options)
        cls = getattr(bd, case.target)
        if case.target.startswith("BayesianTree"):
            options.setdefault("method", case.method)
        return cls(**options).fit(case.X, case.y)

    return run


@contextlib.contextmanager
def _time_limit(seconds: int):
    def on_alarm(signum, frame):
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class _Compiles:
    """Counts backend compilations (names of the programs) while ``armed``; with ``stop``, the
    first one raises :class:`_ReachedCompile`."""

    def __init__(self):
        self.names: list = []
        self.stop = False

    def __call__(self, event, duration, **kwargs):
        if event == COMPILE_EVENT:
            self.names.append(kwargs.get("fun_name"))
            if self.stop:
                raise _ReachedCompile(kwargs.get("fun_name"))


@pytest.fixture(scope="module")
def compiles():
    with jax_listener(_Compiles()) as listener:
        yield listener


def run_case(case: Case, compiles: _Compiles, *, to_the_end: bool = False, call=None,
             limit: int = TIME_LIMIT) -> str | None:
    """None when ``case`` behaves (a ValueError/TypeError before any compilation, or a valid
    case accepted), else what went wrong; ``call`` replaces the case's call (to test the check)."""
    if not to_the_end:  # a run to the end reuses the programs the earlier ones compiled
        jax.clear_caches()  # so that a program compiled by an earlier case is compiled (and seen) again
    compiles.names.clear()
    compiles.stop = not to_the_end
    t0 = time.perf_counter()
    try:
        with _time_limit(limit), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (call or _call(case))()
    except _ReachedCompile as reached:
        if case.may_pass:
            return None
        return f"accepted invalid input, or validated it only after compiling {reached.args[0]}"
    except _TimedOut:
        return f"no answer within {limit} s"
    except (ValueError, TypeError) as e:
        if compiles.names:
            return f"{type(e).__name__} raised after compiling {compiles.names}: {e}"
        if not str(e).strip():
            return f"{type(e).__name__} without a message"
        return None
    except Exception as e:  # noqa: BLE001 (any other error is what the fuzzing looks for)
        return f"{type(e).__name__} (not a ValueError/TypeError) after {time.perf_counter() - t0:.1f} s: {e}"
    finally:
        compiles.stop = False
    if not case.may_pass:
        return "accepted an invalid input"
    return None


def _failures(cases, compiles, **kw):
    out = []
    for case in cases:
        problem = run_case(case, compiles, **kw)
        if problem is not None:
            out.append(f"{case!r}\n    -> {problem}")
    return out


# --- the tests ------------------------------------------------------------------------------------

def test_generator_is_deterministic_and_covers_every_target():
    a, b = make_cases(240, seed=28), make_cases(240, seed=28)
    assert [c.label for c in a] == [c.label for c in b]
    assert {c.target for c in a} == set(TARGETS)
    assert sum(not c.may_pass for c in a) >= 150


def test_harness_catches_a_compile_before_the_error(compiles):
    """The check can fail: a ValueError raised after a compilation is reported."""
    def late():
        jax.numpy.sin(jax.numpy.arange(3.0)).block_until_ready()
        raise ValueError("late")

    def hangs():
        time.sleep(5)

    def crashes():
        raise KeyError("x")

    case = Case("sample-classification", "cgm", None, None, {}, False, "probe")
    assert "after compiling" in run_case(case, compiles, call=late)
    assert "not a ValueError/TypeError" in run_case(case, compiles, call=crashes)
    assert "accepted" in run_case(case, compiles, call=lambda: None)
    assert run_case(case, compiles, call=lambda: int("x")) is None  # a ValueError before compiling
    assert "compiling" in run_case(case, compiles, call=lambda: jax.numpy.cos(jax.numpy.arange(2.0)))
    assert "no answer" in run_case(case, compiles, call=hangs, limit=1)
    assert run_case(case._replace(may_pass=True), compiles, call=lambda: jax.numpy.cos(jax.numpy.arange(2.0))) is None


def test_fuzz_malformed_inputs(compiles):
    """240 seeded malformed calls: each a ValueError/TypeError before compiling (or accepted)."""
    failures = _failures(make_cases(240, seed=28), compiles)
    assert not failures, f"{len(failures)} of 240 cases misbehaved:\n" + "\n".join(failures)


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_fuzz_malformed_inputs_sweep(compiles):
    """The larger sweep: 2,000 more cases of other seeds."""
    cases = [c for seed in range(1, 9) for c in make_cases(250, seed=seed)]
    failures = _failures(cases, compiles)
    assert not failures, f"{len(failures)} of {len(cases)} cases misbehaved:\n" + "\n".join(failures)


@pytest.mark.slow
def test_fuzz_accepted_inputs_run_to_the_end(compiles):
    """Every kind of accepted case (a mutation that may be valid) samples to the end or is refused
    before compiling: no crash once sampling has started."""
    kinds = {}
    for case in make_cases(2000, seed=7):
        if case.may_pass and len(kinds) < 6:  # about a minute: most compile their sampler
            kinds.setdefault((case.label, case.target.split("-")[0], case.method), case)
    failures = _failures(list(kinds.values()), compiles, to_the_end=True, limit=300)
    assert not failures, f"{len(failures)} of {len(kinds)} cases misbehaved:\n" + "\n".join(failures)
