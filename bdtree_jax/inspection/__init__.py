"""Inspection of fitted estimators: partial dependence and ICE curves with credible bands,
variable importance (split inclusion, permutation importance on posterior draws) and their plots
(docs/inspection.md)."""

from .importance import VariableImportance, permutation_importance, split_inclusion
from .partial_dependence import PartialDependence, partial_dependence
from .plot import plot_partial_dependence, plot_variable_importance

__all__ = ["PartialDependence", "VariableImportance", "partial_dependence", "permutation_importance",
           "plot_partial_dependence", "plot_variable_importance", "split_inclusion"]
