"""One frozen, validated object per sampling method (the face layer).

``bd.sample(X, y, method=bd.PG(num_particles=20))`` or ``method="pg"`` for the defaults:

========================  ====================================================================
:class:`CGM`              Chipman, George & McCulloch (1998) MH over hard trees ("cgm"), with
                          prune-and-regrow, perturb and the edit prior
:class:`RJHMC`            RJHMC-Tree on soft trees ("hmc-df", "hmc-dfi")
:class:`PCFG`             BCART-PCFG: independent exact draws ("pcfg")
:class:`SMC`              top-down particle filtering ("smc")
:class:`PG`               Particle Gibbs ("pg")
:class:`WU`               Wu, Tjelmeland & West (2007)'s restructure schedule ("wu")
========================  ====================================================================

plus :class:`Tempering` (for the MCMC methods) and :class:`RunOptions` (lengths, seed, devices:
the driver's options).  Each method checks its options when it is made and its problem when it
runs (:meth:`Method.run`); :func:`from_flat` maps the flat keywords of earlier versions onto the
objects.
"""

from .base import MCMCMethod, Method, RunOptions, Tempering
from .until import Converged
from .cgm import CGM
from .flat import METHODS, from_flat, method_from_name
from .pcfg import PCFG
from .pg import PG
from .rjhmc import RJHMC
from .smc import SMC
from .wu import WU

__all__ = ["CGM", "Converged", "METHODS", "MCMCMethod", "Method", "PCFG", "PG", "RJHMC", "RunOptions", "SMC", "Tempering", "WU",
           "from_flat", "method_from_name"]
