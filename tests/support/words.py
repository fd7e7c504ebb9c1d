"""A small vocabulary for random workloads whose texts overlap (so dedup and search have something to find)."""

WORDS = "apple river lamp violin tiger coffee paris blue seven garden piano mountain".split()
