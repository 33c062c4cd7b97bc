#!/bin/sh
# The build tree's msgpass-mpicc and msgpass-mpicxx build MPI programs unchanged: the C
# ping-pong (compiled as C) and a C++ program, each then run by msgpass-run -n 2;
# --showme prints the command without running it.
#   wrapper_test.sh BIN_DIR MSGPASS_RUN SOURCE_DIR WORK_DIR
set -eu
bin=$1
run=$2
src=$3
work=$4
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

showme=$("$bin/msgpass-mpicc" --showme pingpong.c -o pingpong)
case $showme in
*" -I"*"mpi/include/msgpass/mpi"*" pingpong.c -o pingpong "*libmsgpass_mpi*) ;;
*)
    echo "msgpass-mpicc --showme: unexpected '$showme'" >&2
    exit 1
    ;;
esac
case $("$bin/msgpass-mpicc" --showme -c x.c) in
*libmsgpass_mpi*)
    echo "msgpass-mpicc --showme -c adds link flags" >&2
    exit 1
    ;;
esac

"$bin/msgpass-mpicc" "$src/pingpong.c" -o "$work/pingpong"
"$bin/msgpass-mpicxx" "$src/allreduce.cpp" -o "$work/allreduce"
out=$("$run" -n 2 -- "$work/pingpong")
echo "$out"
[ "$out" = "[rank-0] pingpong: 2 ranks ok" ] || {
    echo "unexpected output of the ping-pong built with msgpass-mpicc" >&2
    exit 1
}
out=$("$run" -n 2 --technology tcp -- "$work/allreduce")
echo "$out"
[ "$out" = "[rank-0] allreduce from C++: 2 ranks ok" ] || {
    echo "unexpected output of the program built with msgpass-mpicxx" >&2
    exit 1
}
