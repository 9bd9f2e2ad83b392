"""The CommitLog record: RocketMQ's byte layouts and everything that reads or writes them.

The bottom of :mod:`storage`: it imports only the standard library and the two leaf modules
:mod:`storage.errors` and :mod:`storage.topic_names`. One concept per module:

* :mod:`~storage.record.layout` -- every struct and byte position of the record, the BLANK
  filler and the ConsumeQueue unit; SYSFLAG bits; integer bounds.
* :mod:`~storage.record.java_hash` -- Java's ``String.hashCode`` (tags code, index keys).
* :mod:`~storage.record.properties` -- property names and the PROPERTIES text.
* :mod:`~storage.record.msg_id` -- the offsetMsgId and host addresses.
* :mod:`~storage.record.message` -- the message values every layer shares (the one module
  of storage the HTTP layer may import).
* :mod:`~storage.record.fields` -- what a consumer is shown of a record, read in one pass.
* :mod:`~storage.record.encode` / :mod:`~storage.record.decode` -- writing a record;
  framing (``check_record``) and decoding one.
"""
