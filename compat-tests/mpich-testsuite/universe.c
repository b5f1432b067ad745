/*
 * universe.c: prints the MPI_UNIVERSE_SIZE attribute rank 0 sees, as MPICH's spawn tests
 * read it (test/mpi/util/mtest.c, MTestSpawnPossible): "universe=unset" when the attribute
 * is absent (the launcher did not say: the tests then try to spawn), "universe=N" otherwise
 * (the tests skip spawning, and pass without testing anything, when N <= the world size).
 * suite.py runs it on 2 ranks under each launcher and records the answer in meta.json.
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, flag = 0;
    int *v = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &v, &flag);
    if (rank == 0) {
        if (flag)
            printf("universe=%d size=%d\n", *v, size);
        else
            printf("universe=unset size=%d\n", size);
    }
    MPI_Finalize();
    return 0;
}
