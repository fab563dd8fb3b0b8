"""Griffe extension for the API pages: the docstrings cross-reference with Sphinx roles
(:class:`~bdtree_jax.tree.Tree`, :func:`log_tree_prior`, :attr:`title <target>`), which Markdown
would print literally.  Each role becomes an optional autorefs link: a link where the target is
on the site, plain code where it is not (no warning, so ``mkdocs build --strict`` is unaffected).
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const):`([^`]+)`")


def _replace(module_path: str):
    def one(match: re.Match) -> str:
        text = match.group(1).strip()
        titled = re.fullmatch(r"(.*?)\s*<([^>]+)>", text)
        if titled:
            title, target = titled.group(1), titled.group(2)
        else:
            target = text.lstrip("~")
            title = target.rsplit(".", 1)[-1] if text.startswith("~") else target
        target = target.lstrip("~")
        if target.startswith("."):  # relative to the docstring's package
            target = module_path.rsplit(".", 1)[0] + target
        elif not target.startswith("bdtree_jax") and "." not in target:
            target = f"{module_path}.{target}"  # a name of the docstring's own module
        return f'<autoref identifier="{target}" optional><code>{title}</code></autoref>'

    return one


class RSTRoles(griffe.Extension):
    """Rewrite Sphinx cross-reference roles in every docstring as optional autorefs."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = _ROLE.sub(_replace(obj.module.path), obj.docstring.value)
