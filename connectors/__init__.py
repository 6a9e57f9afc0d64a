"""Constraint messages and where they come from and go to (installed as ``oahu.connectors``).

* :mod:`~oahu.connectors.constraint`: what a message decodes to, and ``DecodeError``;
* :mod:`~oahu.connectors.messages`: encoding and decoding (JSON and binary, ``MESSAGES.md``);
* :mod:`~oahu.connectors.source`: the ``Source`` protocol; :mod:`~oahu.connectors.file_source`
  and :mod:`~oahu.connectors.kafka_source` implement it;
* :mod:`~oahu.connectors.kafka_sink` and :mod:`~oahu.connectors.dead_letter`: where messages go;
* :mod:`~oahu.connectors.kafka_uri`: ``kafka://`` URIs.
"""
