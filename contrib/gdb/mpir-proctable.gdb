# Prints kauri's MPIR process table, as a parallel debugger reads it: host, executable and
# pid of every rank of the job, in rank order, once every rank has been started.
#
#   gdb -q -batch -x contrib/gdb/mpir-proctable.gdb --args kauri -n 4 ./app
#
# The symbols are the MPIR standard's C ones; the table is an array of
# { char *host_name; char *executable_name; int pid; } (24 bytes each on LP64).
#
# The table's address is kept as an integer, and strings are read as `unsigned char *`: in
# a Rust program's debug information `char` is Rust's 4-byte character, and gdb may take
# that type for C's `char`; arithmetic on a `char *` then steps 4 bytes at a time, and the
# table came out as garbage (`pid 57696243`, "Cannot access memory").
set pagination off
set language c
set breakpoint pending on
break MPIR_Breakpoint
run
set $n = *(int *) &MPIR_proctable_size
set $t = *(unsigned long *) &MPIR_proctable
printf "MPIR_proctable_size %d MPIR_debug_state %d\n", $n, *(int *) &MPIR_debug_state
set $i = 0
while $i < $n
  printf "MPIR rank %d host %s executable %s pid %d\n", $i, *(unsigned char **) ($t + 24 * $i), *(unsigned char **) ($t + 24 * $i + 8), *(int *) ($t + 24 * $i + 16)
  set $i = $i + 1
end
continue
