"""Old spellings that keep working: keywords and values renamed, each use a ``DeprecationWarning``.

Counts are spelled ``num_*`` everywhere (NumPyro's convention, which the run options already
used): :data:`RENAMED` maps every earlier ``n_*`` keyword of the public API to its new name.
:func:`renamed` translates a keyword mapping, :func:`accepts_renamed` makes a function or class
accept the old keywords of its own arguments (and, for a class, read the old attribute names),
:func:`renamed_value` maps an option's earlier values (``chain_method``:
:data:`CHAIN_METHODS_RENAMED`).
"""

from __future__ import annotations

import functools
import warnings

__all__ = ["CHAIN_METHODS_RENAMED", "RENAMED", "accepts_renamed", "renamed", "renamed_value", "warn_renamed"]

#: ``{old keyword: new keyword}`` of every renamed public count.
RENAMED = {
    "n_temperatures": "num_temperatures",  # Tempering
    "n_local": "num_local_steps",  # WU
    "n_islands": "num_islands",  # SMC
    "n_buckets": "num_buckets",  # PCFG
    "n_trees": "num_trees",  # the BART estimators, bdtree_jax.numpyro.bart
    "n_features": "num_features",  # datasets.make_xor, make_hypercube
    "n_relevant": "num_relevant",  # datasets.make_xor
    "n_per_vertex": "num_per_vertex",  # datasets.make_hypercube
}

#: ``chain_method``'s earlier values, ``{old: new}``: NumPyro's ``"sequential"`` and
#: ``"vectorized"`` run every chain on one device, ours on each of the run's devices.
CHAIN_METHODS_RENAMED = {"sequential": "loop", "vectorized": "vmap"}


def warn_renamed(old: str, new: str, where: str = "", stacklevel: int = 2) -> None:
    """The one ``DeprecationWarning`` of a renamed keyword, key or value: ``"{where}old is
    deprecated; use new"``; ``stacklevel`` as ``warnings.warn``'s in the caller."""
    warnings.warn(f"{where}{old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel + 1)


def renamed(options: dict, names=RENAMED, *, where: str = "", stacklevel: int = 2, suffix: str = "=") -> dict:
    """``options`` with every old keyword of ``names`` (``{old: new}``) replaced by its new one,
    each with a ``DeprecationWarning`` naming it (``stacklevel`` as ``warnings.warn``'s in the
    caller; the names end with ``suffix``: "=" for keywords, "" for a config's keys);
    ``options`` itself is not changed.

    Raises ``TypeError`` when a keyword is given in both spellings.
    """
    out = dict(options)
    for old in [k for k in options if k in names]:
        new = names[old]
        if new in options:
            raise TypeError(f"{where}give {new}{suffix} or its deprecated spelling {old}{suffix}, not both.")
        out[new] = out.pop(old)
        warn_renamed(f"{old}{suffix}", f"{new}{suffix}", where, stacklevel + 1)
    return out


def renamed_value(name: str, value, names: dict, *, where: str = "", stacklevel: int = 2):
    """``value`` of the option ``name``, or its new spelling when it is an old value of ``names``
    (``{old: new}``), with a ``DeprecationWarning`` naming both."""
    if isinstance(value, str) and value in names:
        warn_renamed(f"{name}={value!r}", f"{name}={names[value]!r}", where, stacklevel + 1)
        return names[value]
    return value


def _old_attribute(old: str, new: str):
    def get(self):
        warn_renamed(old, new, f"{type(self).__name__}.", 2)
        return getattr(self, new)

    return property(get, doc=f"Deprecated: {new}.")


def accepts_renamed(*old: str):
    """Decorator: the function (or class) also takes the keywords ``old`` (names of
    :data:`RENAMED`) for their new names, each with a ``DeprecationWarning``.  A class's
    ``__init__`` is wrapped (its signature, which ``inspect`` and scikit-learn read, stays the new
    one) and reading an old attribute name returns the new attribute's value, with the warning."""
    names = {k: RENAMED[k] for k in old}

    def wrap(fn, where):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **renamed(kwargs, names, where=where))

        return wrapper

    def decorate(obj):
        if not isinstance(obj, type):
            return wrap(obj, f"{obj.__name__}: ")
        obj.__init__ = wrap(obj.__init__, f"{obj.__name__}: ")
        for k, v in names.items():
            setattr(obj, k, _old_attribute(k, v))
        return obj

    return decorate
