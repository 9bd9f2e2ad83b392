"""A streaming query the tests start as a process of its own (and kill): one topic read
through the ``spoolmq`` source, copied to Parquet files or to another topic.

    python -m tests.spark_jobs.streaming.copy_query --endpoint URL --topic In \
        --checkpoint DIR --to parquet:DIR|spoolmq:TOPIC [--master M] [--conf K=V ...]

It runs until killed, or with ``--available-now`` reads what the topic holds and stops.
"""

from __future__ import annotations

import argparse
import sys

from spark_jobs.session import build_session, parse_conf


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--max-offsets-per-trigger", default="100")
    parser.add_argument("--sink-batch-size", default="10")
    parser.add_argument("--every", default="200 milliseconds")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--master")
    parser.add_argument("--conf", action="append")
    args = parser.parse_args()
    spark = build_session("copy-query", args.master, parse_conf(args.conf))
    source = (
        spark.readStream.format("spoolmq")
        .option("spoolmq.endpoints", args.endpoint)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .option("spoolmq.retryBackoffMs", "100")
        .load()
    )
    kind, _, target = args.to.partition(":")
    if kind == "parquet":
        writer = source.writeStream.format("parquet").option("path", target)
    else:
        writer = (
            source.select("value", "key", "tags", "properties")
            .writeStream.format("spoolmq")
            .option("spoolmq.endpoints", args.endpoint)
            .option("spoolmq.retryBackoffMs", "100")
            .option("topic", target)
            .option("batchSize", args.sink_batch_size)
        )
    writer = writer.option("checkpointLocation", args.checkpoint)
    if args.available_now:
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime=args.every).start()
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
