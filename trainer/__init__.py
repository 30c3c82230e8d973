"""The trainer: what turns rollouts in Postgres into new policy versions.

Where things are, by who uses them:

* here, at the top: the shared loop, run by every backend. :mod:`.loop` (the train loop
  and its resume), :mod:`.config` (the run configuration, the only place training defaults
  live), :mod:`.scheduler` (keeps the workers busy), :mod:`.ready_groups` and
  :mod:`.batches` (which groups to train on), :mod:`.samples` (training samples from the
  recorded LLM calls), :mod:`.advantages` (each rollout's advantage within its group),
  :mod:`.checkpoint_protocol` (how a policy folder is played), :mod:`.publish` (weight
  sync and the endpoint the workers read), :mod:`.tracking` (one metrics logger). Also
  here, as the lower of their two users, the transformers tooling the local backend and
  the bootstrap share: :mod:`.tensors` (samples to tensors, logprobs), :mod:`.generation`
  (batched sampling), :mod:`.constrained` (decoding under an action pattern, and its
  replay);
* :mod:`.backends` - one folder per backend and the registry ``wsrl train`` dispatches
  through: :mod:`.backends.local` (the policy trained in this process: learner,
  losses, checkpoints, policy server) and :mod:`.backends.verl` (verl on GPUs);
* :mod:`.bootstrap` - the tiny policy: its build and warm start (``wsrl policy
  bootstrap``), the in-process player and evaluation (``wsrl policy eval``).

The shared modules import neither a backend nor the bootstrap, the bootstrap imports no
backend, and the two backends import nothing of each other (import-linter contracts in
pyproject.toml).
"""
