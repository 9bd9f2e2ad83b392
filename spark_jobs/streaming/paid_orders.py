"""The README's streaming example: paid orders counted per customer, kept current in a topic.

It reads ``Orders`` through the ``spoolmq`` source, keeps the messages tagged ``Paid``,
counts them per customer (the ``customer`` property) and, after each micro-batch, writes the
table of counts to ``PaidOrders`` (one message per customer, keyed by the customer) through
the ``spoolmq`` sink: ``complete`` mode, as a Python data source sink takes ``append`` and
``complete`` but not ``update``. Its state and offsets live in ``--checkpoint``: run it again
with the same directory and it goes on where it stopped, and no micro-batch's messages are
written twice::

    python -m spark_jobs.streaming.paid_orders --checkpoint ./paid-orders-checkpoint
    spark-submit --master spark://127.0.0.1:7077 spark_jobs/streaming/paid_orders.py \\
        --endpoint http://10.0.0.5:8090 --checkpoint /shared/paid-orders-checkpoint

By default it processes what the topic holds and stops (``Trigger.AvailableNow``); with
``--every "10 seconds"`` it keeps running.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_jobs.options import job_main
from spark_jobs.session import build_session, parse_conf
from spark_jobs.streaming.datasource import SPOOLMQ_FORMAT

DESCRIPTION = "Count paid orders per customer from a topic into a topic, exactly once."


def paid_per_customer(orders: DataFrame) -> DataFrame:
    """Rows of the ``spoolmq`` source -> the sink's rows: one per customer with paid orders,
    ``key`` the customer, ``value`` ``{"customer": …, "paid": n}``."""
    customer = F.col("properties").getItem("customer")
    paid = orders.where((F.col("tags") == "Paid") & customer.isNotNull())
    counts = paid.groupBy(customer.alias("customer")).agg(F.count("*").alias("paid"))
    return counts.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct("customer", "paid")).alias("value"),
        F.lit("PaidCount").alias("tags"),
    )


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    """Start the query (``complete`` mode: each micro-batch writes every count)."""
    orders = (
        spark.readStream.format(SPOOLMQ_FORMAT)
        .option("spoolmq.endpoints", args.endpoint)
        .option("subscribe", args.source_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .option("consumerGroup", args.consumer_group)
        .load()
    )
    writer = (
        paid_per_customer(orders)
        .writeStream.format(SPOOLMQ_FORMAT)
        .option("spoolmq.endpoints", args.endpoint)
        .option("topic", args.target_topic)
        .option("batchSize", args.batch_size)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("complete")
        .queryName("paid_orders")
    )
    if args.every:
        writer = writer.trigger(processingTime=args.every)
    else:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options."""
    parser.add_argument(
        "--endpoint", default="http://127.0.0.1:8080", help="a broker's or the proxy's URL"
    )
    parser.add_argument("--checkpoint", required=True, metavar="DIR", help="offsets and state")
    parser.add_argument("--source-topic", default="Orders")
    parser.add_argument("--target-topic", default="PaidOrders")
    parser.add_argument("--consumer-group", default="paid-orders", help="shows the query's lag")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=100, help="messages per send")
    parser.add_argument("--every", metavar="INTERVAL", help='keep running, e.g. "10 seconds"')
    parser.add_argument("--master", help="Spark master (default: local[*], or spark-submit's)")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help="Spark setting")


def run(args: argparse.Namespace) -> int:
    spark = build_session("spoolmq-paid-orders", args.master, parse_conf(args.conf))
    query = start(spark, args)
    query.awaitTermination()
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    batches = len(progress)
    sys.stdout.write(
        f"paid_orders: read {rows:,} message{'' if rows == 1 else 's'} in {batches} "
        f"micro-batch{'' if batches == 1 else 'es'}\n"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return job_main("spark_jobs.streaming.paid_orders", DESCRIPTION, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
