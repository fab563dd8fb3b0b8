"""ArviZ construction that works with ArviZ 0.2x (InferenceData) and 1.x (DataTree).

ArviZ 1.x (``arviz`` 1.x on top of ``arviz-base``/``arviz-stats``/``arviz-plots``) replaced
``InferenceData`` by :class:`xarray.DataTree` and changed ``from_dict``: 0.2x takes one keyword
argument per group (``from_dict(posterior=..., sample_stats=...)``), 1.x takes the nested
dictionary as its first argument (``from_dict({"posterior": ..., ...})``).  Both return an object
whose groups are reached as ``data["posterior"]`` / ``data.posterior`` and that ``az.summary``,
``az.rhat``, ``az.loo`` and ``az.plot_trace`` of the same ArviZ accept.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["CODES", "arviz_major_version", "make_inference_data", "summary_table"]


def _import_arviz():
    """``import arviz`` without ArviZ 0.2x's once-a-day notice of its coming 1.x refactor: a
    ``FutureWarning`` that ``arviz/__init__`` raises on import, about no call of ours (ArviZ 1.x
    has none).  Only that message from that module is ignored."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor", category=FutureWarning,
                                module=r"arviz$")
        import arviz
    return arviz


# Groups without the (chain, draw) sample dimensions (ArviZ convention).
_NO_SAMPLE_DIMS = ("observed_data", "constant_data", "predictions_constant_data")


def arviz_major_version(version: str | None = None) -> int:
    """Major version of the installed ArviZ (or of the version string `version`)."""
    if version is None:
        version = _import_arviz().__version__
    match = re.match(r"\s*(\d+)", str(version))
    if match is None:
        raise RuntimeError(f"cannot parse the ArviZ version {version!r}")
    return int(match.group(1))


def _coords(groups: dict, dims: dict) -> dict:
    """Integer coordinates ``0..size-1`` for every named (non-sample) dimension, checking that
    every variable's event shape matches its ``dims`` and that a dimension has one size."""
    coords: dict = {}
    for group, variables in groups.items():
        n_sample = 0 if group in _NO_SAMPLE_DIMS else 2
        for name, arr in variables.items():
            if arr.ndim < n_sample:
                raise ValueError(
                    f"{group}/{name}: expected leading (chain, draw) axes; got shape {arr.shape}"
                )
            event_shape = arr.shape[n_sample:]
            names = dims.get(name)
            if names is None:
                continue
            if len(names) != len(event_shape):
                raise ValueError(
                    f"{group}/{name}: dims {names} do not match the event shape {event_shape}"
                )
            for dim, size in zip(names, event_shape):
                if dim in coords and len(coords[dim]) != size:
                    raise ValueError(
                        f"dimension {dim!r} has size {len(coords[dim])} and {size} ({group}/{name})"
                    )
                coords.setdefault(dim, np.arange(size))
    return coords


def make_inference_data(groups: dict, dims: dict | None = None):
    """Build ArviZ data from ``{group: {var: array}}``.

    Every group except ``observed_data``/``constant_data`` has leading ``(chain, draw)`` axes.
    ``dims`` maps a variable name (in any group) to the names of its trailing dimensions; these
    get integer coordinates starting at 0.  Returns an ``arviz.InferenceData`` with ArviZ 0.x
    and an ``xarray.DataTree`` with ArviZ >= 1.
    """
    az = _import_arviz()
    dims = {name: list(d) for name, d in (dims or {}).items()}
    groups = {
        group: {name: np.asarray(arr) for name, arr in variables.items()}
        for group, variables in groups.items()
        if variables
    }
    coords = _coords(groups, dims)
    if arviz_major_version(az.__version__) >= 1:
        # arviz_base.from_dict(data, *, coords, dims, ...) -> xarray.DataTree
        return az.from_dict(groups, coords=coords, dims=dims)
    # arviz 0.x: from_dict(posterior=..., sample_stats=..., ..., coords, dims) -> InferenceData
    return az.from_dict(**groups, coords=coords, dims=dims)


#: Per-draw statistics that are codes (the move proposed, the rungs of a swap, the particle
#: chosen, the restructure's kind), not quantities: :func:`summary_table` leaves them out.
CODES = ("move", "swap_pair", "chosen", "restructure_kind")


def summary_table(stats: dict, num_chains: int, num_draws: int, **kwargs):
    """``az.summary`` of the per-draw scalars in ``stats``: a pandas DataFrame with one row per
    quantity (every ``(num_chains, num_draws)`` entry, in ``stats``' order, but the codes of
    :data:`CODES`; booleans as 0/1, so their mean is a rate) and ArviZ's columns: ``mean``,
    ``sd``, a credible interval (ArviZ 0.2x: ``hdi_3%``, ``hdi_97%``; 1.x: ``eti89_lb``,
    ``eti89_ub``), ``mcse_mean``, ``mcse_sd``, ``ess_bulk``, ``ess_tail`` and ``r_hat``.
    ``kwargs`` go to ``az.summary`` (``round_to``, 0.2x's ``hdi_prob``, 1.x's ``ci_prob`` ...).
    A ``ValueError`` when there are no draws."""
    if num_draws < 1:
        raise ValueError("summary needs draws; this posterior has none (num_samples=0).")
    rows = {name: np.asarray(v, np.float64) for name, v in stats.items()
            if name not in CODES and np.shape(v) == (num_chains, num_draws)
            and np.asarray(v).dtype.kind in "biuf"}
    az = _import_arviz()
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant quantity: NaN r_hat and mcse_sd
        return az.summary(make_inference_data({"posterior": rows}), **kwargs)
