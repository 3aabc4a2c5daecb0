#!/bin/sh
# Fails when BINARY links LibTorch (a NEEDED entry naming libtorch or libc10): the `specula` executable must start
# without it and load the LibTorch module only when a command needs it (harness/models/registry/torch_module.h).
# `--expect-torch BINARY` inverts the check: run on a binary that links LibTorch, it shows the check can fail.
set -eu
expect_torch=0
if [ "$1" = "--expect-torch" ]; then expect_torch=1; shift; fi
if readelf -d "$1" | grep -E 'NEEDED.*(libtorch|libc10)' >/dev/null; then
  [ "$expect_torch" = 1 ] && exit 0
  echo "$1 links LibTorch:"; readelf -d "$1" | grep -E 'NEEDED.*(libtorch|libc10)'; exit 1
fi
[ "$expect_torch" = 0 ] && { echo "$1: no LibTorch among its NEEDED libraries"; exit 0; }
echo "$1 does not link LibTorch, but --expect-torch said it does"; exit 1
