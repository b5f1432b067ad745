/* cleared_env: an MPICH program that loses its launcher's variables before MPI_Init, as a
 * rank started through `env -i` or a container's `--cleanenv` does: every PMI_* and PMIX_*
 * variable is removed, and the program prints "cleared rank R of N". Its MPI finds no
 * launcher and runs as a singleton, a world of 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* Removes the first variable named PMI_* or PMIX_*; 0 when none is left. */
static int clear_one(void)
{
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, "PMI_", 4) == 0 || strncmp(*e, "PMIX_", 5) == 0) {
            char name[256];
            size_t n = strcspn(*e, "=");
            if (n >= sizeof name)
                n = sizeof name - 1;
            memcpy(name, *e, n);
            name[n] = '\0';
            unsetenv(name);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rank, size;
    while (clear_one())
        ;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("cleared rank %d of %d\n", rank, size);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
