"""The online baselines of the OAHU paper (LEGO, RDML, OASIS, OPML) and the fixed Euclidean
metric, each a ``oahu.learner.Learner``; build them by name with ``oahu.registry``."""
