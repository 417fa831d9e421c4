"""The ground floor, which every other part of omnigym builds on.

It holds the data types, spaces, the registries, configs, pretrained I/O, normalisation,
text-action parsing and text observations, the torch vector-env protocol and the ``Policy``
interface. Its modules import nothing from omnigym outside ``omnigym.core``
(``tests/test_layers.py`` checks it).
"""
