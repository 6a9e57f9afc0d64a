"""A learning group: several learner processes that learn ONE model over a source's partitions.

Each member learns the records of its own partitions and the members combine their models
every few updates, through ``torch.distributed`` (gloo on the CPU, NCCL on GPUs); rank 0, the
group leader, is the learner process the serving process spawned, and it alone talks to the
serving process and writes checkpoints. docs/delivery.md ("Learning groups") gives the
exactly-once argument; the modules:

* :mod:`.combine`: one combine round, in one all-reduce (or in one process, to replay it);
* :mod:`.shards`: which partitions, or which records of a stream file, each member reads;
* :mod:`.schedule`: the log of which offsets each member learned in each round, and its replay
  in one process;
* :mod:`.loop`: the learn loop of a member, in rounds, with the consistent cut;
* :mod:`.members`: the processes: the leader spawns and watches the members, and the group
  dies as one.
"""
