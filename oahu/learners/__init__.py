"""Every learner oahu ships, one folder per family.

* :mod:`oahu.learners.oahu`: OAHU (the paper's Algorithm 1 and oahu's default learner built on
  it): the learner, its update step and each of the parts the step is made of;
* :mod:`oahu.learners.baselines`: the paper's online baselines (LEGO, RDML, OASIS, OPML) and the
  fixed Euclidean metric.

All of them implement :class:`oahu.learner.Learner`; :mod:`oahu.registry` builds them by name.
"""
