#!/bin/sh
# A stand-in trainer for the example plan: 2 ms of "GPU step" per batch
# (a sleep, no CPU). Under `batchcast run` with a Data pipeline it reads the
# workload's shared producer (BATCHCAST_NAME); without one it runs its own
# pipeline, as a script with its own DataLoader would.
BC="${BATCHCAST_BIN:-batchcast}"
if [ -z "${BATCHCAST_NAME:-}" ]; then
  own="own-$$"
  "$BC" serve --name "$own" --synthetic --samples 60000 --work-us 300 --workers 2 --consumers 1 >/dev/null &
  exec "$BC" consume "$own" --connect-timeout 30 --delay-ms 2
fi
exec "$BC" consume "$BATCHCAST_NAME" --connect-timeout 30 --delay-ms 2
