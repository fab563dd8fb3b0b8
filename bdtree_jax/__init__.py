"""bdtree_jax: Bayesian decision trees in JAX.

Sampling the posterior over single CART trees (structure, splits, leaf parameters) with several
algorithms, on CPU or GPU, with results that go to NumPyro, ArviZ, scikit-learn and pandas.
"""

from importlib import metadata as _metadata

from ._devices import apply_cpu_devices_env, set_cpu_device_count

apply_cpu_devices_env()  # only when the environment asks for it (BDTREE_CPU_DEVICES); see _devices

from . import datasets, diagnostics, exact, kernels, likelihoods, methods, priors, problem, soft, tree  # noqa: E402
from . import inspection  # noqa: E402
from .estimators import BARTClassifier, BARTPoissonRegressor, BARTRegressor, BARTSurvival  # noqa: E402
from .estimators import BayesianTreeClassifier, BayesianTreeRegressor  # noqa: E402
from .estimators.bcf import BCFClassifier, BCFRegressor  # noqa: E402
from .posterior.bcf import BCFPosterior  # noqa: E402
from .data import SplitGrid, TreeData, make_split_grid  # noqa: E402
from .likelihoods import DirichletMultinomial, NormalMeanShift  # noqa: E402
from .posterior import Posterior, SoftTreePosterior  # noqa: E402
from .posterior import BARTClassifierPosterior, BARTMulticlassPosterior, BARTPoissonPosterior, BARTPosterior, BARTSurvivalPosterior  # noqa: E402
from .posterior import BARTVariancePosterior  # noqa: E402
from .priors import TreePrior, make_tree_data  # noqa: E402
from .driver import clear_compiled, run_chains  # noqa: E402
from .api import load, sample  # noqa: E402
from .methods import CGM, PCFG, PG, RJHMC, SMC, WU, Converged, RunOptions, Tempering  # noqa: E402
from .problem import TreeProblem, build_problem  # noqa: E402
from .tree import Tree  # noqa: E402
from ._files import BdtreeFileError, PickleFileWarning  # noqa: E402
from .diagnostics import ConvergenceWarning  # noqa: E402

try:  # one source: pyproject.toml's version, as installed
    __version__ = _metadata.version("bdtree_jax")
except _metadata.PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "BARTClassifier",
    "BARTClassifierPosterior",
    "BARTMulticlassPosterior",
    "BARTPoissonPosterior",
    "BARTPoissonRegressor",
    "BARTPosterior",
    "BARTRegressor",
    "BARTSurvival",
    "BARTSurvivalPosterior",
    "BARTVariancePosterior",
    "BCFClassifier",
    "BCFPosterior",
    "BCFRegressor",
    "BayesianTreeClassifier",
    "BayesianTreeRegressor",
    "BdtreeFileError",
    "CGM",
    "Converged",
    "ConvergenceWarning",
    "DirichletMultinomial",
    "NormalMeanShift",
    "PCFG",
    "PG",
    "PickleFileWarning",
    "Posterior",
    "RJHMC",
    "RunOptions",
    "SMC",
    "SoftTreePosterior",
    "SplitGrid",
    "Tempering",
    "Tree",
    "TreeData",
    "TreePrior",
    "TreeProblem",
    "WU",
    "build_problem",
    "clear_compiled",
    "datasets",
    "diagnostics",
    "exact",
    "inspection",
    "kernels",
    "likelihoods",
    "load",
    "methods",
    "make_split_grid",
    "make_tree_data",
    "priors",
    "problem",
    "run_chains",
    "sample",
    "set_cpu_device_count",
    "soft",
    "tree",
]
