"""The serving process of ``oahu run``: the HTTP API answering from published snapshots while the
learner process learns.

* :mod:`~oahu.service.serving.app`: the :class:`~oahu.service.serving.app.Service` that wires
  everything, spawns the learner process and runs uvicorn;
* :mod:`~oahu.service.serving.process`: the learner process as seen from here (the pipe);
* :mod:`~oahu.service.serving.snapshot`: snapshots (model copy + gallery index) built in the
  background and published by one reference swap;
* :mod:`~oahu.service.serving.queries`: the query worker batching concurrent requests;
* :mod:`~oahu.service.serving.api` and :mod:`~oahu.service.serving.http_limits`: FastAPI.
"""
