#!/bin/sh
# Every function mpi.h declares is defined by the library: a program that takes the
# address of each one links (with the build tree's msgpass-mpicc) and runs. With the
# header's rule that what is not provided is not declared, a call is either provided
# or a compile error, never a link error or a stub (docs/mpi.md).
#   header_links.sh BIN_DIR HEADER WORK_DIR
set -eu
bin=$1
header=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
names=$(sed -n 's/^\(int\|double\) \(MPI_[A-Za-z_]*\)(.*/\2/p' "$header")
count=$(echo "$names" | wc -l)
[ "$count" -gt 60 ] || {
    echo "header_links: only $count functions found in $header" >&2
    exit 1
}
{
    echo "#include <mpi.h>"
    echo "#include <stdio.h>"
    echo "typedef void (*any_function)(void);"
    echo "static const any_function all[] = {"
    for name in $names; do
        echo "    (any_function)$name,"
    done
    echo "};"
    echo "int main(void) {"
    echo "    int n = 0;"
    echo "    for (unsigned i = 0; i < sizeof all / sizeof all[0]; ++i) n += all[i] != 0;"
    printf '%s\n' '    printf("%d functions\n", n);'
    echo "    return n == $count ? 0 : 1;"
    echo "}"
} >"$work/all.c"
"$bin/msgpass-mpicc" "$work/all.c" -o "$work/all"
"$work/all"
