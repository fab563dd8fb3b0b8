"""Sampling kernels, one module per algorithm."""

from . import cgm
from .base import SamplingAlgorithm

__all__ = ["cgm", "SamplingAlgorithm"]
