"""Names vulture cannot see used: read by a framework, a Jinja template, a file format, or a
branch still being merged. Each line says who uses it. Run through `make deadcode`."""

# ---- pydantic response fields and dataclass fields the admin templates read
truncated  # app/admin/browse.py: _message_results.html
_.truncated
dead_letters  # app/admin/views/groups.py: group.html, _group_list.html
oldest_in_flight_ms  # services/pop/views.py: _pop_groups.html
next_redelivery_ms  # services/pop/views.py: _pop_groups.html
_.next_query  # app/admin/paging.py: _pager.html
_.first_query  # app/admin/paging.py: _pager.html
tone  # app/admin/views/trace.py: message_trace.html
media_type  # app/responses.py: an OpenAPI response entry
parked_pulls  # app/schemas/common.py: a response field
msg  # app/schemas/common.py: FieldError, a response field
would_move  # app/schemas/dlq.py: a response field
already_moved  # app/schemas/dlq.py: a response field
created_at  # app/schemas/dlq.py: a response field
finished_at  # app/schemas/dlq.py: a response field
invisible_until  # app/schemas/pop.py: a response field
next_check_at  # app/schemas/transactions.py: a response field
leased_until  # app/schemas/transactions.py: a response field
startOffset  # app/schemas/replication.py: a response field (RocketMQ's name)
subscription_groups  # app/schemas/replication.py: a response field
system  # app/schemas/topics.py: a response field
filter_type  # app/schemas/messages.py, pop.py: a request field pydantic checks (one language)

# ---- uvicorn
_.should_exit  # app/cli.py: tells uvicorn's server to stop
_.capture_signals  # app/server.py: overrides uvicorn's Server.capture_signals
_.expect_100_continue  # app/server.py: uvicorn's protocol reads it when the headers end

# ---- httptools calls a parser's callbacks (app/server/connection.py, app/proxy/upstream.py,
# bench)
_.on_message_begin
_.on_url
_.on_header
_.on_headers_complete
_.on_body
_.on_message_complete

# ---- asyncio calls a protocol's callbacks and flow control (app/server/connection.py,
# app/proxy/upstream.py, bench/byte_relay.py, bench/http_relay.py)
_.data_received
_.eof_received
_.connection_lost
_.pause_writing
_.resume_writing

# ---- RocketMQ's file shapes: fields kept so the JSON files stay RocketMQ's
consume_from_min_enable  # storage/config_managers.py: subscriptionGroup.json
consume_broadcast_enable
broker_id
which_broker_when_consume_slowly
notify_consumer_ids_changed_enable
COMPRESSED_FLAG  # storage/record/layout.py: the record's SYSFLAG bits, all of them named
MULTI_TAGS_FLAG
HOST_V6_EXTRA  # storage/record/layout.py: the layout's positions, all of them named
HEAD_BYTES
exc_info  # storage/message_store.py: a context manager's __exit__ signature

# ---- storage and Spark readers, for their owners to judge (unused outside them today)
_.write_header  # storage/index_file.py
_.committed_position  # storage/mapped_file.py
_.is_record  # storage/store_reader.py
format_rate  # spark_jobs/formatting.py
format_number  # spark_jobs/formatting.py
COLUMNS  # spark_jobs/records.py
_.keeps  # spark_jobs/records.py
_.commit_log_start  # spark_jobs/scan.py

# ---- PySpark's Python data source API calls these
_.streamReader  # spark_jobs/streaming/datasource.py
_.streamWriter
_.initialOffset  # spark_jobs/streaming/source.py
_.getDefaultReadLimit
_.prepareForTriggerAvailableNow
_.latestOffset
_.reportLatestOffset

# ---- pytest and the test helpers
run_pool  # tests/app/server/pool_workers.py: named in the code a test runs in a subprocess
pytestmark  # pytest reads it
TestStoreModel  # Hypothesis' state machine as a pytest test class
_.teardown  # Hypothesis calls it after each run of a state machine
_.log_message  # tests/spark_jobs/stub_server.py: overrides http.server's logging
_.do_POST  # tests/spark_jobs/stub_server.py: http.server calls it
g1_b  # tests/app/test_cluster_proxy.py: the deployment keeps every broker it stops
g2_a

# ---- mfusepy calls the power-cut file system's operations (tests/powercut_fs.py)
_.use_ns  # mfusepy: times in nanoseconds
_.readdir
_.utimens
_.statfs
_.fallocate
_.fsyncdir
fi  # the operations' signatures, as mfusepy passes them
datasync

# ---- pydantic reads it
_.__pydantic_config__  # app/schemas/common.py: the config of a TypedDict made from a model

# ---- pytest calls these hooks (tests/conftest.py: the order of a run, the serial modules)
pytest_configure
pytest_collection_modifyitems

# ---- starlette's QueryParams reads them (app/routes/api_route.py: query_of)
_._list
_._dict
