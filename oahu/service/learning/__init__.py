"""The learner process of ``oahu run``: the consumer loop that owns the learner, its source,
item replica, dead letters and checkpoints, and its link to the serving process.

* :mod:`~oahu.service.learning.main`: the process's entry point, assembling the loop;
* :mod:`~oahu.service.learning.consumer`: poll, decode, resolve, learn, dead-letter, checkpoint;
* :mod:`~oahu.service.learning.resolve`: constraints by item id to feature vectors;
* :mod:`~oahu.service.learning.link`: what goes to the serving process, and when.
"""
