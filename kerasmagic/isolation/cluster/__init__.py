"""Isolated jobs on a Ray cluster: every job still a fork of a warm template, now on any node.

Ray's own answer to "give every byte back after each task" is ``@ray.remote(max_calls=1)``,
a new worker process per task that imports the framework again every time (seconds). Here
each node gets one kerasmagic agent (a Ray actor) that owns the same template the kernel
uses locally (:mod:`kerasmagic.isolation.template`) and forks a child per job; Ray still
decides where each job runs, through a small relay task that holds the job's resources
(``num_cpus``, ``num_gpus``, ``memory``) for as long as the job runs.

- :mod:`.target`: what ``on="ray"`` means (which cluster, which resources), and connecting.
- :mod:`.transfer`: a job's folder (pickles, out-of-band buffers, ``.keras`` files) crossing
  machines through Ray's object store.
- :mod:`.agent`: the node side: the agent actor and the relay task.
- :mod:`.remote`: the kernel side: submitting jobs, streaming their output into the cell,
  timeouts, Ctrl-C, a node that dies.

Nothing here is imported by ``import kerasmagic``; Ray is imported only when a job asks for it.
"""
