#!/usr/bin/env bash
# A `kvlab run` sweep as a Slurm job array: task I of N runs every N-th point
# of the config (--shard I/N) into its own directory, results/NAME/shard-I.
# Submit from the repository root (relative paths below are from there):
#
#   sbatch evals/slurm/sweep-array.sh evals/configs/quickstart.toml
#
# NAME defaults to the config file's stem; pass it as the second argument when
# the config's `name` differs. Keep --array at 0-(N-1), and keep N the same when
# you resubmit: a resubmitted task resumes its shard, skipping recorded points
# (add --retry-failed below to rerun failed ones). Each task runs one process
# with SLURM_CPUS_PER_TASK threads (the config's `threads` is overridden).
#
# When the array is done, join the shards (results.jsonl, results.csv,
# summary.md in results/NAME) and plot them:
#
#   build/kvlab merge results/quickstart/shard-* --out results/quickstart
#   python3 evals/plot.py results/quickstart
#
# or queue the merge behind the array at submission time:
#
#   jobid=$(sbatch --parsable evals/slurm/sweep-array.sh evals/configs/quickstart.toml)
#   sbatch --dependency=afterok:${jobid} --job-name=kvlab-merge --output=kvlab-merge-%j.out \
#          --wrap 'build/kvlab merge results/quickstart/shard-* --out results/quickstart'
#
# (afterok waits for every task to succeed; failed points do not fail a task,
# only a crash or the time limit does. Use afterany to merge whatever finished.)
#
#SBATCH --job-name=kvlab-sweep
#SBATCH --array=0-7
#SBATCH --cpus-per-task=8
#SBATCH --mem=16G
#SBATCH --time=04:00:00
#SBATCH --output=kvlab-sweep-%A_%a.out

set -euo pipefail

config=${1:?usage: sbatch evals/slurm/sweep-array.sh CONFIG.toml [NAME]}
name=${2:-$(basename "$config" .toml)}
kvlab=${KVLAB:-build/kvlab}

cd "${SLURM_SUBMIT_DIR:-.}"
: "${SLURM_ARRAY_TASK_ID:?run this with sbatch (a job array), or set SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT}"
: "${SLURM_ARRAY_TASK_COUNT:?SLURM_ARRAY_TASK_COUNT is not set}"

echo "kvlab sweep ${name}: shard ${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT} on $(hostname), $(date)"
"$kvlab" run "$config" \
  --shard "${SLURM_ARRAY_TASK_ID}/${SLURM_ARRAY_TASK_COUNT}" \
  --out "results/${name}/shard-${SLURM_ARRAY_TASK_ID}" \
  --set "threads=${SLURM_CPUS_PER_TASK:-0}" \
  --no-progress
