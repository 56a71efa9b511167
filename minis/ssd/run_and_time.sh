#!/usr/bin/env bash
# One timed run of the mini ssd. The run driver (mlrepro.runs.driver) sets the environment: SEED,
# DATADIR, LOGDIR, this folder's config_<SYSTEM>.sh, MLPERF_SUBMISSION_* and MLREPRO_PARAMS (the
# hyperparameters as JSON). The MLPerf log goes to stdout; the driver keeps its :::MLLOG lines. A
# converged run leaves its weights in $LOGDIR/checkpoint.pt for the inference stage.
set -euo pipefail
exec python -P -m mlrepro.train --benchmark ssd --data-dir "$DATADIR" --seed "$SEED" \
    --params "$MLREPRO_PARAMS" --device "${MLREPRO_DEVICE:-auto}" --threads "${OMP_NUM_THREADS:-1}" \
    --checkpoint "$LOGDIR/checkpoint.pt" ${MLREPRO_DROP_CACHES:+--drop-caches}
