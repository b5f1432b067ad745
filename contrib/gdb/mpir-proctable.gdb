# Prints kauri's MPIR process table, as a parallel debugger reads it: host, executable and
# pid of every rank of the job, in rank order, once every rank has been started.
#
#   gdb -q -batch -x contrib/gdb/mpir-proctable.gdb --args kauri -n 4 ./app
#
# The symbols are the MPIR standard's C ones; the table is an array of
# { char *host_name; char *executable_name; int pid; } (24 bytes each on LP64).
set pagination off
set language c
set breakpoint pending on
break MPIR_Breakpoint
run
set $n = *(int *) &MPIR_proctable_size
set $t = *(char **) &MPIR_proctable
printf "MPIR_proctable_size %d MPIR_debug_state %d\n", $n, *(int *) &MPIR_debug_state
set $i = 0
while $i < $n
  printf "MPIR rank %d host %s executable %s pid %d\n", $i, *(char **) ($t + 24 * $i), *(char **) ($t + 24 * $i + 8), *(int *) ($t + 24 * $i + 16)
  set $i = $i + 1
end
continue
