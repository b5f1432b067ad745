/* ring: a token goes around the ring ROUNDS times; every rank adds its rank+1 each pass.
 * Rank 0 checks the final value and prints "ring: ok size=N rounds=R token=T".
 * Any mismatch: print "ring: FAIL ..." and exit 1. */
#include <mpi.h>
#include <stdio.h>

#define ROUNDS 10

int main(int argc, char **argv)
{
    int rank, size;
    long token = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int r = 0; r < ROUNDS; r++) {
        if (rank == 0) {
            token += 1;
            MPI_Send(&token, 1, MPI_LONG, next, r, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG, prev, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            long want = (long)(r + 1) * ((long)size * (size + 1) / 2);
            if (token != want) {
                printf("ring: FAIL round=%d token=%ld want=%ld\n", r, token, want);
                fflush(stdout);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank + 1;
            MPI_Send(&token, 1, MPI_LONG, next, r, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) {
        printf("ring: ok size=%d rounds=%d token=%ld\n", size, ROUNDS, token);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
