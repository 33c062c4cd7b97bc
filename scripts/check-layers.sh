#!/usr/bin/env bash
# Checks that dependencies between the layers of msgpass point down only
# (docs/architecture.md): every #include of a library or application file must name a
# header of its own folder or of a lower layer, never one of a higher layer, never one
# of a sibling at the same height (sci and ip/common, tcp and udp), and never a private
# header (src/) of another folder; an application includes no technology's header.
# Tests are not checked: white-box tests reach private headers on purpose.
#
#   scripts/check-layers.sh [ROOT]     ROOT defaults to the repository
#
# Prints one line per violation, "file:line: <folder> includes <header> of <folder>",
# and exits 1 when there is any.
set -euo pipefail

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$root"

# The technologies: applications name none of them (they reach a technology through
# NodeFactory::create and its leftovers through the TechnologyRegistry).
technologies="sci ip/common ip/tcp ip/udp auto"

# The layers, lowest first. Folders on one line are siblings: neither may include
# the other.
layers=(
    "base"
    "config"
    "framework"
    "sci ip/common comm"
    "ip/tcp ip/udp"
    "auto"
    "umbrella"
    "mpi"
    "apps"
)

declare -A rank=()
for i in "${!layers[@]}"; do
    for folder in ${layers[$i]}; do
        rank[$folder]=$i
    done
done

# The folder (layer) a path belongs to, or nothing, in REPLY (no subshell: the check
# runs in ctest beside the whole suite, where every fork is slow).
folder_of() {
    local path=${1#./} f
    REPLY=""
    for f in "${!rank[@]}"; do
        if [[ $path == "$f"/* && ${#f} -gt ${#REPLY} ]]; then REPLY=$f; fi
    done
}

# A relative path without "." and ".." parts, in REPLY (realpath -m without a fork).
normalize() {
    local part
    local -a parts=()
    IFS=/ read -ra split <<<"$1"
    for part in "${split[@]}"; do
        case $part in
        "" | .) ;;
        ..) if ((${#parts[@]} > 0)) && [[ ${parts[-1]} != .. ]]; then unset 'parts[-1]'; else parts+=(..); fi ;;
        *) parts+=("$part") ;;
        esac
    done
    local IFS=/
    REPLY="${parts[*]}"
}

# Public headers: <msgpass/...> -> the folder whose include/ holds it.
declare -A public=()
while IFS= read -r header; do
    header=${header#./}
    folder_of "$header"
    [[ -n $REPLY ]] || continue
    public[${header#"$REPLY"/include/}]=$REPLY
done < <(find . -path ./build -prune -o -path '*/include/msgpass/*' -type f -print)

violations=0
report() {
    echo "$1"
    violations=$((violations + 1))
}

mapfile -t files < <(find . -path ./build -prune -o -path ./tests -prune -o -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -print | sed 's|^\./||' | sort)
declare -A folder=()
for file in "${files[@]}"; do
    folder_of "$file"
    folder[$file]=$REPLY
done

# Every include line of every file in one grep: "file:line:text".
while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    text=${rest#*:}
    from=${folder[$file]:-}
    [[ -n $from ]] || continue
    if [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<(msgpass/[^>]+)\> ]]; then
        header=${BASH_REMATCH[1]}
        to=${public[$header]:-}
        if [[ -z $to ]]; then
            report "$file:$line: $from includes <$header>, which no folder's include/ provides"
            continue
        fi
    elif [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
        header=${BASH_REMATCH[1]}
        normalize "${file%/*}/$header"
        resolved=$REPLY
        [[ -e $resolved ]] || continue # found through an include directory of the target
        folder_of "$resolved"
        to=$REPLY
        [[ -n $to ]] || continue
        if [[ $to != "$from" && $resolved == "$to"/src/* ]]; then
            report "$file:$line: $from includes \"$header\", a private header of $to"
            continue
        fi
    else
        continue
    fi
    [[ $to == "$from" ]] && continue
    if [[ $from == apps && " $technologies " == *" $to "* ]]; then
        report "$file:$line: apps includes $header of $to: an application names no technology"
        continue
    fi
    if ((rank[$to] > rank[$from])); then
        report "$file:$line: $from includes $header of $to, a higher layer"
    elif ((rank[$to] == rank[$from])); then
        report "$file:$line: $from includes $header of $to, a sibling at the same layer"
    fi
done < <(((${#files[@]} > 0)) && grep -Hn '^[[:space:]]*#[[:space:]]*include' "${files[@]}" || true)

if ((violations > 0)); then
    echo "check-layers: $violations include(s) break the layering (docs/architecture.md, Layers)" >&2
    exit 1
fi
echo "check-layers: every include points down"
