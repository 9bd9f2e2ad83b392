"""A streaming query the tests start as a process of its own (and kill): one topic read
through the ``spoolmq`` source, copied to Parquet files or to another topic.

    python -m tests.spark_jobs.streaming.copy_query --endpoint URL --topic In \
        --checkpoint DIR --to parquet:DIR|spoolmq:TOPIC [--master M] [--conf K=V ...]

It runs until killed, or with ``--until-idle`` stops after a micro-batch that read nothing.
"""

from __future__ import annotations

import argparse
import sys
import time

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
    parser.add_argument("--until-idle", action="store_true")
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
    query = (
        writer.option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=args.every)
        .start()
    )
    sys.stdout.write(f"started {query.id}\n")
    sys.stdout.flush()
    while query.isActive:
        time.sleep(0.1)
        last = query.lastProgress
        if args.until_idle and last and last["numInputRows"] == 0:
            query.stop()
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
