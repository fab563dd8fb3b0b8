"""Shared type aliases (shapes go in docstrings and field comments)."""

import jax

Array = jax.Array
ArrayLike = jax.typing.ArrayLike
PRNGKey = jax.Array
