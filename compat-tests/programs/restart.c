/* An MPI program that resumes from its checkpoint, as codes run under a launcher that
 * restarts them (kauri -max-restarts) are written: five steps of an all-reduce, rank 0
 * writing the step reached and the running total to the file argv[1] after each. In the
 * first attempt (KAURI_RESTART_COUNT 0) rank 1 calls MPI_Abort(MPI_COMM_WORLD, 7) at step 2;
 * started again, every rank resumes at the checkpoint's step and prints
 *
 *   restart: rank R of N: restart K total T
 *
 * (T: the sum over the five steps of 1 + 2 + ... + N, whatever attempt ran each step). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, step = 0;
    long total = 0;
    const char *restart = getenv("KAURI_RESTART_COUNT");
    FILE *f;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2)
        MPI_Abort(MPI_COMM_WORLD, 2);
    if (rank == 0 && (f = fopen(argv[1], "r")) != NULL) {
        if (fscanf(f, "%d %ld", &step, &total) != 2)
            step = 0, total = 0;
        fclose(f);
    }
    MPI_Bcast(&step, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(&total, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    for (; step < 5; step++) {
        long mine = rank + 1, sum = 0;
        if (restart && strcmp(restart, "0") == 0 && rank == 1 && step == 2)
            MPI_Abort(MPI_COMM_WORLD, 7);
        MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        total += sum;
        if (rank == 0 && (f = fopen(argv[1], "w")) != NULL) {
            fprintf(f, "%d %ld\n", step + 1, total);
            fclose(f);
        }
    }
    printf("restart: rank %d of %d: restart %s total %ld\n", rank, size,
           restart ? restart : "unset", total);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
