"""Sphinx configuration of the API reference (`make docs`): pages of autodoc directives
over the public modules; the text comes from the docstrings."""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, ROOT)

project = "mdsl"
author = "the mdsl developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
default_role = "code"  # `name` in a docstring is code, as in the Markdown docs
suppress_warnings = ["ref.python"]  # the same name exported from the facade and its module
