"""Entry module of `{{name}}`, a coordhost shuffle master in Python.

componentize-py looks up, in this module, one class per exported interface, named after it
(`shuffle-master` -> `ShuffleMaster`). The interface holds only the `shuffle-master`
resource, whose class lives in the module named after the interface: `shuffle_master.py`.
"""

import wit_world.exports


class ShuffleMaster(wit_world.exports.ShuffleMaster):
    """The exported `coordhost:plugin/shuffle-master` interface; it has no free functions."""
