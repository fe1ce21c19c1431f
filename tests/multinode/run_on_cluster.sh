#!/usr/bin/env bash
# A multinode test: runs PROGRAM on tools/zero-cluster (2 nodes x 2 ranks by default) and passes
# only when the job passes and every node sent and received at least MIN_BYTES on its link, so
# that a job whose ranks all ended up on one host (shared memory across the "nodes") fails.
#   run_on_cluster.sh MIN_BYTES [zero-cluster options] -- PROGRAM [ARGS...]
# Exit 77 (CTest: skipped, with the reason) where network namespaces cannot be made.
set -euo pipefail
min_bytes=$1
shift
counters=$(mktemp)
trap 'rm -f "$counters"' EXIT
status=0
"$(dirname "$0")/../../tools/zero-cluster" --counters "$counters" "$@" || status=$?
((status == 0)) || exit "$status"
nodes=0
while read -r node sent received; do
  nodes=$((nodes + 1))
  if ((sent < min_bytes || received < min_bytes)); then
    echo "run_on_cluster: node $node sent $sent and received $received bytes on its link, fewer than $min_bytes: the job did not cross the network" >&2
    exit 1
  fi
done < "$counters"
((nodes >= 2)) || { echo "run_on_cluster: no byte counters from the cluster" >&2; exit 1; }
echo "run_on_cluster: every one of $nodes nodes sent and received at least $min_bytes bytes on its link"
