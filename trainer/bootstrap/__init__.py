"""The tiny policy (``wsrl policy bootstrap``, ``wsrl policy eval``), played in this process.

* :mod:`.build` - :func:`~.build.bootstrap` and :class:`~.build.BootstrapConfig`: build the
  tiny policy and warm-start it on demonstrations (how a bootstrapped policy is played is
  read by :func:`trainer.checkpoint_protocol.policy_protocol`, as any checkpoint's);
* :mod:`.tiny_policy` - the few-million-parameter model and its tokenizer, built from nothing;
* :mod:`.demonstrations` - fair demonstrations, rendered as the agent's prompts;
* :mod:`.copy_pretraining` - teaching the model to copy, before it imitates;
* :mod:`.play` - :class:`~.play.LocalEpisode`, the agent protocol on an in-process WebShop;
* :mod:`.inprocess_eval` - :func:`~.inprocess_eval.evaluate`: any policy on many goals in
  this process, no workers (``wsrl policy eval``).

It uses the shared modules at the top of :mod:`trainer` and imports no backend.
"""
