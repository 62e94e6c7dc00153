"""A Spark job shaped like the ingestion job (core/job.py), run once to write the class-data archives.

See spark_env.py: what the JVMs load here, they load from the archive in the tests' jobs.
"""

from __future__ import annotations

from pyspark import SparkConf, SparkContext, StorageLevel


def main() -> None:
    sc = SparkContext.getOrCreate(SparkConf().setAppName("class-data-warm-up"))
    try:
        ranges = [{"shard": i, "records": 100 + i} for i in range(2)]
        reads = (
            sc.parallelize(ranges, 2)
            .map(lambda r: (r, list(range(r["records"]))))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        try:
            sizes = reads.map(lambda pair: len(pair[1])).collect()
            total = sum(reads.map(lambda pair: sum(pair[1])).collect())
        finally:
            reads.unpersist()
        assert sizes == [100, 101] and total > 0
        assert sc.parallelize(ranges, 2).map(lambda r: r["shard"]).collect() == [0, 1]
    finally:
        sc.stop()


if __name__ == "__main__":
    main()
