"""The one-call API: :func:`sample` builds the problem once and runs a method on it."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from .diagnostics import check_convergence
from .methods import RunOptions, from_flat
from .methods.flat import warn_deprecated
from .priors import TreePrior
from .problem import build_problem
from .problem.tree import LIKELIHOOD_OPTIONS

__all__ = ["load", "sample"]

#: The flat keywords of :class:`~bdtree_jax.priors.TreePrior`.
PRIOR_OPTIONS = tuple(f.name for f in dataclasses.fields(TreePrior))
#: The flat keywords of the leaf models (``likelihood=`` as a mapping).
LEAF_OPTIONS = tuple(dict.fromkeys(k for keys in LIKELIHOOD_OPTIONS.values() for k in keys))


def sample(X, y, *, method="cgm", task: str = "classification", prior: TreePrior | None = None, likelihood=None,
           tempering=None, num_warmup: int = 1000, num_samples: int = 1000, num_chains: int = 4, seed: int = 0,
           progress: bool | None = None, checkpoint=None, block_size: int | None = None, devices=None,
           chain_method: str | None = None, data_shards: int = 1, thin: int = 1, run_until=None,
           categorical_features="from_dtype", missing: str = "mia", **deprecated):
    """Sample the posterior over trees for data ``(X, y)``.

    Parameters
    ----------
    X : array-like or DataFrame (n_samples, n_features); categorical columns and NaN allowed.
    y : array-like of shape (n_samples,): class labels or a real response.
    method : str or Method, default "cgm"
        A method object (:class:`~bdtree_jax.methods.CGM`, :class:`~bdtree_jax.methods.RJHMC`,
        :class:`~bdtree_jax.methods.PCFG`, :class:`~bdtree_jax.methods.SMC`,
        :class:`~bdtree_jax.methods.PG`, :class:`~bdtree_jax.methods.WU`; their options are
        described there) or a name of :data:`~bdtree_jax.methods.METHODS` for its defaults.
    task : {"classification", "regression"}, default "classification"
    prior : TreePrior or None (the default ``TreePrior()``).
    likelihood : None, a mapping or a likelihood, default None
        The leaf model: None for the task's default, a mapping of its hyperparameters
        (``{"concentration": 0.5}``, ``{"nu": 5.0}`` ...; :func:`~bdtree_jax.problem.build_problem`) or an instance.
    tempering : Tempering or None: Metropolis-coupled MCMC (MCMC methods only).
    num_warmup, num_samples, num_chains, seed, progress, checkpoint, block_size, devices, chain_method, data_shards, thin, run_until
        The run's options (:class:`~bdtree_jax.methods.RunOptions`): ``data_shards`` splits every
        chain's rows over that many devices, ``thin`` keeps every ``thin``-th draw after warm-up
        (``num_samples`` kept), ``run_until=bd.Converged(...)`` samples until the check passes.
    categorical_features, missing
        Categorical columns (default "from_dtype") and missing cells ("mia" or "error"): as
        :func:`~bdtree_jax.problem.build_problem` (docs/categorical-missing.md; method "cgm" only).
    **deprecated
        The flat keywords of earlier versions: method options (``proposal=``,
        ``num_particles=`` ...; :func:`~bdtree_jax.methods.from_flat`), ``num_temperatures=`` /
        ``delta_t=``, the prior's (``max_depth=`` ...) and the leaf model's (``concentration=``
        ...).  Each warns ``DeprecationWarning`` with its new spelling.

    Returns
    -------
    Posterior
        Draws ``(num_chains, num_samples, ...)`` (a subclass for RJHMC, PCFG and SMC).

    Examples
    --------
    >>> import bdtree_jax as bd
    >>> X, y = bd.datasets.load("iris")
    >>> post = bd.sample(X, y, method=bd.CGM(), prior=bd.TreePrior(max_depth=3), num_warmup=200,
    ...                  num_samples=200, num_chains=2)
    >>> post.predict(X[:2]).tolist()
    ['Iris-setosa', 'Iris-setosa']
    """
    where = "sample: "
    method, tempering, prior, likelihood = _from_deprecated(method, deprecated, tempering, prior, likelihood, where)
    try:
        options = RunOptions(num_warmup, num_samples, num_chains, seed, progress, checkpoint, block_size, devices,
                             chain_method, data_shards, thin, run_until)
    except ValueError as e:
        raise ValueError(where + str(e)) from None
    problem = build_problem(X, y, task=task, prior=prior, likelihood=likelihood, where=where,
                            categorical_features=categorical_features, missing=missing, **method.problem_options())
    return check_convergence(method.run(problem, options, tempering, where=where))


def load(path):
    """Read any file bdtree_jax writes, whatever it holds.

    Parameters
    ----------
    path : str or path-like.

    Returns
    -------
    * a saved posterior (``Posterior.save`` and the ``save`` of every posterior class, the CLI's
      ``posterior.npz``): the posterior, of the class that saved it;
    * a checkpoint (``checkpoint=`` of a run, the CLI's ``checkpoint.npz``): a dict with the run's
      ``ident``, ``start`` (iterations or chains done), ``chunks`` (their results) and ``states``
      (numpy arrays; typed PRNG keys as :class:`~bdtree_jax._checkpoint.HostKey`);
    * an ArviZ netCDF file (the CLI's ``posterior.nc``, ``post.to_arviz().to_netcdf(...)``): an
      ``arviz.InferenceData``.

    Raises :class:`~bdtree_jax.BdtreeFileError` naming the file and what it is when it is none
    of these, or is damaged (docs/files.md); a pickle of bdtree_jax 0.1 is refused with the call
    that reads it (``<PosteriorClass>.load(path, allow_pickle=True)``); ``FileNotFoundError``
    when there is no file.

    Examples
    --------
    After ``bdtree run iris_cgm``::

        post = bd.load("runs/iris_cgm/posterior.npz")        # a Posterior
        idata = bd.load("runs/iris_cgm/posterior.nc")        # an arviz.InferenceData
        state = bd.load("runs/iris_cgm/checkpoint.npz")      # the checkpoint's dict
    """
    import os

    from . import _files

    path = os.fspath(path)
    kind = _files.file_kind(path)
    if kind == "netcdf":
        import arviz as az

        try:
            return az.from_netcdf(path)
        except (OSError, ValueError) as e:
            raise _files.BdtreeFileError(f"{path}: is a netCDF file that ArviZ cannot read ({type(e).__name__}: "
                                         f"{e}).") from None
    if kind == "pickle":
        raise _files.BdtreeFileError(
            f"{path}: is a pickle (a posterior saved by bdtree_jax 0.1). Reading a pickle can run any code it holds: "
            f"if you made the file yourself, read it with the class that saved it, e.g. "
            f"bd.Posterior.load(path, allow_pickle=True), and save it again to convert it.")
    return _files.read_file(path, None, remedy="Re-run the fit (a checkpoint: delete it to start the run over).")


class FlatOptions(NamedTuple):
    """A flat keyword mapping sorted onto :func:`sample`'s arguments (:func:`split_flat`)."""

    method: Any
    tempering: Any
    prior_options: dict
    leaf_options: dict
    rest: dict
    moved: list


def split_flat(method, flat: dict, *, where: str) -> FlatOptions:
    """Sort flat keywords (earlier versions' ``sample`` keywords, or a config's flat keys) onto the
    method and tempering objects (:func:`~bdtree_jax.methods.from_flat`), the prior's options, the
    leaf model's options (those given as None dropped) and the rest; ``moved`` pairs each mapped
    keyword with its new spelling.  Warns nothing: callers decide."""
    method, tempering, rest, moved = from_flat(method, flat, where=where)
    prior_options = {k: rest.pop(k) for k in PRIOR_OPTIONS if k in rest}
    leaf_options = {k: v for k, v in ((k, rest.pop(k)) for k in LEAF_OPTIONS if k in rest) if v is not None}
    return FlatOptions(method, tempering, prior_options, leaf_options, rest, moved)


def tree_prior(options: dict, where: str) -> TreePrior:
    """``TreePrior(**options)``, an invalid option a ``ValueError`` prefixed with ``where``."""
    try:
        return TreePrior(**options)
    except (ValueError, TypeError) as e:
        raise ValueError(where + str(e)) from None


def _from_deprecated(method, flat: dict, tempering, prior, likelihood, where: str):
    """The method, tempering, prior and likelihood once the deprecated flat keywords ``flat`` are
    mapped onto them (each with a ``DeprecationWarning``)."""
    method, flat_tempering, prior_options, leaf_options, rest, moved = split_flat(method, flat, where=where)
    if rest:
        raise TypeError(f"sample() got unexpected keyword arguments {sorted(rest)}.")
    for name, given, flat_value in (("tempering", tempering, flat_tempering), ("prior", prior, prior_options),
                                    ("likelihood", likelihood, leaf_options)):
        if given is not None and flat_value:
            raise ValueError(f"{where}give {name}= or its flat keywords, not both.")
    if prior_options:
        prior = tree_prior(prior_options, where)
        moved += [(k, f"prior=bd.TreePrior({k}={v!r})") for k, v in prior_options.items()]
    if leaf_options:
        likelihood = leaf_options
        moved += [(k, f"likelihood={{{k!r}: {v!r}}}") for k, v in leaf_options.items()]
    warn_deprecated(moved, stacklevel=4)
    return method, tempering if flat_tempering is None else flat_tempering, prior, likelihood
