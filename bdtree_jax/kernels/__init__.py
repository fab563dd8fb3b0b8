"""Sampling kernels, one module per algorithm."""

from . import cgm, rjhmc
from .base import SamplingAlgorithm

__all__ = ["cgm", "rjhmc", "SamplingAlgorithm"]
