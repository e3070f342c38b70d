"""Entry module of the Python source reader `py-reader` (world `source-reader-plugin` of
`coordhost:reader@0.1.0`): web-server access logs in the Common Log Format, a format DataFusion
does not read. The reading itself is in `source_reader.py` (the module named after the exported
interface, where componentize-py looks for the `split-reader` resource's class).

componentize-py looks up, in this module, one class per exported interface, named after it
(`source-reader` -> `SourceReader`); `configure` is the interface's one free function.
"""

import wit_world.exports

import source_reader


class SourceReader(wit_world.exports.SourceReader):
    """The exported `coordhost:reader/source-reader` interface."""

    def configure(self, config, schema):
        source_reader.configure(config, schema)
