"""Sphinx configuration: ``make docs`` builds the API reference (autodoc, from
the docstrings) and the Markdown pages (MyST) into docs/_build/html."""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)  # document this checkout, not another installed copy

import kafka_ordered  # noqa: E402

project = "kafka-ordered"
author = "kafka-ordered contributors"
copyright = "kafka-ordered contributors, Apache License 2.0"
release = kafka_ordered.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Members come from each module's __all__ (autodoc's default when it is set),
# in source order; the class docstring holds the constructor's contract.
autodoc_default_options = {
    "members": True,
    "undoc-members": True,
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

# Links such as [docs/spark.md](spark.md#options) resolve to the section.
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"kafka-ordered {release}"
html_static_path: list = []


# -- ``.. ordered-options::``: the table of ``ordered.*`` keys, read from
# kafka_ordered.config.OPTIONS so the reference cannot drift from the code.

from docutils import nodes  # noqa: E402
from docutils.statemachine import StringList  # noqa: E402
from sphinx.util.docutils import SphinxDirective  # noqa: E402


class OrderedOptions(SphinxDirective):
    """Renders every ``ordered.*`` key with its default, meaning and users."""

    def run(self) -> list:
        from kafka_ordered import config
        from kafka_ordered.admin import _admin
        from spark_connector import options as spark_options

        users = {
            "producers": set(config.PRODUCER_OPTIONS),
            "consumers": set(config.CONSUMER_OPTIONS),
            "admin": set(_admin._ADMIN_OPTIONS),
            "Spark": set(spark_options.SHARED_ORDERED_OPTIONS),
        }
        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 30 15 40 15", "",
                 "   * - key", "     - default", "     - meaning", "     - accepted by"]
        for key, opt in sorted(config.OPTIONS.items()):
            who = ", ".join(name for name, keys in users.items() if key in keys)
            default = "none" if opt.default is None else f"``{opt.default!r}``"
            lines += [f"   * - ``{key}``", f"     - {default}", f"     - {opt.doc}", f"     - {who}"]
        node = nodes.container()
        self.state.nested_parse(StringList(lines, source="ordered-options"), self.content_offset, node)
        return node.children


def setup(app: object) -> dict:
    app.add_directive("ordered-options", OrderedOptions)  # type: ignore[attr-defined]
    return {"parallel_read_safe": True}
