"""The posterior layer: draws plus diagnostics, prediction, ArviZ export and files, for every
method (hard trees, soft trees, BART)."""

from .bart import BARTClassifierPosterior, BARTPosterior, bart_posterior_from_traces
from .bart_multiclass import BARTMulticlassPosterior
from .bart_poisson import BARTPoissonPosterior
from .bart_survival import BARTSurvivalPosterior
from .bart_variance import BARTVariancePosterior
from .hard import PCFGPosterior, Posterior, SMCPosterior, posterior_from_traces
from .soft import SoftTreePosterior, soft_posterior_from_traces

__all__ = ["BARTClassifierPosterior", "BARTMulticlassPosterior", "BARTPoissonPosterior", "BARTPosterior", "BARTSurvivalPosterior", "BARTVariancePosterior", "PCFGPosterior", "Posterior", "SMCPosterior",
           "SoftTreePosterior", "bart_posterior_from_traces", "posterior_from_traces", "soft_posterior_from_traces"]
