"""The contracts every part of the pipeline shares; imports nothing of ours but settings
and the database.

* :mod:`app.core.endpoint`: where the policy is served, and its only publisher.
* :mod:`app.core.celery`: the Celery app, queue and task names, time limits.
* :mod:`app.core.enqueue`: goals in Postgres, and enqueueing rollouts.
* :mod:`app.core.agent`: the agent protocol of any environment (one episode's state and
  the layout of a step's prompt; an environment subclasses its ``Episode``).
* :mod:`app.core.llm`: the LLM wire contract (sampling, parsing, the recorded call).
* :mod:`app.core.env_client`: what every env server's client answers (session, step,
  error); :mod:`app.core.http_pool`: the keep-alive HTTP client under them.
* :mod:`app.core.gateway_keys`: per-attempt keys of the LLM gateway.
* :mod:`app.core.preflight`: the checks every training run needs (``wsrl doctor``).
* :mod:`app.core.evaluation`: evaluating a policy on the pipeline (queue, wait, score).
* :mod:`app.core.intervals`: the confidence intervals of reported scores.
"""
