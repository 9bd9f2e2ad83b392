"""POP consumption: competing consumers over the CommitLog (RocketMQ 5's pop/ack/revive).

A receive advances the group's pop offset on a queue and writes a checkpoint (CK) record; an
ack writes an ACK record. Both are ordinary messages of the system revive topic
``rmq_sys_REVIVE_LOG`` (queue 0), so they are flushed, recovered and replicated like any
message (:mod:`services.pop.checkpoint`). The revive service (:mod:`services.pop.revive`)
redelivers what was not acked before its invisibility ended; on start the in-memory state is
rebuilt from the revive topic (:mod:`services.pop.rebuild`). Start at
:class:`services.pop.service.PopService`.
"""
