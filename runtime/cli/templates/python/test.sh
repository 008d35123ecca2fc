#!/bin/sh
# Builds {{name}}.wasm, then has Tributary load it (`plugin check`) and run it on the sample
# changes (`plugin test`). TRIBUTARY names the tributary command, if it is not on PATH.
set -eu
cd "$(dirname "$0")"
TRIBUTARY="${TRIBUTARY:-tributary}"
./build.sh
"$TRIBUTARY" plugin check {{name}}.wasm
"$TRIBUTARY" plugin test {{name}}.wasm --changes changes.jsonl
