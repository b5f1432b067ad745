/* ompi_ring: Open MPI point-to-point. A token goes round the ring 10 times, each rank adding
 * rank + 1. Rank 0 prints "ompi_ring: ok size=N rounds=10 token=T" (T = 10 * N(N+1)/2);
 * with one rank there is no ring and the token is counted the same way. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, token = 0;
    const int rounds = 10;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int r = 0; r < rounds; r++) {
        if (size == 1) {
            token += 1;
            continue;
        }
        if (rank == 0) {
            token += 1;
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank + 1;
            MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        printf("ompi_ring: ok size=%d rounds=%d token=%d\n", size, rounds, token);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
