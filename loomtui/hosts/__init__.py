"""Other hosts' Loom, reached over OpenSSH: the transport (`ssh`), what a host's answer says
(`view`) and since when a host has not answered (`reach`). Each host runs its own `loom supervise`
and acts on its own; this machine only asks its Loom, through its own commands."""
