"""A broker's replica role, and the replication of its CommitLog from a master to its slaves
(RocketMQ's HAService).

- :mod:`services.ha.role`: the replica role, one object per broker: master or slave, epochs,
  write fencing, promotion and following, and the services below that each role runs;
- :mod:`services.ha.master`: the master's HA server, one connection per slave, acked offsets
  and the sync-state set (in-sync replicas);
- :mod:`services.ha.group_transfer`: SYNC_MASTER puts wait for the in-sync slaves;
- :mod:`services.ha.client`: the slave's HA client (streams and appends byte for byte);
- :mod:`services.ha.config_sync`: the slave copies the master's config files;
- :mod:`services.ha.epochs`: the master's epochs over HTTP and the divergence check.
"""

from services.ha.address import MasterAddress, split_host_port
from services.ha.role import BROKER_NAME_PATTERN, ReplicaConfig, ReplicaRole
from services.ha.status import ReplicaStatus, Role, SlaveStatus

__all__ = [
    "BROKER_NAME_PATTERN",
    "MasterAddress",
    "ReplicaConfig",
    "ReplicaRole",
    "ReplicaStatus",
    "Role",
    "SlaveStatus",
    "split_host_port",
]
