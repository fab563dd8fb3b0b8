"""ArviZ construction that works with ArviZ 0.2x (InferenceData) and 1.x (DataTree)."""

from __future__ import annotations

import numpy as np

__all__ = ["make_inference_data"]


def make_inference_data(groups: dict, dims: dict | None = None):
    """Build ArviZ data from ``{group: {var: array}}``; (chain, draw) leading axes except
    ``observed_data``."""
    import arviz as az

    dims = dims or {}
    coords = {}
    for group in groups.values():
        for name, arr in group.items():
            if name in dims:
                coords.setdefault(dims[name][0], np.arange(np.shape(arr)[-1]))
    major = int(str(getattr(az, "__version__", "0")).split(".")[0])
    if major >= 1:
        return az.from_dict(groups, coords=coords, dims=dims)
    return az.from_dict(**groups, coords=coords, dims=dims)
