"""Cross-modal similarity: one tower per modality into one shared space, binary codes, and the
reference methods a user compares with."""

from oahu.learners.cross_modal.codes import BinaryCodes, hamming_distances, pack_codes
from oahu.learners.cross_modal.learner import CrossModalOAHU

__all__ = ["BinaryCodes", "CrossModalOAHU", "hamming_distances", "pack_codes"]
