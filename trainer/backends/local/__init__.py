"""The local backend: the policy trained in this process (CPU or one GPU).

* :mod:`.learner` - :class:`~.learner.Learner`: the model, its optimizer and one update;
* :mod:`.run` - :class:`~.run.LocalBackend` (the backend as the shared loop sees it) and
  :func:`~.run.start_local_run`, which wires a :class:`~.run.LocalRun` (database, Redis,
  policy server, scheduler, loop);
* :mod:`.entry` - what ``wsrl train --backend local`` and ``wsrl doctor --backend local``
  call (its entry in :data:`trainer.backends.BACKENDS`).

Nothing here imports the verl backend (its algorithms come from verl's ``core_algos``
through :mod:`trainer.algorithms`).
"""
