#!/usr/bin/env bash
# The layer check must fail on a planted violation: copies the layered folders of the
# source tree, plants one bad include of each kind in a copy, and expects
# scripts/check-layers.sh to name it.
set -euo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

plant() { # plant KIND FILE LINE EXPECTED
    local kind=$1 file=$2 line=$3 expected=$4 copy="$work/$1"
    mkdir -p "$copy"
    (cd "$src" && tar cf - --exclude=./build --exclude=./.git --exclude=./tests .) | tar xf - -C "$copy"
    printf '%s\n' "$line" >>"$copy/$file"
    local out rc=0
    out=$(bash "$src/scripts/check-layers.sh" "$copy" 2>&1) || rc=$?
    if ((rc == 0)); then
        echo "FAIL ($kind): the check passed with '$line' in $file" >&2
        exit 1
    fi
    if ! grep -qF -- "$file:" <<<"$out" || ! grep -qF -- "$expected" <<<"$out"; then
        echo "FAIL ($kind): the check failed without naming $file and '$expected':" >&2
        echo "$out" >&2
        exit 1
    fi
    echo "ok ($kind): $(grep -F -- "$file:" <<<"$out" | head -1)"
}

plant upward framework/src/buffer.cpp '#include <msgpass/sci/factory.hpp>' 'a higher layer'
plant sibling sci/src/factory.cpp '#include <msgpass/ip/socket.hpp>' 'a sibling at the same layer'
plant private auto/src/factory.cpp '#include "../../sci/src/node.hpp"' 'a private header of sci'
plant config-up config/src/options.cpp '#include <msgpass/node.hpp>' 'a higher layer'
plant technology apps/msgpass-run/main.cpp '#include <msgpass/sci/naming.hpp>' 'an application names no technology'
