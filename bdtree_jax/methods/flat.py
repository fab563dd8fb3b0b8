"""Methods by name, and the flat keywords of earlier versions mapped onto method objects.

Before method objects, a method's options were keywords of :func:`~bdtree_jax.sample` and of the
estimators (``proposal=``, ``num_particles=``, ``num_temperatures=`` ...).  :func:`from_flat` maps
them onto the method's object and a :class:`~bdtree_jax.methods.Tempering`; every option is a field
of its method's class, so the table of keywords is the classes' fields (one source of truth).
"""

from __future__ import annotations

import dataclasses
from functools import partial

from .._renamed import RENAMED, warn_renamed
from .base import Method, Tempering
from .cgm import CGM
from .pcfg import PCFG
from .pg import PG
from .rjhmc import RJHMC
from .smc import SMC
from .wu import WU

__all__ = ["METHODS", "MCMC_METHODS", "TEMPERING_OPTIONS", "method_from_name", "method_options", "from_flat",
           "warn_deprecated"]

#: Method objects for each ``method=`` name.
_BY_NAME = {"cgm": CGM, "hmc-df": partial(RJHMC, kind="df"), "hmc-dfi": partial(RJHMC, kind="dfi"), "pcfg": PCFG,
            "smc": SMC, "pg": PG, "wu": WU}
#: The methods' names, ``method=`` as a string.
METHODS = tuple(_BY_NAME)
#: The methods that support tempering.
MCMC_METHODS = tuple(name for name in METHODS if _BY_NAME[name]().tempers)
#: The flat keywords of :class:`Tempering`.
TEMPERING_OPTIONS = tuple(f.name for f in dataclasses.fields(Tempering))


def method_from_name(method, where: str = "") -> Method:
    """``method`` as an object: a name of :data:`METHODS` gives its default object; a
    :class:`Method` is returned as it is."""
    if isinstance(method, Method):
        return method
    if isinstance(method, str) and method in _BY_NAME:
        return _BY_NAME[method]()
    raise ValueError(f"{where}unknown method {method!r}; available: {METHODS} or a method object "
                     "(bd.CGM(...), bd.RJHMC(...), bd.PCFG(...), bd.SMC(...), bd.PG(...), bd.WU(...)).")


def method_options() -> dict:
    """Every method option, ``{keyword: names of the methods that have it}`` (RJHMC's ``kind`` is
    part of its names)."""
    owners: dict = {}
    for name in METHODS:
        for f in dataclasses.fields(_BY_NAME[name]()):
            if f.name != "kind":
                owners.setdefault(f.name, []).append(name)
    return owners


def _defaults(names: list, key: str) -> list:
    return [getattr(_BY_NAME[n](), key) for n in names]


def _spelling(method: Method, key: str, value) -> str:
    """The new spelling of the flat keyword ``key=value`` for ``method``."""
    kind = f"kind={method.kind!r}, " if isinstance(method, RJHMC) else ""
    return f"method=bd.{type(method).__name__}({kind}{key}={value!r})"


def _owners_text(names: list) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def from_flat(method, options: dict, *, where: str = ""):
    """Map flat method keywords onto a method object and a :class:`Tempering`.

    Parameters
    ----------
    method : a name of :data:`METHODS` or a :class:`Method`.
    options : dict of keywords: method options (``proposal``, ``num_particles``,
        ``num_local_steps`` ...: the fields of the method classes, or their earlier names of
        :data:`~bdtree_jax._renamed.RENAMED`), tempering options (``num_temperatures``,
        ``delta_t``) and anything else (prior, likelihood or run options, returned untouched).  A method
        option of another method raises a ``ValueError`` naming it and the method, unless it is
        None or every owner's default (a config that spells out defaults stays valid).  With
        ``method="pcfg"``, ``max_depth=None`` becomes ``PCFG(unbounded=True)``.
    where : prefix of error messages (e.g. ``"sample: "``).

    Returns
    -------
    method : Method, ``method`` with the options set (``dataclasses.replace`` of an object).
    tempering : Tempering, or None when no tempering option was given.
    rest : dict of the options that are not a method's or tempering's.
    moved : list of ``(keyword, new spelling)`` for every option mapped, e.g.
        ``("proposal", "method=bd.CGM(proposal='regrow')")`` (an earlier name: ``("n_local",
        "method=bd.WU(num_local_steps=5)")``).
    """
    base = method_from_name(method, where)
    own = {f.name for f in dataclasses.fields(base)} - {"kind"}
    owners = method_options()
    chosen, temper, rest, moved = {}, {}, {}, []
    given = {}  # {option: the keyword it was given as}
    for old, value in options.items():
        new = RENAMED.get(old)
        key = new if new in owners or new in TEMPERING_OPTIONS else old
        if key in given:
            raise ValueError(f"{where}give {key}= or its deprecated spelling {given[key]}=, not both.")
        given[key] = old
        if key in TEMPERING_OPTIONS:
            default = getattr(Tempering(), key)
            if base.tempers:
                temper[key] = value
            elif value is not None and value != default:
                raise ValueError(f"{where}{key} is an option of method={_owners_text(list(MCMC_METHODS))}; "
                                 f"method={base.name!r} does not use it.")
        elif key in own:
            chosen[key] = value
        elif key in owners:
            if value is not None and not all(_is_default(value, d) for d in _defaults(owners[key], key)):
                raise ValueError(f"{where}{key} is an option of method={_owners_text(owners[key])}; "
                                 f"method={base.name!r} does not use it.")
        elif key == "max_depth" and value is None and isinstance(base, PCFG):
            chosen["unbounded"] = True
        else:
            rest[key] = value
    try:
        method = dataclasses.replace(base, **chosen) if chosen else base
        tempering = Tempering(**{k: v for k, v in temper.items() if v is not None}) if temper else None
    except (ValueError, TypeError) as e:
        raise ValueError(where + str(e)) from None
    moved += [("max_depth" if k == "unbounded" else given[k], _spelling(method, k, v)) for k, v in chosen.items()]
    moved += [(given[k], f"tempering=bd.Tempering({k}={v!r})") for k, v in temper.items()]
    return method, tempering, rest, moved


def _is_default(value, default) -> bool:
    try:
        return bool(value == default)
    except (ValueError, TypeError):  # e.g. an array compared with a tuple
        return False


def warn_deprecated(moved: list, stacklevel: int = 3) -> None:
    """One ``DeprecationWarning`` per ``(keyword, new spelling)`` of :func:`from_flat`'s ``moved``."""
    for keyword, spelling in moved:
        warn_renamed(f"{keyword}=", spelling, stacklevel=stacklevel)
