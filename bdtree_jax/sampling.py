"""The one-call API: validate, build the model, run, return a Posterior."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .driver import (  # noqa: F401  (re-exported while the API moves to api.py / methods)
    BLOCK_SIZE, CGM_BLOCK_SIZE, CHAIN_METHODS, _default_chain_method, chain_devices, clear_compiled, run_chains,
    trace_count,
)

# ----------------------------------------------------------------------------------------------
# The one-call API: validate, build the model, run, return a Posterior.

METHODS = ("cgm", "hmc-df", "hmc-dfi", "pcfg", "smc", "pg", "wu")
RJHMC_METHODS = ("hmc-df", "hmc-dfi")
TASKS = ("classification", "regression")


CGM_MOVE_PROBS = (0.25, 0.25, 0.40, 0.10)


PROPOSALS = ("cgm", "regrow", "cgm+regrow", "cgm+perturb")
#: The proposals whose MH ratios use the full prior ratio, hence any ``structure``.
PINBALL_PROPOSALS = ("cgm", "cgm+perturb")


def _build_algorithm(data, model, move_probs=CGM_MOVE_PROBS, chain_method=None, proposal="cgm", betas=(1.0,),
                     edit=None, num_particles=None, n_local=None, num_warmup=0, restructure="auto",
                     max_groups=10):
    """The hard-tree MH kernel's static config and :class:`SamplingAlgorithm` for a built model,
    tuned for how chains will run (``chain_method``; default: as :func:`run_chains` picks it).

    ``proposal``: CGM's grow/prune/change/swap, prune-and-regrow, or one of each per iteration, or
    "cgm+perturb": one CGM step and one perturb step (:mod:`~bdtree_jax.kernels.perturb`; its width
    adapts during the first ``num_warmup`` iterations);
    ``betas``: a tempering ladder (more than one rung wraps the kernel in
    :func:`~bdtree_jax.kernels.tempering.tempered`); ``edit``: ``dict(mean_edits=, max_edits=)``
    for the edit prior (:mod:`~bdtree_jax.kernels.edit`; ``data`` is then an ``EditData``), whose
    local moves play CGM's part and whose backtracking moves play regrow's; ``num_particles``:
    Particle Gibbs (:mod:`~bdtree_jax.kernels.pg`) with that many particles and ``proposal``
    "prior" or "posterior"; ``n_local``: the WU schedule (:mod:`~bdtree_jax.kernels.wu`: ``n_local`` CGM
    steps, one restructure, ``n_local`` CGM steps per iteration; ``restructure`` / ``max_groups``: its
    variant)."""
    from .kernels import cgm as cgm_kernel, edit as edit_kernel, pg as pg_kernel, regrow as regrow_kernel, tempering

    structure = getattr(model["prior"], "structure", "cgm")
    if structure != "cgm":
        sampler = ("Particle Gibbs" if num_particles is not None else "the edit prior" if edit is not None
                   else f"proposal={proposal!r}" if n_local is None and proposal not in PINBALL_PROPOSALS else None)
        if sampler is not None:
            raise ValueError(f"structure={structure!r} is supported by method='cgm' with proposal in "
                             f"{PINBALL_PROPOSALS} and by method='wu'; {sampler} draws from the CGM98 prior's "
                             "generative process.")
    if num_particles is not None:
        config = pg_kernel.PGConfig(
            model["prior"].max_depth, model["prior"].min_leaf_size, int(num_particles), proposal,
            n_bins=int(model["grid"].n_cuts.max()) + 1,
            trace_dtypes=cgm_kernel.CGMConfig.from_prior(
                model["prior"], n_features=data.bins.shape[1], n_cuts=int(model["grid"].n_cuts.max())).trace_dtypes,
        )
        algorithm = pg_kernel.particle_gibbs(config)
        if len(betas) > 1:
            algorithm = tempering.tempered(algorithm, tuple(betas), vectorized=chain_method == "vectorized")
        return (config, tuple(betas)), algorithm

    if edit is not None:
        config = edit_kernel.EditConfig(
            model["prior"].max_depth, model["prior"].min_leaf_size, regrow_prob={"cgm": 0.0, "regrow": 1.0}.get(proposal, 0.5),
            **edit,
        )
        algorithm = edit_kernel.edit_prior(config)
        if len(betas) > 1:
            algorithm = tempering.tempered(algorithm, tuple(betas), vectorized=chain_method == "vectorized")
        return (config, proposal, tuple(betas)), algorithm

    if chain_method is None:
        chain_method = _default_chain_method(chain_devices(1))
    config = cgm_kernel.CGMConfig.from_prior(
        model["prior"], move_probs, n_features=data.bins.shape[1], n_cuts=int(model["grid"].n_cuts.max()),
        incremental=chain_method == "sequential",
    )
    regrow_config = regrow_kernel.RegrowConfig(config.max_depth, config.min_leaf_size, config.trace_dtypes)
    if n_local is not None:
        from .kernels import wu as wu_kernel

        wu_config = wu_kernel.WUConfig(config, int(n_local), restructure=restructure, max_groups=max_groups)
        algorithm = wu_kernel.wu(wu_config)
        if len(betas) > 1:
            algorithm = tempering.tempered(algorithm, tuple(betas), vectorized=chain_method == "vectorized")
        return (wu_config, tuple(betas)), algorithm
    if proposal == "cgm":
        algorithm = cgm_kernel.cgm(config)
    elif proposal == "regrow":
        algorithm = regrow_kernel.regrow(regrow_config)
    elif proposal == "cgm+perturb":
        from .kernels import perturb as perturb_kernel

        perturb_config = perturb_kernel.PerturbConfig.from_cgm(config, num_warmup=int(num_warmup))
        algorithm = perturb_kernel.with_perturb(config, perturb_config)
        if len(betas) > 1:
            algorithm = tempering.tempered(algorithm, tuple(betas), vectorized=chain_method == "vectorized")
        return (config, perturb_config, proposal, tuple(betas)), algorithm
    else:
        algorithm = regrow_kernel.with_regrow(config)
    if len(betas) > 1:
        algorithm = tempering.tempered(algorithm, tuple(betas), vectorized=chain_method == "vectorized")
    return (config, regrow_config, proposal, tuple(betas)), algorithm


def _build_model(X, y, *, task, max_depth, alpha, beta, min_leaf_size, concentration, nu, lam, a, mu_bar, where,
                 box_constraints=None, split_prior="uniform", structure="cgm", pinball_rate=3.0, pinball_balance=1.0,
                 pinball_max_leaves=None, valid_cuts="data"):
    from .data import check_classification_y, check_regression_y, check_X, make_split_grid
    from .likelihoods import DirichletMultinomial, NormalMeanShift, default_normal_hyperparameters
    from .priors import TreePrior, box_sides, make_tree_data

    if task not in TASKS:
        raise ValueError(f"{where}task must be one of {TASKS}; got {task!r}.")
    try:
        prior = TreePrior(max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
                          split_prior=split_prior, structure=structure, pinball_rate=pinball_rate,
                          pinball_balance=pinball_balance, pinball_max_leaves=pinball_max_leaves,
                          valid_cuts=valid_cuts)
    except ValueError as e:
        raise ValueError(where + str(e)) from None
    X, names = check_X(X, estimator=where.rstrip(": "))
    if X.shape[0] < 2 * min_leaf_size:
        raise ValueError(
            f"{where}X has n_samples={X.shape[0]}; at least 2 * min_leaf_size = {2 * min_leaf_size} are needed "
            "for any split."
        )
    if task == "classification":
        classes, codes = check_classification_y(y, X.shape[0], estimator=where.rstrip(": "))
        if not concentration > 0:
            raise ValueError(f"{where}concentration must be > 0; got {concentration!r}.")
        likelihood = DirichletMultinomial(len(classes), float(concentration))
        train_y = codes
    else:
        classes = None
        yv = check_regression_y(y, X.shape[0], estimator=where.rstrip(": "))
        hp = default_normal_hyperparameters(yv, nu=nu, lam=lam, a=a, mu_bar=mu_bar)
        for k in ("nu", "lam", "a"):
            if not hp[k] > 0:
                raise ValueError(f"{where}{k} must be > 0; got {hp[k]!r}.")
        likelihood = NormalMeanShift(**hp)
        train_y = yv.astype(np.float32)
    grid = make_split_grid(X)
    bins = grid.bin(X)
    names = names if names is not None else [f"x{f}" for f in range(X.shape[1])]
    box_side = None
    if box_constraints is not None:
        box_side = box_sides(box_constraints, grid.thresholds, names, where=where)
    data = make_tree_data(bins, train_y, prior, likelihood, box_side=box_side, grid=grid)
    point_stats = np.asarray(data.point_stats)
    model = dict(
        grid=grid, likelihood=likelihood, prior=prior, task=task, classes=classes,
        feature_names=names, train_bins=bins, train_stats=point_stats, train_y=train_y,
    )
    return data, model


def sample(
    X,
    y,
    *,
    task: str = "classification",
    method: str = "cgm",
    max_depth: int = 6,
    alpha: float = 0.95,
    beta: float = 1.0,
    min_leaf_size: int = 1,
    split_prior: str = "uniform",
    valid_cuts: str = "data",
    structure: str = "cgm",
    pinball_rate: float = 3.0,
    pinball_balance: float = 1.0,
    pinball_max_leaves: int | None = None,
    move_probs: tuple | None = None,
    concentration: float = 1.0,
    nu: float | None = None,
    lam: float | None = None,
    a: float | None = None,
    mu_bar: float | None = None,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    num_chains: int = 4,
    seed: int = 0,
    progress: bool | None = None,
    checkpoint=None,
    block_size: int | None = None,
    h_init: float = 0.025,
    h_final: float = 0.025,
    schedule: str = "fast",
    leg_steps: int = 4,
    warmup_move_probs: tuple | None = None,
    log_phi: float = 2.0,
    n_buckets=None,
    proposal: str | None = None,
    n_temperatures: int = 1,
    delta_t: float = 0.2,
    box_constraints=None,
    initial_tree=None,
    mean_edits: float = 2.0,
    max_edits: int = 20,
    num_particles: int | None = None,
    ess_threshold: float = 0.1,
    resampling: str = "multinomial",
    grow: str = "next",
    n_islands: int = 1,
    n_local: int = 25,
    restructure: str = "auto",
    max_groups: int = 10,
):
    """Sample the posterior over trees for data ``(X, y)``.

    Parameters
    ----------
    X : array-like or DataFrame of shape (n_samples, n_features), numeric.
    y : array-like of shape (n_samples,): class labels or a real response.
    task : "classification" (Dirichlet–multinomial leaves) or "regression" (normal mean-shift).
    method : "cgm" (Chipman–George–McCulloch MH on hard trees), "hmc-df" or "hmc-dfi"
        (RJHMC-Tree on soft trees; :mod:`bdtree_jax.kernels.rjhmc`), or "pcfg" (BCART-PCFG:
        independent exact draws from the ``φ^-b(T)`` prior's posterior; :mod:`bdtree_jax.pcfg`;
        returns a :class:`~bdtree_jax.posterior.PCFGPosterior`), or "smc" (top-down particle
        filtering, Lakshminarayanan et al. 2013; :mod:`bdtree_jax.kernels.smc`; each chain is an
        independent run and its ``num_samples`` draws are resampled from the final particles;
        returns an :class:`~bdtree_jax.posterior.SMCPosterior` with ``log_evidence``), or "pg"
        (Particle Gibbs: every iteration is a conditional SMC sweep with the chain's current
        tree as the reference particle; :mod:`bdtree_jax.kernels.pg`; an MCMC chain like "cgm"), or
        "wu" (Wu, Tjelmeland & West 2007's schedule: per iteration ``n_local`` CGM steps, one
        restructure move that redraws the tree over its fixed leaf partition, ``n_local`` CGM
        steps; :mod:`bdtree_jax.kernels.wu`).
    max_depth, alpha, beta, min_leaf_size : the tree prior (:class:`~bdtree_jax.priors.TreePrior`;
        RJHMC: the same ``alpha (1+d)^-beta`` conditioned on the root splitting, no
        ``min_leaf_size``).
    split_prior : the CGM98 prior's choice of a rule's cut among the chosen feature's valid cuts
        (methods "cgm", "smc", "pg"): "uniform" (the default) or "range" (Lakshminarayanan et al.
        2013: proportional to the width of the cut's gap between consecutive distinct training
        values, i.e. ``tau ~ U(node min, node max)`` snapped to the training values' gaps; see
        :mod:`bdtree_jax.priors`).  "hmc-df", "hmc-dfi" and "pcfg" have their own priors.
    valid_cuts : where a node's valid cuts come from (:mod:`bdtree_jax.priors`): "data" (the
        default, CGM98: the cuts that split the node's training rows) or "ancestors" (BART's rule
        availability: the cuts inside the range its ancestors' rules leave; ``min_leaf_size`` then
        truncates the prior, every leaf holds at least that many rows).  "ancestors" is supported
        by ``method="cgm"`` (``proposal="cgm"``, tempering included) and ``method="pg"``
        (``proposal="prior"``), with ``structure="cgm"`` and without box constraints or an
        initial tree.
    structure, pinball_rate, pinball_balance, pinball_max_leaves : the tree-structure prior,
        "cgm" (the default: CGM98's ``alpha (1+d)^-beta``) or "pinball" (Wu, Tjelmeland & West
        2007's mechanism in this library's parametrisation, docs/theory/pinball.md: leaves
        ``K - 1 ~ Poisson(pinball_rate)`` truncated at ``pinball_max_leaves`` (None:
        ``2**max_depth``), each split's left leaf count ``k_L - 1 ~ BetaBinomial(k - 2,
        pinball_balance, pinball_balance)``, rules as CGM98's; ``alpha`` and ``beta`` unused).
        "pinball" needs method "cgm" with proposal "cgm" or "cgm+perturb", or method "wu"
        (tempering allowed); the other samplers draw from CGM98's generative process and raise a
        ``ValueError``.
    move_probs : CGM (grow, prune, change, swap) probabilities, default (0.25, 0.25, 0.40, 0.10);
        RJHMC (grow, prune, stay) after warm-up, default (0.2, 0.2, 0.6).
    concentration : Dirichlet concentration per class (classification).
    nu, lam, a, mu_bar : normal mean-shift hyperparameters (regression); ``None`` picks the
        data-based defaults of :func:`~bdtree_jax.likelihoods.default_normal_hyperparameters`.
    num_warmup, num_samples, num_chains : iterations discarded, kept, and independent chains.
    seed : int; same seed and settings give the same draws on any number of devices.
    progress : tqdm bar (default: when stderr is a terminal).
    checkpoint : path of a checkpoint file; an interrupted run resumes from it.
    block_size : iterations per compiled block (and between checkpoints); default
        :data:`CGM_BLOCK_SIZE` for ``method="cgm"``, whose steps take microseconds (fewer
        returns to the host), else :data:`BLOCK_SIZE`.
    h_init, h_final : RJHMC split sharpness, annealed from ``h_init`` to ``h_final`` during warm-up.
    schedule : RJHMC "fast" (one global NUTS adaptation, ``leg_steps`` NUTS transitions per leg)
        or "paper" (500 NUTS warm-up steps + 1 draw per leg, as the reference code).
    leg_steps : NUTS transitions per leg ("fast").
    warmup_move_probs : RJHMC (grow, prune, stay) during warm-up, default (0.5, 0.25, 0.25).
    log_phi : PCFG prior ``Pr[T] ∝ φ^-b(T)`` (``b`` leaves); paper default 2.  alpha and beta are
        not used; ``max_depth`` bounds the depth (the prior conditioned on ``depth <= max_depth``;
        ``None``: unbounded); no warm-up is needed (``num_warmup`` is ignored).
    n_buckets : PCFG: None, or an int (or one per feature): features with more distinct values are
        cut into that many equal-frequency buckets before the boxes are enumerated (paper: 10).
    proposal : method="cgm": "cgm" (grow / prune / change / swap; the default), "regrow" (prune a
        uniformly chosen node's subtree and regrow it from the prior;
        :mod:`bdtree_jax.kernels.regrow`) or "cgm+regrow" (one of each per iteration), or
        "cgm+perturb" (one CGM proposal and one perturb proposal per iteration: an internal node's
        cut moved within a window, or its feature changed; the window adapts towards 44 %
        acceptance during warm-up and is fixed afterwards; :mod:`bdtree_jax.kernels.perturb`).
        method="smc" or "pg": "prior" (the default) or "posterior" (one-step optimal).
    n_temperatures, delta_t : tempering (Metropolis-coupled MCMC; "cgm", "pg", "wu", "hmc-df",
        "hmc-dfi"):
        ``n_temperatures`` rungs with inverse temperatures ``1 / (1 + delta_t * i)`` (each targets
        prior x likelihood**beta); a swap between two random rungs is proposed after every
        iteration and only the cold rung is kept.  1 = off.
    box_constraints : method="cgm": regions of feature space declared to have a constant response
        distribution, as a list of dicts ``{feature: (low, high)}`` (column name or index; ``None``
        or ``±inf`` for an open side).  The prior is conditioned on no rule cutting through a box
        (every box lies inside one leaf).
    initial_tree, mean_edits, max_edits : method="cgm": the EDITTREE prior
        (:mod:`bdtree_jax.kernels.edit`): trees obtained from ``initial_tree`` (a Tree, a tree
        string, or a fitted scikit-learn decision tree) by a truncated geometric number of random
        grow / prune / change edits (mean ``mean_edits``, at most ``max_edits``).  Chains start at
        ``initial_tree``; ``proposal`` "cgm" appends / deletes single edits, "regrow" backtracks
        to a uniformly chosen edit and regrows the rest, "cgm+regrow" mixes them half and half.
    num_particles : method="smc": particles per run (default 100); method="pg": particles of
        each conditional SMC sweep, the reference included (default 10).
    grow, n_islands : method="smc": "next" (node-wise: one node per particle and stage) or
        "layer" (a whole depth level per stage); independent particle islands (dividing
        ``num_particles``), each resampling on its own.
    n_local : method="wu": CGM steps before and after each restructure (default 25, the paper's).
    restructure, max_groups : method="wu": the restructure's variant, "auto" (the default: the exact
        fibre-Gibbs draw, always accepted, when the tree has at most ``max_groups`` leaves, else the
        Metropolis-Hastings move with Variant Π), "pi" (always the MH move) or "gibbs" (always the
        Gibbs draw; needs ``2**max_depth <= max_groups``); ``max_groups`` in [2, 12], default 10.
    ess_threshold, resampling : method="smc": resampling when
        the effective sample size falls to ``ess_threshold * num_particles`` (0: never, 1: after
        every stage), and "multinomial" or "systematic" resampling.

    Returns
    -------
    Posterior

    Examples
    --------
    >>> import bdtree_jax as bd
    >>> X, y = bd.datasets.load("iris")
    >>> post = bd.sample(X, y, num_warmup=200, num_samples=200, num_chains=2, max_depth=3)
    >>> post.predict(X[:2]).tolist()
    ['Iris-setosa', 'Iris-setosa']
    """
    import time

    from .posterior import posterior_from_traces

    where = "sample: "
    if method not in METHODS:
        raise ValueError(f"{where}unknown method {method!r}; available: {METHODS}.")
    if block_size is None:
        block_size = CGM_BLOCK_SIZE if method == "cgm" else BLOCK_SIZE
    for name, v in (("num_warmup", num_warmup), ("num_samples", num_samples), ("num_chains", num_chains),
                    ("block_size", block_size)):
        low = 0 if name == "num_warmup" or (name == "num_samples" and method in ("pcfg", "smc")) else 1
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise ValueError(f"{where}{name} must be an integer >= {low}; got {v!r}.")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise ValueError(f"{where}seed must be an integer; got {seed!r}.")
    from .data import SPLIT_PRIORS

    if not isinstance(split_prior, str) or split_prior not in SPLIT_PRIORS:
        raise ValueError(f"{where}split_prior must be one of {SPLIT_PRIORS}; got {split_prior!r}.")
    _check_structure(structure, pinball_rate, pinball_balance, pinball_max_leaves, alpha, beta, method, proposal,
                     initial_tree, where)
    _check_valid_cuts(valid_cuts, method, proposal, structure, box_constraints, initial_tree, where)
    if split_prior != "uniform" and (method in RJHMC_METHODS or method == "pcfg"):
        raise ValueError(
            f"{where}split_prior is an option of the CGM98 tree prior (methods 'cgm', 'wu', 'smc', 'pg'); "
            f"method={method!r} has its own prior and does not use it."
        )
    if method != "cgm":
        options = (("box_constraints", box_constraints, None), ("initial_tree", initial_tree, None))
        if method not in ("smc", "pg"):
            options += (("proposal", proposal, None),)
        if method in ("pcfg", "smc"):  # exact draws / a particle filter: nothing to temper
            options += (("n_temperatures", n_temperatures, 1),)
        for name, v, default in options:
            if v is not default and v != default:
                raise ValueError(f"{where}{name} is an option of method='cgm'; method={method!r} does not use it.")
    if not isinstance(n_local, (int, np.integer)) or isinstance(n_local, bool) or n_local < 1:
        raise ValueError(f"{where}n_local must be an integer >= 1; got {n_local!r}.")
    if method != "wu" and n_local != 25:
        raise ValueError(f"{where}n_local is an option of method='wu'; method={method!r} does not use it.")
    for name, v, default in (("restructure", restructure, "auto"), ("max_groups", max_groups, 10)):
        if method != "wu" and v != default:
            raise ValueError(f"{where}{name} is an option of method='wu'; method={method!r} does not use it.")
    if method == "wu":
        from .kernels.wu import check_restructure

        check_restructure(restructure, max_groups, max_depth, where=where)
    if method not in ("smc", "pg") and num_particles is not None:
        raise ValueError(f"{where}num_particles is an option of method='smc' or 'pg'; method={method!r} does not use it.")
    if method != "smc":
        for name, v, default in (("ess_threshold", ess_threshold, 0.1), ("resampling", resampling, "multinomial"),
                                 ("grow", grow, "next"), ("n_islands", n_islands, 1)):
            if v is not default and v != default:
                # PG resamples (multinomially, conditionally on the reference) before every stage
                raise ValueError(f"{where}{name} is an option of method='smc'; method={method!r} does not use it.")
    if method == "smc":
        return _sample_smc(
            X, y, task=task, max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
            move_probs=move_probs, warmup_move_probs=warmup_move_probs, concentration=concentration, nu=nu,
            lam=lam, a=a, mu_bar=mu_bar, num_samples=num_samples, num_chains=num_chains, seed=seed,
            proposal="prior" if proposal is None else proposal, num_particles=100 if num_particles is None else num_particles,
            ess_threshold=ess_threshold, resampling=resampling, split_prior=split_prior, grow=grow,
            n_islands=n_islands,
        )
    if method == "pcfg":
        return _sample_pcfg(
            X, y, task=task, max_depth=max_depth, min_leaf_size=min_leaf_size, move_probs=move_probs,
            warmup_move_probs=warmup_move_probs, concentration=concentration, nu=nu, lam=lam, a=a,
            mu_bar=mu_bar, num_samples=num_samples, num_chains=num_chains, seed=seed, log_phi=log_phi,
            n_buckets=n_buckets,
        )
    if method in RJHMC_METHODS:
        return _sample_rjhmc(
            X, y, task=task, method=method, max_depth=max_depth, alpha=alpha, beta=beta,
            min_leaf_size=min_leaf_size, move_probs=move_probs, warmup_move_probs=warmup_move_probs,
            concentration=concentration, nu=nu, lam=lam, a=a, mu_bar=mu_bar, num_warmup=num_warmup,
            num_samples=num_samples, num_chains=num_chains, seed=seed, progress=progress, checkpoint=checkpoint,
            block_size=block_size, h_init=h_init, h_final=h_final, schedule=schedule, leg_steps=leg_steps,
            n_temperatures=n_temperatures, delta_t=delta_t,
        )
    if warmup_move_probs is not None:
        raise ValueError(f"{where}warmup_move_probs is an RJHMC option; method={method!r} does not use it.")
    from .kernels.tempering import ladder

    if method == "pg":
        from .kernels.smc import check_options

        num_particles = 10 if num_particles is None else num_particles
        proposal = "prior" if proposal is None else proposal
        check_options(num_particles, proposal, 1.0, "multinomial", where=where)
        if move_probs is not None:
            raise ValueError(f"{where}move_probs is an option of method='cgm'; method='pg' does not use it.")
    else:
        proposal = "cgm" if proposal is None else proposal
        if proposal not in PROPOSALS:
            raise ValueError(f"{where}proposal must be one of {PROPOSALS}; got {proposal!r}.")
        if proposal == "cgm+perturb" and initial_tree is not None:
            raise ValueError(f"{where}proposal='cgm+perturb' does not apply with initial_tree (the edit prior "
                             "has its own moves: 'cgm', 'regrow' or 'cgm+regrow').")
    try:
        betas = ladder(n_temperatures, delta_t)
    except ValueError as e:
        raise ValueError(where + str(e)) from None
    move_probs = CGM_MOVE_PROBS if move_probs is None else move_probs
    data, model = _build_model(
        X, y, task=task, max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
        concentration=concentration, nu=nu, lam=lam, a=a, mu_bar=mu_bar, where=where,
        box_constraints=box_constraints, split_prior=split_prior, structure=structure, pinball_rate=pinball_rate,
        pinball_balance=pinball_balance, pinball_max_leaves=pinball_max_leaves, valid_cuts=valid_cuts,
    )
    edit = None
    if initial_tree is not None:
        data, edit = _edit_data(X, data, model, initial_tree, mean_edits, max_edits, move_probs, where)
    config, algorithm = _build_algorithm(data, model, move_probs, proposal=proposal, betas=betas, edit=edit,
                                         num_particles=num_particles if method == "pg" else None,
                                         n_local=n_local if method == "wu" else None, num_warmup=num_warmup,
                                         restructure=restructure, max_groups=max_groups)
    t0 = time.perf_counter()
    traces, _ = run_chains(
        algorithm, data, key=jax.random.key(seed), num_chains=num_chains,
        num_iterations=num_warmup + num_samples, block_size=block_size, progress=progress,
        checkpoint=checkpoint, fingerprint=(method, config, model["prior"]), description=method,
    )
    seconds = time.perf_counter() - t0
    info = dict(seed=seed, num_warmup=num_warmup, num_samples=num_samples, seconds=seconds, config=repr(config),
                proposal=proposal, betas=betas, box_constraints=box_constraints,
                edit=None if edit is None else dict(edit, initial_tree=repr(initial_tree)))
    return posterior_from_traces(traces, num_warmup, method=method, info=info, **model)


def _check_valid_cuts(valid_cuts, method, proposal, structure, box_constraints, initial_tree, where) -> None:
    """``valid_cuts`` is one of :data:`~bdtree_jax.data.VALID_CUTS`, and "ancestors" goes with a
    sampler that supports it (CGM with its own moves, Particle Gibbs with the prior proposal)."""
    from .data import VALID_CUTS

    if not isinstance(valid_cuts, str) or valid_cuts not in VALID_CUTS:
        raise ValueError(f"{where}valid_cuts must be one of {VALID_CUTS}; got {valid_cuts!r}.")
    if valid_cuts == "data":
        return
    supported = (method == "cgm" and proposal in (None, "cgm")) or (method == "pg" and proposal in (None, "prior"))
    if not supported:
        raise ValueError(f"{where}valid_cuts='ancestors' is supported by method='cgm' with proposal='cgm' and by "
                         f"method='pg' with proposal='prior'; got method={method!r}, proposal={proposal!r}.")
    for name, v in (("structure", structure != "cgm"), ("box_constraints", box_constraints is not None),
                    ("initial_tree", initial_tree is not None)):
        if v:
            raise ValueError(f"{where}valid_cuts='ancestors' does not support {name} (only structure='cgm', without "
                             "box constraints or an initial tree).")


def _check_structure(structure, pinball_rate, pinball_balance, pinball_max_leaves, alpha, beta, method, proposal,
                     initial_tree, where):
    """Validate the tree-structure prior's options against the method (before anything is built)."""
    from .priors import STRUCTURES

    if not isinstance(structure, str) or structure not in STRUCTURES:
        raise ValueError(f"{where}structure must be one of {STRUCTURES}; got {structure!r}.")
    if structure == "cgm":
        for name, v, default in (("pinball_rate", pinball_rate, 3.0), ("pinball_balance", pinball_balance, 1.0),
                                 ("pinball_max_leaves", pinball_max_leaves, None)):
            if v is not default and v != default:
                raise ValueError(f"{where}{name} is an option of structure='pinball'; structure='cgm' does not use it.")
        return
    if method not in ("cgm", "wu"):
        raise ValueError(
            f"{where}structure={structure!r} is supported by method='cgm' (proposal 'cgm' or 'cgm+perturb') and "
            f"method='wu'; method={method!r} " + (
                "has its own prior." if method in RJHMC_METHODS or method == "pcfg" else
                "draws trees or rules from the CGM98 prior's generative process."))
    if proposal is not None and proposal not in PINBALL_PROPOSALS:
        raise ValueError(
            f"{where}structure={structure!r} needs proposal in {PINBALL_PROPOSALS}; proposal={proposal!r} regrows "
            "subtrees from the CGM98 prior.")
    if initial_tree is not None:
        raise ValueError(f"{where}structure={structure!r} does not apply with initial_tree (the edit prior is a prior "
                         "of its own).")
    for name, v, default in (("alpha", alpha, 0.95), ("beta", beta, 1.0)):
        if v != default:
            raise ValueError(f"{where}{name} is a parameter of structure='cgm' (the split probability "
                             "alpha (1 + depth)**-beta); structure='pinball' does not use it.")


