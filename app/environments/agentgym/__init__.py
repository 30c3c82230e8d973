"""AgentGym's HTTP protocol: the client of any env server that speaks it (:mod:`.client`)
and the agent's side of any such server's episodes (:mod:`.agent`)."""
