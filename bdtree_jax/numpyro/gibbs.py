""":class:`TreeGibbs`: the NumPyro kernel that updates every :func:`~bdtree_jax.numpyro.bart` and
:func:`~bdtree_jax.numpyro.cart` site of a model given the other sites, then runs the inner
NUTS/HMC kernel on the continuous sites given the trees: ``MCMC(TreeGibbs(NUTS(model)), ...)``.

Which update a tree site gets is decided once, on the host, by tracing the model with the site's
function values ``f`` (n,) at seven points (the prototype's, near it, far from it on both sides:
``_detect``), the other latent sites at the prototype's values: the sites whose log density
changes are the ones ``f`` enters.  A conjugate update is chosen only where every probe agrees
with its form to float32 round-off; otherwise ``"mh"``, and :attr:`TreeGibbs.site_notes` says why.

* ``"normal"``: ``f`` enters exactly one site, an observed ``Normal(loc, scale)`` (n,), neither
  scaled nor masked, with ``loc - f`` the same at every probe (``loc = f + rest``, slope exactly
  1: ``Normal(2 f + 1, s)``, ``Normal(max(f, 0), s)``, ``Normal(f**2, s)`` get ``"mh"``) and one
  scalar ``scale`` the same at every probe.  Bayesian backfitting on the working residual
  ``y - (loc - f)``, leaf values integrated out for the structure move and then drawn from their
  conjugate normal conditional, with ``sigma = scale`` as the model has it now (a site of NUTS, a
  constant, ...): the sweep of :class:`~bdtree_jax.estimators.BARTRegressor`
  (:mod:`bdtree_jax.kernels.bart`; for ``cart``, one CGM98 proposal among grow, prune, change
  and swap).
* ``"probit"``: the one site ``f`` enters is an observed ``Bernoulli(probs)`` (neither scaled nor
  masked) with ``Phi^-1(probs) - f`` the same at every probe where ``probs`` is read accurately
  (``probs = Phi(f + rest)``; a clipped or floored ``Phi`` gets ``"mh"``).  Albert–Chib: latents
  ``z ~ N(eta, 1)`` truncated to the side of 0 the label says (:func:`bdtree_jax.kernels.probit.draw_latents`, accurate at
  any ``eta``), then backfitting on ``z - (eta - f)`` with ``sigma = 1``, as
  :class:`~bdtree_jax.estimators.BARTClassifier`; the latents are not kept.  ``eta`` is read from
  ``probs`` where float32 holds it (``probs`` in ``[1e-36, 1 - 2**-4]``) and elsewhere from the
  model traced again with ``f`` shifted by a known amount (``TreeGibbs._probit_eta``): no
  clipping of ``eta`` (the former ``Phi^-1(clip(probs))`` saturated at ``|eta| ~ 5.2``).
* ``"mh"``: any other way ``f`` enters the model (Poisson, logistic, Student-t, a scale, several
  sites): per tree, Metropolis–Hastings against the model's log density, a grow/prune proposal
  with every leaf value drawn from a Laplace approximation of its conditional, then a proposal
  of new leaf values alone (:mod:`bdtree_jax.kernels.tree_mh`).  Where float32 makes the log
  density's second derivative infinite or NaN, the approximation uses the central difference of
  its gradient (:func:`_finite_derivatives`).
* ``cart(..., leaf_values=False)`` sites (``"structure"``): grow/prune Metropolis–Hastings on the
  structure against the model's log density, the model's own leaf parameters held fixed (the new
  slots' parameters are the padding drawn from their prior, as :class:`TopologyMH` does).

* ``bart(..., sparse=True)`` sites (DART): any of the updates above with the rule prior's feature
  choice weighted by the site's split probabilities ``s``, then DART's exact ``s`` and ``theta``
  steps given the trees (:func:`bdtree_jax.kernels.dart.sparsity_step`); ``s`` and ``theta`` are
  sampler state (:attr:`TreeGibbsState.sparsity`) and sample values (``{name}_split_probs``,
  ``{name}_sparse_theta``).

``kinds={"f": "mh"}`` forces an update (``"normal"``/``"probit"`` only where detected).  Every
update leaves the conditional posterior of its site invariant; the whole is a Gibbs sampler.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import ndtri
from numpyro.handlers import condition, seed, substitute, trace
from numpyro.infer.gibbs import conditioned, with_conditioning
from numpyro.infer.hmc import HMC
from numpyro.infer.initialization import init_to_sample
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import compute_log_probs, log_density

from ..kernels import bart as bart_kernel
from ..kernels import cgm, dart, tree_mh
from ..kernels._moves import mh_log_ratio
from ..kernels.probit import draw_latents
from .sites import HardTreePrior, TreeSiteSpec, encode_trees
from .._validate import check_one_of

__all__ = ["KINDS", "TreeGibbs", "TreeGibbsState"]


KINDS = ("normal", "probit", "mh")
_N_PROBES = 6  # random points f of _detect besides the prototype's
# probit: Phi(eta) in float32 gives eta to round-off for probs in [_P_LOW, 1 - _Q_LOW] (eta in about
# [-12.5, 1.53]); rows outside are re-evaluated with f shifted (_probit_eta), at most _ETA_ROUNDS times
_P_LOW, _Q_LOW, _ETA_ROUNDS = 1e-36, 2.0**-4, 8
_FD_STEP = 0.01  # the central difference of _finite_derivatives


class TreeGibbsState(NamedTuple):
    """``z``: every latent site's value (the tree sites' packed trees, the inner kernel's
    unconstrained values) and each tree site's values at the rows ``name`` (n,); ``trees``: per tree site its :class:`~bdtree_jax.kernels.bart.BARTState`
    (the trees in bin codes, their leaf values and ``fit`` (n,) the sum of trees at the rows);
    ``accepted``: per tree site the (M,) trees changed in the last sweep; ``inner``: the inner
    kernel's state (None without continuous sites); ``packed_trees``: the packed trees by site
    (the extra field that ``MCMC`` collects: ``postprocess_fn`` leaves them out of the samples);
    ``sparsity``: per tree site None, or for a ``bart(..., sparse=True)`` site ``(log_s (F,),
    theta ())`` its DART split probabilities' logs and concentration."""

    z: dict
    trees: tuple
    accepted: tuple
    inner: Any
    rng_key: Any
    packed_trees: dict = {}
    sparsity: tuple = ()


