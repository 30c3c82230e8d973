"""The local backend: the policy trained in this process (CPU or one GPU).

* :mod:`.entry` - what ``wsrl train --backend local`` and ``wsrl doctor --backend local``
  call (its entry in :data:`trainer.backends.BACKENDS`);
* :mod:`.run` - :class:`~.run.LocalBackend` (the backend as the shared loop sees it) and
  :func:`~.run.start_local_run`, which wires a :class:`~.run.LocalRun` (database, Redis,
  policy server, scheduler, loop);
* :mod:`.learner` - :class:`~.learner.Learner`: the model, its optimizer and one update;
* :mod:`.algorithms` - advantages and losses, chosen by name from verl's ``core_algos``;
* :mod:`.checkpoints` - one folder per train step, written atomically, and which one a
  restart resumes from;
* :mod:`.policy_server` - the OpenAI-compatible server the workers sample the policy from.

The transformers tooling it shares with the bootstrap (:mod:`trainer.tensors`,
:mod:`trainer.generation`, :mod:`trainer.constrained`) is at the top of :mod:`trainer`.
Nothing here imports the verl backend (verl's ``core_algos`` is a library to it, not a
backend).
"""