def _edit_data(X, data, model, initial_tree, mean_edits, max_edits, move_probs, where):
    """Validate the edit prior's settings and initial tree (before anything is compiled) and
    return the sampler's data and settings."""
    from .data import check_X
    from .kernels import cgm as cgm_kernel, edit as edit_kernel
    from .priors import violates_boxes
    from .tree import Tree

    if tuple(move_probs) != CGM_MOVE_PROBS:
        raise ValueError(f"{where}move_probs does not apply with initial_tree (the edit prior fixes its moves).")
    try:
        edit_kernel.EditConfig(model["prior"].max_depth, mean_edits=mean_edits, max_edits=max_edits)
    except (ValueError, TypeError) as e:
        raise ValueError(where + str(e)) from None
    Xv, _ = check_X(X, estimator=where.rstrip(": "))
    tree = edit_kernel.initial_tree_from(
        initial_tree, X=Xv, bins=model["train_bins"], thresholds=model["grid"].thresholds,
        max_depth=model["prior"].max_depth, where=where,
    )
    tree = Tree(*(jnp.asarray(a) for a in tree))
    config = cgm_kernel.CGMConfig(model["prior"].max_depth, model["prior"].min_leaf_size)
    with jax.disable_jit():
        plain = cgm_kernel._score(tree, data._replace(box_side=None), config, 1.0)
        if not np.isfinite(float(plain.log_prior)):
            raise ValueError(
                f"{where}initial_tree is outside the prior's support: some split leaves a child with fewer than "
                f"min_leaf_size={model['prior'].min_leaf_size} training rows (or no valid cut is left at a node)."
            )
        if data.box_side is not None and bool(violates_boxes(tree, data.box_side)):
            raise ValueError(f"{where}initial_tree splits inside one of the box_constraints.")
    return edit_kernel.EditData(data, tree), dict(mean_edits=float(mean_edits), max_edits=int(max_edits))


