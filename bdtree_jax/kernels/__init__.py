"""Sampling kernels, one module per algorithm."""

from . import cgm, edit, pg, regrow, rjhmc, smc, tempering, wu
from .base import SamplingAlgorithm

__all__ = ["cgm", "edit", "pg", "regrow", "rjhmc", "smc", "tempering", "wu", "SamplingAlgorithm"]
