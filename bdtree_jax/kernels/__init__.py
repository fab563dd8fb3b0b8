"""Sampling kernels, one module per algorithm."""

from . import cgm, edit, perturb, pg, regrow, rjhmc, smc, tempering, wu
from .base import SamplingAlgorithm

__all__ = ["cgm", "edit", "perturb", "pg", "regrow", "rjhmc", "smc", "tempering", "wu", "SamplingAlgorithm"]
