"""Checkpoints of :mod:`bdtree_jax.driver`'s runs: device pytrees to and from host numpy (PRNG
keys as their raw key data), and the one reader and writer of a checkpoint file (a run's
identity, how far it got, its results and the states to go on from), in the library's file
format (:mod:`bdtree_jax._files`: no code runs when it is read; written to a temporary file and
renamed, so an interrupted write leaves the previous checkpoint)."""

from __future__ import annotations

import hashlib
import logging
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._files import read_file, write_file

#: resumes are logged under the driver's name (the runs that checkpoint are the driver's)
_LOG = logging.getLogger("bdtree_jax.driver")


class HostKey(NamedTuple):
    """A typed PRNG key array on the host: its implementation's name and its raw key data."""

    impl: str
    data: np.ndarray


def _host(x) -> np.ndarray:
    """A device array as one numpy array on this process (gathered from every process when it
    spans several, ``jax.distributed``)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_host(tree):
    """A pytree with numpy leaves (typed PRNG keys, e.g. NUTS's, as :class:`HostKey`)."""
    return jax.tree.map(
        lambda x: HostKey(str(jax.random.key_impl(x)), _host(jax.random.key_data(x))) if _is_key(x) else _host(x),
        tree,
    )


def _from_host(saved, asarray=jnp.asarray):
    """The inverse of :func:`_to_host`; other leaves go through ``asarray`` (``np.asarray`` keeps
    them on the host with their dtype)."""
    return jax.tree.map(
        lambda x: jax.random.wrap_key_data(jnp.asarray(x.data), impl=x.impl) if isinstance(x, HostKey) else asarray(x),
        saved,
        is_leaf=lambda x: isinstance(x, HostKey),
    )


_REMEDY = "Delete it to start the run over (the CLI: --fresh)."


def _read_checkpoint(path, ident) -> dict | None:
    """The checkpoint at ``path`` if it exists and belongs to the run ``ident``, else None; a
    :class:`~bdtree_jax._files.BdtreeFileError` naming ``path`` when it is not a readable
    checkpoint."""
    if path is None or not os.path.exists(path):
        return None
    saved = read_file(path, "checkpoint", remedy=_REMEDY)
    return saved if isinstance(saved, dict) and saved.get("ident") == ident else None


def checkpoint_ident(path) -> str | None:
    """The identity of the run the checkpoint at ``path`` belongs to; None if there is no file."""
    if path is None or not os.path.exists(path):
        return None
    saved = read_file(path, "checkpoint", remedy=_REMEDY)
    return saved.get("ident") if isinstance(saved, dict) else None


def _write_checkpoint(path, ident, start, chunks, states) -> None:
    """The one writer of checkpoints: ``start`` units done (iterations of :func:`run_chains`,
    chains of :func:`run_independent`), their results ``chunks`` and the states to go on from.
    With several processes (``jax.distributed``) every process gathers the states and process 0
    writes the file."""
    states = _to_host(states)
    if jax.process_index() != 0:
        return
    write_file(path, "checkpoint", dict(ident=ident, start=start, chunks=chunks, states=states))


def _fingerprint(*parts) -> str:
    """A sha256 hex digest of ``parts`` (arrays by dtype, shape and bytes; anything else by ``repr``)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, (np.ndarray, jax.Array)):
            a = np.asarray(p)
            h.update(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
        else:
            h.update(repr(p).encode())
    return h.hexdigest()


def run_ident(fingerprint, key_data, num_chains: int, num_iterations: int, data, num_warmup: int = 0, thin: int = 1,
              data_shards: int = 1) -> str:
    """The identity of a :func:`~bdtree_jax.driver.run_chains` run, which its checkpoints carry (a file is resumed
    only by the run it belongs to); ``key_data``: ``jax.random.key_data`` of the run's key."""
    extra = () if (thin, data_shards) == (1, 1) else (("thin", thin, num_warmup), ("data_shards", data_shards))
    return _fingerprint(fingerprint, key_data, num_chains, num_iterations, *extra,
                        *jax.tree.leaves(data))


def _report_resume(checkpoint, saved, total: int, unit: str, num_chains: int) -> None:
    """Log at INFO on the logger ``"bdtree_jax.driver"`` that a run resumes from ``checkpoint``
    after ``saved["start"]`` of ``total`` units (``unit``: iterations or chains; the record's
    ``resumed_from``: a dict of these), or that the file there belongs to another run and is
    started over (``saved`` None; ``resumed_from`` None); nothing when there is no file."""
    if checkpoint is None or (saved is None and not os.path.exists(checkpoint)):
        return
    if saved is None:
        return _LOG.info("checkpoint %s belongs to another run (other options, data or seed); starting over and "
                         "overwriting it", os.fspath(checkpoint), extra={"resumed_from": None})
    done = int(saved["start"])
    where = (f"at iteration {done} of {total} ({num_chains} chains)" if unit == "iteration"
             else f"with {done} of {total} chains done")
    _LOG.info("resuming from checkpoint %s %s", os.fspath(checkpoint), where,
              extra={"resumed_from": dict(checkpoint=os.fspath(checkpoint), done=done, total=int(total), unit=unit,
                                          num_chains=int(num_chains))})
