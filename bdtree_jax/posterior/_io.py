"""Saving and loading posteriors (every posterior class inherits :class:`Saveable`), in the
library's file format (:mod:`bdtree_jax._files`: an ``.npz`` of arrays plus a JSON header, read
without running code).  Pickles of bdtree_jax 0.1 are read only with ``allow_pickle=True``."""

from __future__ import annotations

import os
import pickle
import warnings

from .._files import BdtreeFileError, PickleFileWarning, read_file, write_file
from ..tree import make_tree

_REMEDY = "Re-run the fit and save its posterior again (or ask whoever sent the file for a new copy)."


class Saveable:
    """``save`` and ``load`` of a posterior dataclass (its fields; private caches are not saved)."""

    def save(self, path) -> None:
        """Write the posterior to the file ``path``: an ``.npz`` of its arrays with a JSON header,
        which :meth:`load` reads without running code (``docs/files.md``).  Written to a temporary file and renamed, so an interrupted save
        leaves any previous file at ``path`` intact."""
        write_file(path, "posterior", self)

    @classmethod
    def load(cls, path, *, allow_pickle: bool = False):
        """The posterior saved at ``path`` by :meth:`save` (of this class or a subclass of it).

        Raises :class:`~bdtree_jax.BdtreeFileError` (a ``ValueError``) naming the file when it is
        empty, truncated, damaged, written by another program, a checkpoint or an ArviZ netCDF
        file (the message says so and names :func:`bdtree_jax.load`, which reads both), of a
        newer format version, declares more than it holds, fails its checksum, holds a value its
        class refuses, or holds another posterior class.  Files of format version 1 (bdtree_jax
        before issue #38) load as before (``docs/files.md``).  A pickle (the format of
        bdtree_jax 0.1) is read only with ``allow_pickle=True``, with a
        :class:`~bdtree_jax.PickleFileWarning`: unpickling runs any code the file holds, so do
        it only for files you made yourself, then :meth:`save` them again.
        """
        path = os.fspath(path)
        with open(path, "rb") as fh:
            pickled = fh.read(1) == b"\x80"
        if pickled:
            return _load_pickle(cls, path, allow_pickle)
        obj = read_file(path, "posterior", remedy=_REMEDY)
        if not isinstance(obj, cls):
            raise BdtreeFileError(f"{path}: holds a {type(obj).__name__}, not a {cls.__name__}: load it with "
                                  f"{type(obj).__name__}.load.")
        return obj


def _load_pickle(cls, path: str, allow_pickle: bool):
    """A posterior pickled by bdtree_jax 0.1's ``save`` (a dict of its fields, trees as a tuple)."""
    if not allow_pickle:
        raise BdtreeFileError(
            f"{path}: is a pickled posterior (the format of bdtree_jax 0.1). Reading a pickle can run any code it "
            f"holds, so load() refuses it: if you made the file yourself, load it with allow_pickle=True and save "
            f"it again to convert it; otherwise re-run the fit.")
    warnings.warn(f"{path}: reading a pickled posterior (allow_pickle=True); unpickling runs any code the file holds. "
                  f"Save it again to convert it to the current format.", PickleFileWarning, stacklevel=3)
    with open(path, "rb") as fh:
        state = pickle.load(fh)
    if not isinstance(state, dict):
        raise BdtreeFileError(f"{path}: the pickle holds a {type(state).__name__}, not a saved posterior. {_REMEDY}")
    if type(state.get("trees")) is tuple:  # bdtree_jax 0.1 saved the Tree's fields as a plain tuple
        state["trees"] = make_tree(*state["trees"])
    return cls(**state)
