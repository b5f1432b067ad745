/* The C hello of the wheels matrix: every rank prints one line naming its rank, the size
 * and the MPI library; matrix.py checks that the N lines form one world of N.
 * hello_timed.c includes this file with its own HELLO_* hooks (empty here). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#ifndef HELLO_AT_MAIN
#define HELLO_AT_MAIN()
#define HELLO_AT_INIT()
#define HELLO_REPORT(rank, size)
#endif

int main(int argc, char **argv) {
    int rank, size, len;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    HELLO_AT_MAIN();
    MPI_Init(&argc, &argv);
    HELLO_AT_INIT();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (sum != size * (size - 1) / 2) {
        fprintf(stderr, "rank %d: allreduce %d\n", rank, sum);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    HELLO_REPORT(rank, size);
    printf("OK hello rank %d of %d: %.60s\n", rank, size, lib);
    MPI_Finalize();
    return 0;
}
