""":class:`TreeGibbs`: the NumPyro kernel that updates every :func:`~bdtree_jax.numpyro.bart` and
:func:`~bdtree_jax.numpyro.cart` site of a model given the other sites, then runs the inner
NUTS/HMC kernel on the continuous sites given the trees: ``MCMC(TreeGibbs(NUTS(model)), ...)``.

Which update a tree site gets is decided once, on the host, by tracing the model at a prototype
point and moving the site's function values ``f`` (n,) by a random ``delta``: the sites whose
log-density changes are the ones ``f`` enters.

* ``"normal"``: ``f`` enters exactly one site, an observed ``Normal(loc, scale)`` (n,) with
  ``loc(f + delta) = loc(f) + delta`` and one scalar ``scale``.  Bayesian backfitting on the
  working residual ``y - (loc - f)``, leaf values integrated out for the structure move and then
  drawn from their conjugate normal conditional, with ``sigma = scale`` as the model has it now
  (a site of NUTS, a constant, ...): the sweep of :class:`~bdtree_jax.estimators.BARTRegressor`
  (:mod:`bdtree_jax.kernels.bart`; for ``cart``, one CGM98 proposal among grow, prune, change
  and swap).
* ``"probit"``: the one site ``f`` enters is an observed ``Bernoulli(probs)`` with
  ``Phi^-1(probs)`` moving by ``delta``.  Albert–Chib: latents ``z ~ N(eta, 1)`` truncated to the
  side of 0 the label says (``eta = Phi^-1(probs)``, clipped at ``probs`` in
  ``[1e-7, 1 - 1e-7]``), then backfitting on ``z - (eta - f)`` with ``sigma = 1``, as
  :class:`~bdtree_jax.estimators.BARTClassifier`; the latents are not kept.
* ``"mh"``: any other way ``f`` enters the model (Poisson, logistic, Student-t, a scale, several
  sites): per tree, Metropolis–Hastings against the model's log density, a grow/prune proposal
  with every leaf value drawn from a Laplace approximation of its conditional, then a proposal
  of new leaf values alone (:mod:`bdtree_jax.kernels.tree_mh`).
* ``cart(..., leaf_values=False)`` sites (``"structure"``): grow/prune Metropolis–Hastings on the
  structure against the model's log density, the model's own leaf parameters held fixed (the new
  slots' parameters are the padding drawn from their prior, as :class:`TopologyMH` does).

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
from numpyro.infer.util import log_density

from ..kernels import bart as bart_kernel
from ..kernels import cgm, tree_mh
from ..kernels._moves import mh_log_ratio
from .sites import HardTreePrior, TreeSiteSpec, encode_trees

__all__ = ["KINDS", "TreeGibbs", "TreeGibbsState"]

KINDS = ("normal", "probit", "mh")
_PROBIT_CLIP = 1e-7


class TreeGibbsState(NamedTuple):
    """``z``: every latent site's value (the tree sites' packed trees, the inner kernel's
    unconstrained values) and each tree site's values at the rows ``name`` (n,); ``trees``: per tree site its :class:`~bdtree_jax.kernels.bart.BARTState`
    (the trees in bin codes, their leaf values and ``fit`` (n,) the sum of trees at the rows);
    ``accepted``: per tree site the (M,) trees changed in the last sweep; ``inner``: the inner
    kernel's state (None without continuous sites); ``packed_trees``: the packed trees by site
    (the extra field that ``MCMC`` collects: ``postprocess_fn`` leaves them out of the samples)."""

    z: dict
    trees: tuple
    accepted: tuple
    inner: Any
    rng_key: Any
    packed_trees: dict = {}


class _Site(NamedTuple):
    spec: TreeSiteSpec
    kind: str
    observed: str | None  # the observed site of "normal" / "probit"


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
    ``{name}_n_leaves``, ``{name}_depth``); the packed trees ``{name}_trees`` are in the extra
    field ``"packed_trees"`` (:func:`~bdtree_jax.numpyro.posterior_samples` joins them).
    """

    sample_field = "z"

    def __init__(self, inner_kernel, *, kinds: dict | None = None):
        if not isinstance(inner_kernel, HMC) or inner_kernel.model is None:
            raise ValueError("TreeGibbs: inner_kernel must be a NumPyro NUTS or HMC kernel built on a model, "
                             "e.g. TreeGibbs(NUTS(model)).")
        kinds = {} if kinds is None else dict(kinds)
        for name, kind in kinds.items():
            if kind not in KINDS:
                raise ValueError(f"TreeGibbs: kinds[{name!r}] must be one of {KINDS}; got {kind!r}.")
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
        latent = {k: s["value"] for k, s in proto.items() if s["type"] == "sample" and not s["is_observed"]}
        sites = []
        for spec in specs:
            kind, observed = ("mh", None) if not spec.leaf_values else self._detect(spec, proto, latent, model_args,
                                                                                   model_kwargs)
            forced = self._kinds.get(spec.name)
            if forced is not None and forced != kind:
                if forced != "mh":
                    raise ValueError(f"TreeGibbs: kinds[{spec.name!r}]={forced!r}, but the model is not of that form "
                                     f"(detected {kind!r}); only 'mh' can be forced.")
                kind, observed = "mh", None
            sites.append(_Site(spec, kind, observed))
        self._sites = tuple(sites)
        tree_sites = {s.spec.trees_site for s in sites}
        return {k: v for k, v in latent.items() if k not in tree_sites}

    def _detect(self, spec: TreeSiteSpec, proto, latent, model_args, model_kwargs):
        """``(kind, observed site)`` of a site with leaf values (module docstring)."""
        with jax.ensure_compile_time_eval():
            f0 = jnp.asarray(proto[spec.name]["value"])
            delta = 0.1 * jax.random.normal(jax.random.PRNGKey(1), f0.shape)

            def run(f):
                model = substitute(condition(seed(self._model, 0), data=latent), data={spec.name: f})
                t = trace(model).get_trace(*model_args, **(model_kwargs or {}))
                lp = {k: np.asarray(s["fn"].log_prob(s["value"])) for k, s in t.items() if s["type"] == "sample"}
                return t, lp

            t0, lp0 = run(f0)
            t1, lp1 = run(f0 + delta)
            moved = [k for k in lp0 if not np.allclose(lp0[k], lp1[k], rtol=1e-6, atol=1e-6)]
            if len(moved) != 1 or not t0[moved[0]]["is_observed"]:
                return "mh", None
            obs = moved[0]
            fn0, fn1 = _unwrap(t0[obs]["fn"]), _unwrap(t1[obs]["fn"])
            if np.shape(t0[obs]["value"]) != f0.shape:
                return "mh", None
            d = np.asarray(delta)
            if isinstance(fn0, dist.Normal) and type(fn1) is type(fn0):
                loc0 = np.broadcast_to(np.asarray(fn0.loc), f0.shape)
                loc1 = np.broadcast_to(np.asarray(fn1.loc), f0.shape)
                if (np.size(fn0.scale) == 1 and np.allclose(loc1 - loc0, d, atol=1e-5)
                        and np.allclose(fn0.scale, fn1.scale)):
                    return "normal", obs
            if isinstance(fn0, dist.BernoulliProbs) and type(fn1) is type(fn0):
                p0 = np.broadcast_to(np.asarray(fn0.probs, np.float64), f0.shape)
                p1 = np.broadcast_to(np.asarray(fn1.probs, np.float64), f0.shape)
                from scipy.special import ndtri as np_ndtri

                ok = (p0 > 1e-3) & (p0 < 1 - 1e-3) & (p1 > 1e-3) & (p1 < 1 - 1e-3)
                if ok.any() and np.allclose((np_ndtri(p1) - np_ndtri(p0))[ok], d[ok], atol=2e-3):
                    return "probit", obs
        return "mh", None

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
        z = self._z(trees, inner_state)
        return TreeGibbsState(z, trees, accepted, inner_state, rng_key, self._packed(z))

    def _packed(self, z) -> dict:
        return {s.spec.trees_site: z[s.spec.trees_site] for s in self._sites}

    def _z(self, trees, inner_state) -> dict:
        """The sample values: the inner sites', the packed trees and each site's values at the rows
        (the kernel's fit, so ``postprocess`` need not route every row through every tree again)."""
        return self._values(trees, {} if inner_state is None else inner_state.z)

    def sample(self, state, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        if self._vectorized:
            return jax.vmap(lambda s: self._sample_one(s, model_args, model_kwargs))(state)
        return self._sample_one(state, model_args, model_kwargs)

    def _sample_one(self, state, model_args, model_kwargs):
        rng_key, key_trees = jax.random.split(state.rng_key)
        keys = jax.random.split(key_trees, len(self._sites))
        inner_constrained = self._inner_constrained(state.inner, model_args, model_kwargs)
        trees, accepted = list(state.trees), list(state.accepted)
        for i, (site, key) in enumerate(zip(self._sites, keys)):
            values = self._values(trees, inner_constrained)
            trees[i], accepted[i] = self._update(site, key, trees[i], values, model_args, model_kwargs)
        inner_state = state.inner
        if self._inner is not None:
            kwargs = with_conditioning(model_kwargs, self._values(trees, {}))
            inner_state = self._inner.refresh(inner_state, model_args, kwargs)
            inner_state = self._inner.sample(inner_state, model_args, kwargs)
        z = self._z(trees, inner_state)
        return TreeGibbsState(z, tuple(trees), tuple(accepted), inner_state, rng_key, self._packed(z))

    def _update(self, site: _Site, key, state: bart_kernel.BARTState, values, model_args, model_kwargs):
        spec = site.spec
        data = spec.problem.data
        if not spec.leaf_values:
            return _structure_step(key, state, spec, values, lambda v: self._log_density(v, model_args, model_kwargs))
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
                probs = jnp.clip(jnp.broadcast_to(fn.probs, (n,)), _PROBIT_CLIP, 1.0 - _PROBIT_CLIP)
                eta = ndtri(probs.astype(jnp.float32))
                target = bart_kernel.draw_latents(key_latent, eta, y) - eta + state.fit
                sigma2 = jnp.float32(1.0)
            new, info = bart_kernel.step(key, state._replace(sigma2=jnp.asarray(sigma2, jnp.float32)),
                                         data._replace(y=target.astype(jnp.float32)), spec.config)
            return new, info.accepted

        def log_lik(f):
            return self._log_density({**values, spec.name: spec.offset + f}, model_args, model_kwargs)

        # the fit as carried, or every FIT_REFRESH sweeps exactly from the trees (bounded round-off)
        fit = jax.lax.cond(state.sweeps % bart_kernel.FIT_REFRESH == 0,
                           lambda: tree_mh.fit_from_trees(state.leaf_values, state.trees.leaf_id), lambda: state.fit)
        trees, leaf_values, fit, accepted, _ = tree_mh.sweep(key, state.trees, state.leaf_values, fit, log_lik,
                                                             data.tree_data, spec.tau2, _mh_config(spec))
        return state._replace(trees=trees, leaf_values=leaf_values, fit=fit, sweeps=state.sweeps + 1), accepted

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


def _mh_config(spec: TreeSiteSpec) -> tree_mh.TreeMHConfig:
    # one tree (cart): two Newton steps raised the structure acceptance from 0.35 to 0.48 in the
    # enumeration tests of tests/test_tree_mh.py; an ensemble's trees each explain little, one suffices
    return tree_mh.TreeMHConfig(max_depth=spec.config.max_depth, min_leaf_size=spec.config.min_leaf_size,
                                newton_steps=2 if spec.kind == "cart" else 1)


def _structure_step(key, state: bart_kernel.BARTState, spec: TreeSiteSpec, values, log_density_fn):
    """One grow/prune Metropolis–Hastings proposal on the structure of a ``cart(...,
    leaf_values=False)`` tree against the model's log density (the model's leaf parameters fixed)."""
    config = cgm.CGMConfig(spec.config.max_depth, spec.config.min_leaf_size, (0.5, 0.5, 0.0, 0.0))
    tree_data = spec.problem.data.tree_data
    one = jax.tree.map(lambda a: a[0], state.trees)
    u = jax.random.uniform(key, (5,))
    prop = cgm.propose(u[:4], one, tree_data, config)
    tree, leaf_id, lo, hi = cgm.apply_local(one, prop, jnp.bool_(True))
    new_value = encode_trees(tree, jnp.zeros(tree.is_split.shape, jnp.float32), spec.thresholds, False)
    d_log_density = log_density_fn({**values, spec.trees_site: new_value}) - log_density_fn(values)
    accept = prop.possible & (jnp.log(u[4]) < mh_log_ratio(d_log_density, prop.d_log_prior, prop.log_q_ratio))
    one = tree_mh.accept_structure(one, prop, accept, tree, leaf_id.astype(one.leaf_id.dtype), lo, hi)
    trees = jax.tree.map(lambda a: a[None], one)
    return state._replace(trees=trees, leaf_values=jnp.zeros_like(state.leaf_values),
                          can_split=bart_kernel._can_split(trees, spec.problem.data)), accept[None]

