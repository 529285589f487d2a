"""Compatibility layers: other libraries' APIs over batchcast.

- :mod:`batchcast.compat.tensorsocket`: TensorSocket's ``TensorProducer``
  and ``TensorConsumer``, so that a TensorSocket script moves over by
  changing its import.
- :mod:`batchcast.compat.lightning`: a ``Consumer`` that PyTorch Lightning
  resumes mid-epoch from a checkpoint (``trainer.fit(..., ckpt_path=...)``).
"""
