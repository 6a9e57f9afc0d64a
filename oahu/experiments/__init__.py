"""What ``oahu replay`` and the benchmarks do with a learner outside the service: learn a stream
in order (:mod:`~oahu.experiments.stream_replay`), evaluate it the paper's way
(:mod:`~oahu.experiments.evaluation`) and simulate an annotator answering the learner's own
questions (:mod:`~oahu.experiments.active_loop`)."""
