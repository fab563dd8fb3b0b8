"""Sampling kernels, one module per algorithm."""

from . import cgm, edit, regrow, rjhmc, tempering
from .base import SamplingAlgorithm

__all__ = ["cgm", "edit", "regrow", "rjhmc", "tempering", "SamplingAlgorithm"]
