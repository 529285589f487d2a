#!/bin/sh
# A stand-in trainer for plan.yaml: reads every batch of the workload's
# shared producer (BATCHCAST_NAME) to its end and prints what it received.
exec "${BATCHCAST_BIN:-batchcast}" consume "$BATCHCAST_NAME" --connect-timeout 60
