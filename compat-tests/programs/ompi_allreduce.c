/* ompi_allreduce: Open MPI collectives. Every rank: allreduce sum and max of (rank+1)^2, a
 * 1000-element vector allreduce (element i: rank + i), a bcast from the last rank, and an
 * allgather of ranks. Prints
 *   "ompi_allreduce: ok rank=R size=N sum=S max=M vector=ok bcast=ok allgather=ok"
 * or "ompi_allreduce: FAIL rank=R what" and exits 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define LEN 1000

int main(int argc, char **argv)
{
    int rank, size, sq, sum = 0, max = 0;
    static int in[LEN], out[LEN];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sq = (rank + 1) * (rank + 1);
    MPI_Allreduce(&sq, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&sq, &max, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < LEN; i++)
        in[i] = rank + i;
    MPI_Allreduce(in, out, LEN, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < LEN; i++) {
        if (out[i] != size * (size - 1) / 2 + size * i) {
            printf("ompi_allreduce: FAIL rank=%d vector[%d]=%d\n", rank, i, out[i]);
            return 1;
        }
    }
    int b = rank == size - 1 ? 4242 : 0;
    MPI_Bcast(&b, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
    if (b != 4242) {
        printf("ompi_allreduce: FAIL rank=%d bcast=%d\n", rank, b);
        return 1;
    }
    int *all = malloc(size * sizeof(int));
    MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++) {
        if (all[i] != i) {
            printf("ompi_allreduce: FAIL rank=%d allgather[%d]=%d\n", rank, i, all[i]);
            return 1;
        }
    }
    printf("ompi_allreduce: ok rank=%d size=%d sum=%d max=%d vector=ok bcast=ok allgather=ok\n",
           rank, size, sum, max);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
