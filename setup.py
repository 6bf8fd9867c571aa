"""Build hook for the optional C speed-ups; the metadata lives in setup.cfg.

``optional=True``: when the extension does not compile (no compiler, no
Python headers) the install still succeeds and kafka_ordered uses its
pure-Python hashes. ``pip install -e .`` builds it in place (setuptools'
editable mode runs build_ext with ``inplace``), as does
``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kafka_ordered._speedups", ["kafka_ordered/_speedups.c"], optional=True),
    ]
)
