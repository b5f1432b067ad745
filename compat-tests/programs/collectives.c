/* collectives: MPI_Allreduce (sum and max) and MPI_Alltoall, results checked.
 * Each rank prints "collectives: ok rank=R size=N sum=S max=M alltoall=ok",
 * or "collectives: FAIL rank=R ..." and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    long mine = (long)(rank + 1) * (rank + 1), sum = 0, max = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &max, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    long want_sum = (long)size * (size + 1) * (2 * size + 1) / 6;
    long want_max = (long)size * size;
    if (sum != want_sum || max != want_max) {
        printf("collectives: FAIL rank=%d sum=%ld want=%ld max=%ld want=%ld\n",
               rank, sum, want_sum, max, want_max);
        bad = 1;
    }

    int *out = malloc(sizeof(int) * size), *in = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++) {
        out[i] = rank * 1000 + i;   /* element for rank i */
        in[i] = -1;
    }
    MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++) {
        if (in[i] != i * 1000 + rank) {
            printf("collectives: FAIL rank=%d alltoall[%d]=%d want=%d\n",
                   rank, i, in[i], i * 1000 + rank);
            bad = 1;
        }
    }
    if (!bad)
        printf("collectives: ok rank=%d size=%d sum=%ld max=%ld alltoall=ok\n",
               rank, size, sum, max);
    fflush(stdout);
    free(out);
    free(in);
    MPI_Finalize();
    return bad;
}
