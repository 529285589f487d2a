"""Compatibility layers: other libraries' APIs over batchcast.

- :mod:`batchcast.compat.tensorsocket`: TensorSocket's ``TensorProducer``
  and ``TensorConsumer``, so that a TensorSocket script moves over by
  changing its import.
"""
