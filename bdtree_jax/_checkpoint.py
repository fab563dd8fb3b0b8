"""Checkpoints of :mod:`bdtree_jax.driver`'s runs: device pytrees to and from host numpy (PRNG
keys as their raw key data), and the one reader and writer of a checkpoint file (a run's
identity, how far it got, its results and the states to go on from; written to a temporary file
and renamed, so an interrupted write leaves the previous checkpoint)."""

from __future__ import annotations

import os
import pickle

import jax
import jax.numpy as jnp
import numpy as np


def _host(x) -> np.ndarray:
    """A device array as one numpy array on this process (gathered from every process when it
    spans several, ``jax.distributed``)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _to_host(tree):
    """A pytree as picklable numpy (typed PRNG keys, e.g. NUTS's, as their raw key data)."""
    leaves, treedef = jax.tree.flatten(tree)
    out = []
    for leaf in leaves:
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            out.append(("prng_key", str(jax.random.key_impl(leaf)), _host(jax.random.key_data(leaf))))
        else:
            out.append(_host(leaf))
    return treedef, out


def _from_host(saved, asarray=jnp.asarray):
    """The inverse of :func:`_to_host`; other leaves go through ``asarray`` (``np.asarray`` keeps
    them on the host with their dtype)."""
    treedef, leaves = saved
    restored = [
        jax.random.wrap_key_data(jnp.asarray(x[2]), impl=x[1]) if isinstance(x, tuple) else asarray(x)
        for x in leaves
    ]
    return jax.tree.unflatten(treedef, restored)


def _read_checkpoint(path, ident) -> dict | None:
    """The checkpoint at ``path`` if it exists and belongs to the run ``ident``, else None."""
    if path is None or not os.path.exists(path):
        return None
    with open(path, "rb") as fh:
        saved = pickle.load(fh)
    return saved if saved.get("ident") == ident else None


def _write_checkpoint(path, ident, start, chunks, states) -> None:
    """The one writer of checkpoints: ``start`` units done (iterations of :func:`run_chains`,
    chains of :func:`run_independent`), their results ``chunks`` and the states to go on from.
    With several processes (``jax.distributed``) every process gathers the states and process 0
    writes the file."""
    states = _to_host(states)
    if jax.process_index() != 0:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(
            dict(ident=ident, start=start, chunks=chunks, states=states),
            fh,
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    os.replace(tmp, path)