def _sample_rjhmc(X, y, *, task, method, max_depth, alpha, beta, min_leaf_size, move_probs, warmup_move_probs,
                  concentration, nu, lam, a, mu_bar, num_warmup, num_samples, num_chains, seed, progress,
                  checkpoint, block_size, h_init, h_final, schedule, leg_steps, n_temperatures=1, delta_t=0.2):
    """RJHMC-Tree (HMC-DF / HMC-DFI) behind :func:`sample`; returns a SoftTreePosterior."""
    import time

    from .data import check_classification_y, check_regression_y, check_X
    from .kernels import tempering
    from .kernels.rjhmc import RJHMCConfig, rjhmc
    from .posterior import soft_posterior_from_traces
    from .soft import minmax_scaler

    where = "sample: "
    if task not in TASKS:
        raise ValueError(f"{where}task must be one of {TASKS}; got {task!r}.")
    if min_leaf_size != 1:
        raise ValueError(f"{where}min_leaf_size is not defined for soft trees ({method}); leave it at 1.")
    try:
        betas = tempering.ladder(n_temperatures, delta_t)
    except ValueError as e:
        raise ValueError(where + str(e)) from None
    for name, v in (("nu", nu), ("lam", lam), ("a", a)):
        if v is not None:
            raise ValueError(f"{where}{name} belongs to CGM's conjugate leaf prior; {method} does not use it.")
    Xv, names = check_X(X, estimator="sample")
    if Xv.shape[0] < 2:
        raise ValueError(f"{where}X has n_samples={Xv.shape[0]}; at least 2 are needed.")
    x_min, x_range = minmax_scaler(Xv)
    Xs = ((Xv - x_min) / x_range).astype(np.float32)
    if task == "classification":
        classes, codes = check_classification_y(y, Xv.shape[0], estimator="sample")
        if not concentration > 0:
            raise ValueError(f"{where}concentration must be > 0; got {concentration!r}.")
        train_y = codes.astype(np.int32)
        n_classes = len(classes)
    else:
        classes = None
        train_y = check_regression_y(y, Xv.shape[0], estimator="sample").astype(np.float32)
        n_classes = 2
    try:
        config = RJHMCConfig(
            task=task, kind=method.split("-")[1], max_depth=max_depth, alpha=alpha, beta=beta, h_init=h_init,
            h_final=h_final, schedule=schedule, num_warmup=int(num_warmup),
            warmup_move_probs=tuple(warmup_move_probs) if warmup_move_probs is not None else (0.5, 0.25, 0.25),
            move_probs=tuple(move_probs) if move_probs is not None else (0.2, 0.2, 0.6),
            leg_steps=leg_steps, n_classes=n_classes, concentration=float(concentration),
            mu_mean=0.0 if mu_bar is None else float(mu_bar),
        )
    except (ValueError, TypeError) as e:
        raise ValueError(where + str(e).removeprefix("RJHMCConfig: ")) from None
    data = {"X": jnp.asarray(Xs), "y": jnp.asarray(train_y)}
    algorithm = rjhmc(config)
    if len(betas) > 1:
        algorithm = tempering.tempered(algorithm, tuple(betas))
    t0 = time.perf_counter()
    traces, _ = run_chains(
        algorithm, data, key=jax.random.key(seed), num_chains=num_chains,
        num_iterations=num_warmup + num_samples, block_size=block_size, progress=progress,
        checkpoint=checkpoint, fingerprint=(method, config, tuple(betas)), description=method,
    )
    seconds = time.perf_counter() - t0
    info = dict(seed=seed, num_warmup=num_warmup, num_samples=num_samples, seconds=seconds, config=repr(config),
                betas=betas)
    return soft_posterior_from_traces(
        traces, num_warmup, config=config, x_min=x_min, x_range=x_range, task=task, classes=classes,
        feature_names=names if names is not None else [f"x{f}" for f in range(Xv.shape[1])],
        train_X=Xs, train_y=train_y, method=method, info=info,
    )


