"""`{{name}}`: a coordhost source reader in Python (world `source-reader-plugin` of
`wit/reader.wit`, package `coordhost:reader`), made by `coordhost plugin new`.

componentize-py looks up, in this module, one class per exported interface, named after it
(`source-reader` -> `SourceReader`); the interface's `split-reader` resource is the class
`SplitReader` of the module named after the interface, `source_reader.py`, where the reading is.
"""

import wit_world.exports

import source_reader


class SourceReader(wit_world.exports.SourceReader):
    """The exported `coordhost:reader/source-reader` interface."""

    def configure(self, config, schema):
        source_reader.configure(config, schema)