class _Site(NamedTuple):
    spec: TreeSiteSpec
    kind: str
    observed: str | None  # the observed site of "normal" / "probit"
    note: str = ""  # why this kind (site_notes)


def _unwrap(fn):
    while isinstance(fn, (dist.Independent, dist.ExpandedDistribution)):
        fn = fn.base_dist
    return fn


class TreeGibbs(MCMCKernel):
    """Tree sites by their exact updates (module docstring), then every other latent site by
    ``inner_kernel``: ``MCMC(TreeGibbs(NUTS(model)), num_warmup=..., num_samples=...)``.

    Parameters
    ----------
    inner_kernel : a NumPyro ``NUTS`` or ``HMC`` kernel built on the model.  When the model has
        no latent site besides its trees it is not run (and costs nothing).
    kinds : optional ``{site name: kind}`` forcing a site's update (:data:`KINDS`).

    Samples hold, through ``postprocess``, the sites' deterministic values (``name``,
    ``{name}_n_leaves``, ``{name}_depth``), and for a ``bart(..., sparse=True)`` site its split
    probabilities ``{name}_split_probs`` (F,) and concentration ``{name}_sparse_theta`` (); the
    packed trees ``{name}_trees`` are in the extra field ``"packed_trees"``
    (:func:`~bdtree_jax.numpyro.posterior_samples` joins them).
    """

    sample_field = "z"

    def __init__(self, inner_kernel, *, kinds: dict | None = None):
        if not isinstance(inner_kernel, HMC) or inner_kernel.model is None:
            raise ValueError("TreeGibbs: inner_kernel must be a NumPyro NUTS or HMC kernel built on a model, "
                             "e.g. TreeGibbs(NUTS(model)).")
        kinds = {} if kinds is None else dict(kinds)
        for name, kind in kinds.items():
            check_one_of(f"TreeGibbs: kinds[{name!r}]", kind, KINDS)
        self._model = inner_kernel.model
        self._inner_template = inner_kernel
        self._kinds = kinds
        self._sites: tuple[_Site, ...] = ()
        self._inner = None
        self._vectorized = False

    @property
    def model(self):
        return self._model

    @property
    def default_fields(self):
        return ("z", "packed_trees")

    @property
    def site_kinds(self) -> dict:
        """``{site name: kind}`` decided at ``init``."""
        return {s.spec.name: ("structure" if not s.spec.leaf_values else s.kind) for s in self._sites}

    @property
    def site_notes(self) -> dict:
        """``{site name: note}`` decided at ``init``: the form detected, or why a site got the
        general ``"mh"`` update (e.g. ``"the loc of Normal site 'y' is not f + (terms free of f)"``)."""
        return {s.spec.name: s.note for s in self._sites}

    # -- set-up (host) -------------------------------------------------------------------------

    def _setup(self, model_args, model_kwargs) -> dict:
        def start(site):  # tree sites at their stumps (cheap, no prior draw), the others drawn
            if site["type"] == "sample" and isinstance(site["fn"], HardTreePrior):
                return site["fn"].stump()
            return init_to_sample(site) if site["type"] == "sample" else None

        with jax.ensure_compile_time_eval():
            model = substitute(seed(self._model, jax.random.PRNGKey(0)), substitute_fn=start)
            proto = trace(model).get_trace(*model_args, **(model_kwargs or {}))
        specs = [s["fn"].spec for s in proto.values() if s["type"] == "sample" and isinstance(s["fn"], HardTreePrior)]
        if not specs:
            raise ValueError("TreeGibbs: the model has no tree site; declare one with bdtree_jax.numpyro.bart(...) or "
                             "cart(...).")
        unknown = sorted(set(self._kinds) - {s.name for s in specs})
        if unknown:
            raise ValueError(f"TreeGibbs: kinds names {unknown}, which are not tree sites of the model "
                             f"({[s.name for s in specs]}).")
        taken = sorted({n for spec in specs if spec.dart is not None for n in _sparse_names(spec)} & set(proto))
        if taken:
            raise ValueError(f"TreeGibbs: the model has sites named {taken}, which the sparse tree sites' split "
                             "probabilities need (bart(name, ..., sparse=True) records {name}_split_probs and "
                             "{name}_sparse_theta); rename them.")
        latent = {k: s["value"] for k, s in proto.items() if s["type"] == "sample" and not s["is_observed"]}
        sites = []
        for spec in specs:
            if spec.leaf_values:
                kind, observed, note = self._detect(spec, proto, latent, model_args, model_kwargs)
            else:
                kind, observed, note = "mh", None, "cart(..., leaf_values=False): the structure alone"
            forced = self._kinds.get(spec.name)
            if forced is not None and forced != kind:
                if forced != "mh":
                    raise ValueError(f"TreeGibbs: kinds[{spec.name!r}]={forced!r}, but the model is not of that form "
                                     f"(detected {kind!r}: {note}); only 'mh' can be forced.")
                kind, observed, note = "mh", None, f"forced by kinds (detected {kind!r}: {note})"
            sites.append(_Site(spec, kind, observed, note))
        self._sites = tuple(sites)
        tree_sites = {s.spec.trees_site for s in sites}
        return {k: v for k, v in latent.items() if k not in tree_sites}

    def _detect(self, spec: TreeSiteSpec, proto, latent, model_args, model_kwargs):
        """``(kind, observed site, note)`` of a site with leaf values (module docstring): the model
        traced with the site's values at :data:`_N_PROBES` + 1 points ``f`` (the prototype's and
        random ones spread over ``+-(10 + 3 |offset|)``, both signs), the other latent sites at the
        prototype's values.  ``"normal"`` / ``"probit"`` only where every probe agrees with the
        form exactly (to float32 round-off); otherwise ``"mh"`` and ``note`` says why."""
        with jax.ensure_compile_time_eval():
            f0 = np.asarray(proto[spec.name]["value"], np.float64)
            z = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (_N_PROBES,) + f0.shape), np.float64)
            spread = 10.0 + 3.0 * abs(spec.offset)
            probes = [f0, f0 + 0.1 * z[0], f0 + 3.0 * z[1], spread * z[2], -f0 + z[3], f0 - 8.0 + z[4],
                      f0 + 8.0 + z[5]]

            def run(f):
                model = substitute(condition(seed(self._model, 0), data=latent),
                                   data={spec.name: jnp.asarray(f, jnp.float32)})
                t = trace(model).get_trace(*model_args, **(model_kwargs or {}))
                lp = {k: np.asarray(s["fn"].log_prob(s["value"])) for k, s in t.items() if s["type"] == "sample"}
                return t, lp

            runs = [run(f) for f in probes]
        traces = [t for t, _ in runs]
        t0, lp0 = runs[0]
        moved = sorted({k for _, lp in runs[1:] for k in lp0
                        if np.shape(lp[k]) != np.shape(lp0[k]) or not np.allclose(lp0[k], lp[k], rtol=1e-6, atol=1e-6)})
        if len(moved) != 1:
            return "mh", None, f"f enters {len(moved)} sites ({moved}), not one observed site"
        obs = moved[0]
        site0 = t0[obs]
        if not site0["is_observed"]:
            return "mh", None, f"f enters the latent site {obs!r}, not an observed one"
        if site0.get("scale") is not None or site0.get("mask") is not None:
            return "mh", None, f"the observed site {obs!r} is scaled or masked"
        if np.shape(site0["value"]) != f0.shape:
            return "mh", None, f"the observed site {obs!r} has shape {np.shape(site0['value'])}, not f's {f0.shape}"
        fns = [_unwrap(t[obs]["fn"]) for t in traces]
        families = {type(fn) for fn in fns}
        if len(families) != 1:
            return "mh", None, f"the observed site {obs!r} changes family with f"
        family = families.pop()
        if family is dist.Normal:
            loc = [np.broadcast_to(np.asarray(fn.loc, np.float64), f0.shape) for fn in fns]
            scale = [np.asarray(fn.scale, np.float64) for fn in fns]
            rest = [m - f for m, f in zip(loc, probes)]  # loc - f: free of f where loc = f + rest
            tol = 1e-5 * (1.0 + max(np.abs(m).max() for m in loc))
            if not all(np.allclose(r, rest[0], rtol=0.0, atol=tol) for r in rest[1:]):
                return "mh", None, f"the loc of Normal site {obs!r} is not f + (terms free of f)"
            if np.size(scale[0]) != 1 or not all(np.shape(s) == np.shape(scale[0]) and np.allclose(s, scale[0],
                                                                                                 rtol=1e-6, atol=0.0)
                                                 for s in scale[1:]):
                return "mh", None, f"the scale of Normal site {obs!r} is not one scalar free of f"
            return "normal", obs, "an observed Normal(f + rest, scale)"
        if family is dist.BernoulliProbs:
            from scipy.special import ndtri as np_ndtri

            rest, seen = [], np.zeros(f0.shape, int)
            for fn, f in zip(fns, probes):
                p = np.broadcast_to(np.asarray(fn.probs, np.float64), f0.shape)
                ok = (p >= 1e-30) & (p <= 1.0 - 1e-3)
                seen += ok
                rest.append(np.where(ok, np_ndtri(np.clip(p, 1e-30, 1.0 - 1e-3)) - f, np.nan))
            rest = np.array(rest)
            both = seen >= 2  # rows in the accurate range at two probes or more
            r = rest[:, both]
            if both.any() and np.max(np.fmax.reduce(r, 0) - np.fmin.reduce(r, 0)) <= 2e-3:
                return "probit", obs, "an observed Bernoulli(Phi(f + rest))"
            return "mh", None, f"the probs of Bernoulli site {obs!r} are not Phi(f + terms free of f)"
        return "mh", None, f"the observed site {obs!r} is a {family.__name__}, neither Normal nor Bernoulli(probs)"

    # -- values of the sites ----------------------------------------------------------------------

    @staticmethod
    def _encode(site: _Site, state: bart_kernel.BARTState):
        spec = site.spec
        value = encode_trees(state.trees.tree, state.leaf_values, spec.thresholds, spec.leaf_values)
        return value if spec.kind == "bart" else value[0]

    def _values(self, trees, inner_constrained) -> dict:
        """Every site's current value: packed trees, the sites' function values at the rows (so
        the model never routes the rows through the trees under a kernel) and the inner sites."""
        values = dict(inner_constrained)
        for site, state in zip(self._sites, trees):
            values[site.spec.trees_site] = self._encode(site, state)
            if site.spec.leaf_values:
                values[site.spec.name] = site.spec.offset + state.fit
        return values

    def _trace(self, values, model_args, model_kwargs):
        model = seed(conditioned(self._model), 0)
        return trace(model).get_trace(*model_args, **with_conditioning(model_kwargs, values))

    def _log_density(self, values, model_args, model_kwargs):
        return log_density(conditioned(self._model), model_args, with_conditioning(model_kwargs, values), {})[0]

    def _log_density_terms(self, values, model_args, model_kwargs):
        """(K,) the model's log density as its terms: every sample site's elementwise log
        probability (scaled as NumPyro's ``log_density`` scales it), flattened and concatenated in
        trace order; their sum is :meth:`_log_density`.  The general update's MH ratios sum the
        terms' differences (:func:`bdtree_jax.kernels.tree_mh.log_lik_change`): terms that did not
        change add exactly 0, so a ratio stays accurate at any number of rows, where the
        difference of two float32 totals does not (0.18 off at 100k rows)."""
        terms, _ = compute_log_probs(conditioned(self._model), model_args, with_conditioning(model_kwargs, values),
                                     {}, sum_log_prob=False)
        return jnp.concatenate([jnp.ravel(jnp.asarray(t, jnp.float32)) for t in terms.values()])

    def _inner_constrained(self, inner_state, model_args, model_kwargs):
        if self._inner is None:
            return {}
        return self._inner.get_constrain_fn(model_args, model_kwargs)(inner_state.z)

    # -- MCMCKernel ---------------------------------------------------------------------------

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        if jnp.ndim(rng_key) > (0 if jax.dtypes.issubdtype(jnp.asarray(rng_key).dtype, jax.dtypes.prng_key) else 1):
            # chain_method="vectorized": one key per chain (the sample function is vmapped alike)
            state = jax.vmap(lambda k: self.init(k, num_warmup, init_params, model_args, model_kwargs))(rng_key)
            self._vectorized = True
            return state
        inner_latent = self._setup(model_args, model_kwargs)
        self._vectorized = False
        init_params = {} if init_params is None else dict(init_params)
        fixed = sorted(set(init_params) & {s.spec.trees_site for s in self._sites})
        if fixed:
            raise ValueError(f"TreeGibbs: init_params for tree sites {fixed} are not supported (every tree starts as a "
                             "stump with leaf value 0).")
        trees = tuple(bart_kernel.init(None, s.spec.problem.data, s.spec.config) for s in self._sites)
        sparsity = tuple(None if s.spec.dart is None else
                         dart.init_sparsity(s.spec.problem.data.tree_data.bins.shape[1], s.spec.dart)
                         for s in self._sites)
        accepted = tuple(jnp.zeros((s.spec.config.n_trees,), bool) for s in self._sites)
        rng_key, key_inner = jax.random.split(rng_key)
        inner_state = None
        self._inner = None
        if inner_latent:
            self._inner = self._inner_template.wrap_model(conditioned)
            values = self._values(trees, {})
            inner_state = self._inner.init(key_inner, num_warmup, init_params or None, model_args,
                                           with_conditioning(model_kwargs, values))
        elif init_params:
            raise ValueError(f"TreeGibbs: init_params names {sorted(init_params)}; the model has no other latent site.")
        z = self._z(trees, inner_state, sparsity)
        return TreeGibbsState(z, trees, accepted, inner_state, rng_key, self._packed(z), sparsity)

    def _packed(self, z) -> dict:
        return {s.spec.trees_site: z[s.spec.trees_site] for s in self._sites}

    def _z(self, trees, inner_state, sparsity) -> dict:
        """The sample values: the inner sites', the packed trees and each site's values at the rows
        (the kernel's fit, so ``postprocess`` need not route every row through every tree again),
        and the sparse sites' split probabilities and concentration."""
        z = self._values(trees, {} if inner_state is None else inner_state.z)
        for site, sp in zip(self._sites, sparsity):
            if sp is not None:
                probs, theta = _sparse_names(site.spec)
                z[probs], z[theta] = jnp.exp(sp[0]), sp[1]
        return z

    def sample(self, state, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        if self._vectorized:
            return jax.vmap(lambda s: self._sample_one(s, model_args, model_kwargs))(state)
        return self._sample_one(state, model_args, model_kwargs)

    def _sample_one(self, state, model_args, model_kwargs):
        rng_key, key_trees = jax.random.split(state.rng_key)
        keys = jax.random.split(key_trees, len(self._sites))
        inner_constrained = self._inner_constrained(state.inner, model_args, model_kwargs)
        trees, accepted, sparsity = list(state.trees), list(state.accepted), list(state.sparsity)
        for i, (site, key) in enumerate(zip(self._sites, keys)):
            values = self._values(trees, inner_constrained)
            if site.spec.dart is None:
                trees[i], accepted[i] = self._update(site, key, trees[i], values, model_args, model_kwargs)
            else:
                trees[i], accepted[i], sparsity[i] = self._update_sparse(site, key, trees[i], sparsity[i], values,
                                                                         model_args, model_kwargs)
        inner_state = state.inner
        if self._inner is not None:
            kwargs = with_conditioning(model_kwargs, self._values(trees, {}))
            inner_state = self._inner.refresh(inner_state, model_args, kwargs)
            inner_state = self._inner.sample(inner_state, model_args, kwargs)
        z = self._z(trees, inner_state, sparsity)
        return TreeGibbsState(z, tuple(trees), tuple(accepted), inner_state, rng_key, self._packed(z),
                              tuple(sparsity))

    def _update_sparse(self, site: _Site, key, state: bart_kernel.BARTState, sparsity, values, model_args,
                       model_kwargs):
        """A ``bart(..., sparse=True)`` site: :meth:`_update` with the rule prior weighted by the
        current ``s`` (``sparsity = (log_s, theta)``), then DART's ``s`` and ``theta`` steps
        (:func:`bdtree_jax.kernels.dart.sparsity_step`): for a ``"normal"`` site the sweep of
        ``BARTRegressor(sparse=True)`` (:func:`bdtree_jax.kernels.dart.step_with_draws`, sigma the
        model's) draw for draw.  Returns ``(state, accepted (M,), (log_s, theta))``."""
        dstate = dart.DARTState(state, *sparsity)
        key, key_s = jax.random.split(key)
        new, accepted = self._update(site, key, state, values, model_args, model_kwargs, log_s=dstate.log_s)
        dstate, _, _ = dart.sparsity_step(key_s, dstate._replace(bart=new), site.spec.dart)
        return dstate.bart, accepted, (dstate.log_s, dstate.theta)

    def _update(self, site: _Site, key, state: bart_kernel.BARTState, values, model_args, model_kwargs, log_s=None):
        """One update of a site's trees given the other sites' ``values``; ``log_s`` (F,) weights
        the rule prior (a sparse site, :meth:`_update_sparse`).  Returns ``(state, accepted (M,))``."""
        spec = site.spec
        data = spec.problem.data if log_s is None else dart.weighted(spec.problem.data, log_s)
        if not spec.leaf_values:
            return _structure_step(key, state, spec, values,
                                   lambda v: self._log_density_terms(v, model_args, model_kwargs))
        if site.kind in ("normal", "probit"):
            obs = self._trace(values, model_args, model_kwargs)[site.observed]
            fn = _unwrap(obs["fn"])
            y = jnp.reshape(obs["value"], (-1,)).astype(jnp.float32)
            n = y.shape[0]
            key, key_latent = jax.random.split(key)
            if site.kind == "normal":
                loc = jnp.broadcast_to(fn.loc, (n,)).astype(jnp.float32)
                target, sigma2 = y - loc + state.fit, jnp.reshape(fn.scale, (-1,))[0] ** 2
            else:
                eta = self._probit_eta(site, values, jnp.broadcast_to(fn.probs, (n,)), model_args, model_kwargs)
                target = draw_latents(key_latent, eta, y) - eta + state.fit
                sigma2 = jnp.float32(1.0)
            new, info = bart_kernel.step(key, state._replace(sigma2=jnp.asarray(sigma2, jnp.float32)),
                                         data._replace(y=target.astype(jnp.float32)), spec.config)
            return new, info.accepted

        @_finite_derivatives
        def log_lik(f):  # (K,) terms, summed by the sweep
            return self._log_density_terms({**values, spec.name: spec.offset + f}, model_args, model_kwargs)

        # the fit as carried, or every FIT_REFRESH sweeps exactly from the trees (bounded round-off)
        fit = jax.lax.cond(state.sweeps % bart_kernel.FIT_REFRESH == 0,
                           lambda: tree_mh.fit_from_trees(state.leaf_values, state.trees.leaf_id), lambda: state.fit)
        trees, leaf_values, fit, accepted, _ = tree_mh.sweep(key, state.trees, state.leaf_values, fit, log_lik,
                                                             data.tree_data, spec.tau2, _mh_config(spec))
        return state._replace(trees=trees, leaf_values=leaf_values, fit=fit, sweeps=state.sweeps + 1), accepted

    def _probit_eta(self, site: _Site, values, probs, model_args, model_kwargs):
        """(n,) float32 the linear predictor ``eta = Phi^-1(probs)`` of a ``"probit"`` site's
        observation, without the float32 round trip's loss: ``Phi(eta)`` rounds to 1 above
        ``eta ~ 5.3`` and under ``float32`` tiny below ``-13``, so a row whose ``probs`` (n,) lies
        outside ``[_P_LOW, 1 - _Q_LOW]`` is evaluated again with the site's values shifted by a
        known amount ``d`` (``eta(f + d) = eta(f) + d`` on this site, checked by ``_detect``)
        until it lands inside, at most ``_ETA_ROUNDS`` times (``|eta|`` up to ~90; beyond, the
        last bound).  A model whose rows all lie inside is traced once, as before."""
        name, obs = site.spec.name, site.observed
        f = values[name]

        def read(p):
            """(eta + shift where inside, inside, the next shift's change)"""
            p = p.astype(jnp.float32)
            q = 1.0 - p  # exact for p >= 1/2
            low, high = p < _P_LOW, q < _Q_LOW
            eta = jnp.where(p <= 0.5, ndtri(jnp.maximum(p, _P_LOW)), -ndtri(jnp.clip(q, _P_LOW, 0.5)))
            # below the range: eta < ~-12.5, up by 12; above: by the estimate + 6 to ~-6, or by 17
            # where q rounds to 0 (eta > ~5.3)
            move = jnp.where(low, 12.0, jnp.where(q > 0.0, -(eta + 6.0), -17.0))
            return eta, ~(low | high), jnp.where(low | high, move, 0.0)

        eta, inside, move = read(probs)

        def cond(carry):
            k, _, _, inside, _ = carry
            return (k < _ETA_ROUNDS) & ~jnp.all(inside)

        def body(carry):
            k, shift, eta, inside, move = carry
            shift = shift + move  # rows inside have move 0
            t = self._trace({**values, name: f + shift}, model_args, model_kwargs)
            new_eta, new_inside, new_move = read(jnp.broadcast_to(_unwrap(t[obs]["fn"]).probs, f.shape))
            return (k + 1, shift, jnp.where(inside, eta, new_eta), inside | new_inside,
                    jnp.where(inside, 0.0, new_move))

        zero = jnp.zeros_like(f)
        _, shift, eta, _, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), zero, eta, inside, move))
        return (eta - shift).astype(jnp.float32)

    def refresh(self, state, model_args, model_kwargs):
        return state

    def get_diagnostics_str(self, state):
        rates = ", ".join(f"{s.spec.name} {float(jnp.mean(a.astype(jnp.float32))):.2f}"
                          for s, a in zip(self._sites, state.accepted))
        inner = "" if self._inner is None else self._inner.get_diagnostics_str(state.inner)
        return f"trees changed {rates}" + (f" | {inner}" if inner else "")

    def postprocess_fn(self, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        tree_names = [s.spec.trees_site for s in self._sites]
        tree_names += [s.spec.name for s in self._sites if s.spec.leaf_values]
        tree_names += [n for s in self._sites if s.spec.dart is not None for n in _sparse_names(s.spec)]
        packed = {s.spec.trees_site for s in self._sites}

        def fn(z):
            trees = {k: z[k] for k in tree_names}
            rest = {k: v for k, v in z.items() if k not in trees}
            constrained = {} if self._inner is None else self._inner.get_constrain_fn(model_args, model_kwargs)(rest)
            values = {**trees, **constrained}
            t = trace(substitute(seed(self._model, 0), data=values)).get_trace(*model_args, **model_kwargs)
            out = {**values, **{k: s["value"] for k, s in t.items() if s["type"] == "deterministic"}}
            return {k: v for k, v in out.items() if k not in packed}  # in the extra field "packed_trees"

        return fn


def _sparse_names(spec: TreeSiteSpec) -> tuple[str, str]:
    """The sample names of a sparse site's split probabilities (F,) and concentration ()."""
    return f"{spec.name}_split_probs", f"{spec.name}_sparse_theta"


def _finite_derivatives(fn, step: float = _FD_STEP):
    """``fn`` ``f (n,) -> (K,)`` (terms whose sum is the log density) with the same values, whose
    sum's gradient and Hessian-vector products are made finite (the tangent of the output is
    carried by its first term: the sweep differentiates only the sum).  A model's float32 log density can have finite values and gradient but an
    infinite or NaN second derivative (``log Phi(eta)`` through ``Bernoulli(probs=norm.cdf(eta))``
    below ``eta ~ -10``, where ``Phi'(eta)**2`` underflows); the MH sweep's Laplace proposal
    (:mod:`bdtree_jax.kernels.tree_mh`) built from it is then NaN, never accepted, and the tree
    never moves.  Where the product ``h = H t`` (n,) is not finite it is replaced by the central
    difference of the gradient along ``t``, ``(g(f + step t) - g(f - step t)) / (2 step)``
    (computed only when some entry needs it, except under ``vmap``), and whatever is still not
    finite, in ``g`` or ``h``, by 0 (the prior's curvature there).  The proposal stays a function
    of the tree and the other trees' fit alone, the same in both directions of a move, so the
    sweep stays exact; finite derivatives are returned unchanged (draws of models with finite
    derivatives are bit-identical)."""
    grad = jax.grad(lambda f: jnp.sum(fn(f)))

    def finite(a):
        return jnp.where(jnp.isfinite(a), a, 0.0)

    @jax.custom_jvp
    def finite_grad(f):
        return finite(grad(f))

    @finite_grad.defjvp
    def _(primals, tangents):
        (f,), (t,) = primals, tangents
        g, h = jax.jvp(grad, (f,), (t,))
        bad = ~jnp.isfinite(h)
        h = jax.lax.cond(jnp.any(bad),
                         lambda: jnp.where(bad, (grad(f + step * t) - grad(f - step * t)) / (2.0 * step), h),
                         lambda: h)
        return finite(g), finite(h)

    @jax.custom_jvp
    def out(f):
        return fn(f)

    @out.defjvp
    def _(primals, tangents):
        (f,), (t,) = primals, tangents
        terms = fn(f)
        return terms, jnp.zeros_like(terms).at[0].set(jnp.vdot(finite_grad(f), t))

    return out


def _mh_config(spec: TreeSiteSpec) -> tree_mh.TreeMHConfig:
    # one tree (cart): two Newton steps raised the structure acceptance from 0.35 to 0.48 in the
    # enumeration tests of tests/test_tree_mh.py, and CGM98's change and swap moves let it move
    # between good trees without pruning back through a stump; an ensemble's trees each explain
    # little: one Newton step and BART's grow/prune (no whole-tree re-score per tree)
    one = spec.kind == "cart"
    return tree_mh.TreeMHConfig(max_depth=spec.config.max_depth, min_leaf_size=spec.config.min_leaf_size,
                                newton_steps=2 if one else 1,
                                move_probs=tree_mh.CGM_MOVES if one else tree_mh.GROW_PRUNE_MOVES)


def _structure_step(key, state: bart_kernel.BARTState, spec: TreeSiteSpec, values, log_density_fn):
    """One grow/prune Metropolis–Hastings proposal on the structure of a ``cart(...,
    leaf_values=False)`` tree against the model's log density (the model's leaf parameters fixed)."""
    config = cgm.CGMConfig(spec.config.max_depth, spec.config.min_leaf_size, (0.5, 0.5, 0.0, 0.0))
    tree_data = spec.problem.data.tree_data
    one = jax.tree.map(lambda a: a[0], state.trees)
    u = jax.random.uniform(key, (5,))
    prop = tree_mh.propose_structure(u[:4], one, tree_data, config)
    new_value = encode_trees(prop.tree, jnp.zeros(prop.tree.is_split.shape, jnp.float32), spec.thresholds, False)
    # the terms' differences summed (tree_mh.log_lik_change), not two float32 totals differenced
    d_log_density = tree_mh.log_lik_change(log_density_fn({**values, spec.trees_site: new_value}),
                                           log_density_fn(values))
    accept = prop.possible & (jnp.log(u[4]) < mh_log_ratio(d_log_density, prop.d_log_prior, prop.log_q_ratio))
    one = tree_mh.accept_structure(one, prop, accept)
    trees = jax.tree.map(lambda a: a[None], one)
    return state._replace(trees=trees, leaf_values=jnp.zeros_like(state.leaf_values),
                          can_split=bart_kernel._can_split(trees, spec.problem.data)), accept[None]

