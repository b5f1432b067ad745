/* abort: rank 1 calls MPI_Abort(MPI_COMM_WORLD, 7) after MPI_Init; the others block in a
 * barrier that can never complete. Each rank prints "abort: rank R ready" first. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("abort: rank %d ready\n", rank);
    fflush(stdout);
    if (rank == 1)
        MPI_Abort(MPI_COMM_WORLD, 7);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("abort: rank %d passed the barrier (must not happen)\n", rank);
    MPI_Finalize();
    return 0;
}
