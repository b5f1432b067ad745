/* early_exit: rank 1 (from PMI_RANK) exits with status 0 BEFORE MPI_Init; the others call
 * MPI_Init and would wait for it forever. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    const char *r = getenv("PMI_RANK");
    if (r && atoi(r) == 1) {
        printf("early_exit: rank 1 leaving before MPI_Init\n");
        fflush(stdout);
        return 0;
    }
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("early_exit: rank %d passed the barrier (must not happen)\n", rank);
    MPI_Finalize();
    return 0;
}
