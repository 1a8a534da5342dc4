"""The code that runs inside an isolated job's process, never in the kernel.

- :mod:`.worker`: receive one job, run it, send back what it made, exit (a child forked from
  the template, or ``python -m kerasmagic.isolation.child.worker`` when no template may fork);
- :mod:`.child_display`: ``display()`` and figures travel to the kernel as mimebundles;
- :mod:`.mpl_backend`: the workers' matplotlib backend
  (``MPLBACKEND=module://kerasmagic.isolation.child.mpl_backend``).

The kernel side (:mod:`kerasmagic.isolation.pool`, :mod:`~kerasmagic.isolation.local`) starts
these processes and talks to them only through the job protocol (docs/design/isolation.md).
"""