def _sample_pcfg(X, y, *, task, max_depth, min_leaf_size, move_probs, warmup_move_probs, concentration, nu, lam,
                 a, mu_bar, num_samples, num_chains, seed, log_phi, n_buckets):
    """BCART-PCFG behind :func:`sample`: build the box grammar once, then ``num_samples`` exact
    draws per chain (chain ``c`` uses ``fold_in(key(seed), c)``, so its draws do not depend on the
    number of chains); returns a PCFGPosterior."""
    import time

    from . import pcfg
    from .posterior import PCFGPosterior
    from .priors import TreePrior
    from .tree import tree_depth, Tree

    where = "sample: "
    if max_depth is not None and (not isinstance(max_depth, (int, np.integer)) or max_depth < 1):
        raise ValueError(f"{where}max_depth must be None or an integer >= 1; got {max_depth!r}.")
    if min_leaf_size != 1:
        raise ValueError(f"{where}min_leaf_size is not part of the PCFG prior (every leaf holds >= 1 row); leave it at 1.")
    for name, v in (("move_probs", move_probs), ("warmup_move_probs", warmup_move_probs)):
        if v is not None:
            raise ValueError(f"{where}{name} is an MCMC option; method='pcfg' samples exactly and does not use it.")
    if not (isinstance(log_phi, (int, float, np.floating)) and np.isfinite(log_phi)):
        raise ValueError(f"{where}log_phi must be a finite number; got {log_phi!r}.")
    if n_buckets is not None:
        nb = [n_buckets] if np.isscalar(n_buckets) else list(n_buckets)
        if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) and b >= 2 for b in nb):
            raise ValueError(f"{where}n_buckets must be None, an integer >= 2 or one such integer per feature; got {n_buckets!r}.")
    data, model = _build_model(
        X, y, task=task, max_depth=max_depth if max_depth is not None else 1, alpha=0.95, beta=1.0,
        min_leaf_size=1, concentration=concentration, nu=nu, lam=lam, a=a, mu_bar=mu_bar, where=where,
    )
    from .data import check_X

    Xv, _ = check_X(X, estimator="sample")
    if n_buckets is not None and not np.isscalar(n_buckets) and len(n_buckets) != Xv.shape[1]:
        raise ValueError(f"{where}n_buckets has {len(n_buckets)} entries; X has {Xv.shape[1]} features.")
    codes, boundary_cut = pcfg.code_features(Xv, n_buckets)
    t0 = time.perf_counter()
    grammar = pcfg.build_grammar(
        codes, model["train_stats"], model["likelihood"], log_phi=float(log_phi), max_depth=max_depth,
        boundary_cut=boundary_cut, where=where,
    )
    seconds_grammar = time.perf_counter() - t0
    key = jax.random.key(seed)
    if num_samples == 0:  # the grammar alone: exact MAP tree, predictive, log_prob, paths
        num_chains = 1
    chains = [pcfg.sample_trees(grammar, jax.random.fold_in(key, c), num_samples, where=where) for c in range(num_chains)]
    trees = Tree(*(np.stack([ch[0][i] for ch in chains]) for i in range(3)))
    log_lik = np.stack([ch[1] for ch in chains]).astype(np.float32)
    leaves = np.stack([ch[2] for ch in chains]).astype(np.int32)
    flat = Tree(*(jnp.asarray(a.reshape(-1, a.shape[-1])) for a in trees))
    depth = (np.asarray(jax.vmap(tree_depth)(flat)) if num_samples else np.zeros(0)).reshape(leaves.shape).astype(np.int32)
    stats = dict(
        log_lik=log_lik, log_prior=(-float(log_phi) * leaves).astype(np.float32), n_leaves=leaves, depth=depth,
        accepted=np.ones(leaves.shape, bool), move=np.zeros(leaves.shape, np.int32),
    )
    stats["log_posterior"] = stats["log_lik"] + stats["log_prior"]
    warm = {k: v[:, :0] for k, v in stats.items()}
    model["prior"] = TreePrior(max_depth=grammar.heap_depth)
    seconds = time.perf_counter() - t0
    info = dict(seed=seed, num_samples=num_samples, seconds=seconds, seconds_grammar=seconds_grammar,
                n_boxes=grammar.n_boxes, log_phi=float(log_phi), max_depth=max_depth, n_buckets=n_buckets)
    return PCFGPosterior(trees=trees, stats=stats, warmup_stats=warm, method="pcfg", info=info, grammar=grammar, **model)


