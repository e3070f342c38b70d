"""Entry module of `{{name}}`, a coordhost split enumerator in Python.

componentize-py looks up, in this module, one class per exported interface, named after it
(`split-enumerator` -> `SplitEnumerator`). The interface holds only the `enumerator`
resource, whose class lives in the module named after the interface: `split_enumerator.py`.
"""

import wit_world.exports


class SplitEnumerator(wit_world.exports.SplitEnumerator):
    """The exported `coordhost:plugin/split-enumerator` interface; it has no free functions."""