def _sample_smc(X, y, *, task, max_depth, alpha, beta, min_leaf_size, move_probs, warmup_move_probs, concentration,
                nu, lam, a, mu_bar, num_samples, num_chains, seed, proposal, num_particles, ess_threshold, resampling,
                split_prior="uniform", grow="next", n_islands=1):
    """Top-down SMC behind :func:`sample`: ``num_chains`` independent runs (run ``c`` uses
    ``fold_in(key(seed), c)``, so it does not depend on the number of runs), each resampled to
    ``num_samples`` draws; returns an SMCPosterior."""
    import time

    from .kernels import smc
    from .posterior import SMCPosterior
    from .tree import Tree, n_leaves, tree_depth

    where = "sample: "
    for name, v in (("move_probs", move_probs), ("warmup_move_probs", warmup_move_probs)):
        if v is not None:
            raise ValueError(f"{where}{name} is an MCMC option; method='smc' does not use it.")
    smc.check_options(num_particles, proposal, ess_threshold, resampling, where=where, grow=grow, n_islands=n_islands)
    data, model = _build_model(
        X, y, task=task, max_depth=max_depth, alpha=alpha, beta=beta, min_leaf_size=min_leaf_size,
        concentration=concentration, nu=nu, lam=lam, a=a, mu_bar=mu_bar, where=where, split_prior=split_prior,
    )
    config = smc.SMCConfig(model["prior"].max_depth, model["prior"].min_leaf_size, int(num_particles), proposal,
                           float(ess_threshold), resampling, grow, int(n_islands))
    n_bins = int(model["grid"].n_cuts.max()) + 1
    run = smc.compiled_run(config, n_bins)
    key = jax.random.key(seed)
    t0 = time.perf_counter()
    results = [jax.device_get(run(jax.random.fold_in(key, c), data)) for c in range(num_chains)]
    seconds = time.perf_counter() - t0
    draws = []
    for c, r in enumerate(results):
        k = jax.random.fold_in(jax.random.fold_in(key, c), 2**31 - 1)  # not a stage key (stages < 2**31 - 1)
        idx = np.asarray(jax.random.categorical(k, jnp.asarray(r.log_weight), shape=(num_samples,)))
        draws.append(idx)
    stack = lambda f: np.stack([f(r, i) for r, i in zip(results, draws)])  # noqa: E731
    trees = Tree(*(stack(lambda r, i, j=j: np.asarray(r.trees[j])[i]) for j in range(3)))
    log_lik = stack(lambda r, i: np.asarray(r.log_lik)[i]).astype(np.float32)
    log_prior = stack(lambda r, i: np.asarray(r.log_prior)[i]).astype(np.float32)
    flat = Tree(*(jnp.asarray(a.reshape(-1, a.shape[-1])) for a in trees))
    shape = log_lik.shape
    leaves = np.asarray(jax.vmap(n_leaves)(flat)).reshape(shape).astype(np.int32) if num_samples else np.zeros(shape, np.int32)
    depth = np.asarray(jax.vmap(tree_depth)(flat)).reshape(shape).astype(np.int32) if num_samples else np.zeros(shape, np.int32)
    stats = dict(log_lik=log_lik, log_prior=log_prior, n_leaves=leaves, depth=depth,
                 accepted=np.ones(shape, bool), move=np.zeros(shape, np.int32))
    stats["log_posterior"] = stats["log_lik"] + stats["log_prior"]
    warm = {k: v[:, :0] for k, v in stats.items()}
    info = dict(seed=seed, num_samples=num_samples, seconds=seconds, config=repr(config),
                n_stages=[int(r.n_stages) for r in results], n_resampled=[int(r.n_resampled) for r in results])
    return SMCPosterior(
        trees=trees, stats=stats, warmup_stats=warm, method="smc", info=info,
        particles=Tree(*(np.stack([np.asarray(r.trees[j]) for r in results]) for j in range(3))),
        particle_log_weights=np.stack([np.asarray(r.log_weight) for r in results]),
        run_log_evidence=np.array([float(r.log_evidence) for r in results]), **model,
    )
